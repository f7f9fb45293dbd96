"""Batched vs per-sample MIEScore scoring throughput on CPU with the tiny checkpoint.

Each sample has 3 images at 512x512 (2 sources + the edited image), built from real photos. Both paths run in
the same process on the same samples, alternating every repeat; the script prints the best samples/s of each
and their ratio.

    python benchmarks/bench_scoring.py [--samples 24] [--batch-size 8] [--threads 2]
"""

from __future__ import annotations

from bench_common import benchmark_args, interleaved_best, photo_samples, tiny_scorer


def main():
    _, args = benchmark_args(__doc__, [("--samples", int, 24, "edits scored"),
                                       ("--batch-size", int, 8, "edits per forward pass")])
    model = tiny_scorer()
    samples = photo_samples(args.samples, 512)
    model.score_batch(samples[:2], batch_size=2)  # warm-up

    (per_sample, _, _), (batched, _, _) = interleaved_best(
        [lambda: [model.score(**s) for s in samples], lambda: model.score_batch(samples, batch_size=args.batch_size)],
        args.repeats)
    n = len(samples)
    print(f"tiny MIEScore on CPU ({args.threads} threads), {n} samples x 3 images at 512x512")
    print(f"per-sample : {n / per_sample:7.2f} samples/s ({per_sample:.2f} s)")
    print(f"batched {args.batch_size:>2} : {n / batched:7.2f} samples/s ({batched:.2f} s)")
    print(f"ratio batched / per-sample: {per_sample / batched:.2f}x")


if __name__ == "__main__":
    main()
