"""Shared-prefix reuse vs none for groups of 12 edits (2 and 3 sources at 512x512), tiny MIEScore, CPU.

For each setting both paths score the same 12 edits in the same process, alternating every repeat; the script
prints the best wall time of each, the speed-up in wall and in CPU (process) time, the maximum score difference,
and the token arithmetic that predicts the speed-up: full forwards process G*L language tokens and
G*(n_sources + 1) images, the prefix path P + G*S tokens and n_sources + G images, so the ceiling where every
token costs the same is G*L / (P + G*S); where attention dominates (the tiny model), counting query-key pairs
instead gives G*L^2/2 / (P^2/2 + G*S*(P + S/2)).

    python benchmarks/bench_prefix_reuse.py [--group-size 12] [--batch-size 12] [--threads 2]
"""

from __future__ import annotations

from bench_common import benchmark_args, group_of_edits, interleaved_best, real_photos, tiny_scorer
from realistic_costs import token_counts


def main():
    _, args = benchmark_args(__doc__, [("--group-size", int, 12, "edits per group (G)"),
                                       ("--batch-size", int, 12, "edits per forward pass")], repeats=5)
    model = tiny_scorer()
    images = real_photos(512)
    print(f"tiny MIEScore, CPU {args.threads} threads, G={args.group_size} edits per group, images 512x512, "
          f"batch {args.batch_size}; skill rubric in the prefix")
    print(f"{'sources':>7} {'L':>6} {'P':>6} {'S':>5} {'ceiling':>8} {'pairs':>6} {'no reuse s':>11} {'reuse s':>8} "
          f"{'speed-up':>9} {'CPU-time ratio':>15} {'max |diff|':>11}")
    for num_sources in (2, 3):
        samples = group_of_edits(images, num_sources, args.group_size)
        model.score_batch(samples[:2], batch_size=2)  # warm-up
        (full_t, full_cpu, full), (reuse_t, reuse_cpu, reused) = interleaved_best(
            [lambda: model.score_batch(samples, batch_size=args.batch_size, reuse_prefix=False),
             lambda: model.score_batch(samples, batch_size=args.batch_size)], args.repeats)
        length, prefix, suffix, _ = token_counts(model, samples[0])
        ceiling = args.group_size * length / (prefix + args.group_size * suffix)
        pairs = args.group_size * length**2 / 2 / (prefix**2 / 2 + args.group_size * suffix * (prefix + suffix / 2))
        diff = max(abs(a[k] - b[k]) for a, b in zip(full, reused) for k in a)
        print(f"{num_sources:>7} {length:>6} {prefix:>6} {suffix:>5} {ceiling:>7.2f}x {pairs:>5.2f}x {full_t:>11.2f} "
              f"{reuse_t:>8.2f} {full_t / reuse_t:>8.2f}x {full_cpu / reuse_cpu:>14.2f}x {diff:>11.2e}")


if __name__ == "__main__":
    main()
