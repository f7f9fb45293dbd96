"""SpatialReward with shared-prefix reuse vs the plain path: groups of G = 12 edits (SpatialReward's Flow-GRPO
group size, appendix B.2.1; MIE-Bench's 12 edits per instance), 2 and 3 sources, tiny sharpened checkpoint, CPU.

Both paths judge the same G edits in the same process (greedy); the script prints each path's time, the speed-up,
whether all SC and PQ texts are identical (texts of the last repeat of each path), and the token arithmetic.
Only the SC prefix (chat start + source images) is shared: SpatialReward's prompt puts the long D.1 text AFTER
the edited image, so it stays in every suffix. A batch holds B SC rows and their B PQ rows in both paths, so the
prefill LM tokens are 2*G*L (plain, PQ rows padded to the SC length) vs P + 2*G*S (reuse: the prefix once per
group, PQ rows padded to the SC suffix), and the vision tower encodes G*(n+2) vs n+2G images; decoding is the
same in both, so the end-to-end speed-up is below the prefill ratio and shrinks as --max-new-tokens grows.

    python benchmarks/bench_spatialreward_prefix_reuse.py [--group-size 12] [--batch-size 12] [--size 512]
        [--max-new-tokens 16] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench_common import benchmark_args, group_of_edits, interleaved_best, real_photos
from realistic_costs import spatialreward_token_counts


def main():
    _, args = benchmark_args(__doc__, [
        ("--group-size", int, 12, "edits per group (G)"), ("--batch-size", int, 12, "edits per generate call"),
        ("--size", int, 512, "side of the square source and edited images"),
        ("--max-new-tokens", int, 16, "tokens generated per pass")])

    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    with tempfile.TemporaryDirectory() as tmp:
        # max_pixels = size^2 keeps the images at full size (256 visual tokens at 512x512, as in Qwen3-VL)
        path = build_tiny_spatialreward(Path(tmp) / "tiny", max_new_tokens=args.max_new_tokens,
                                        max_pixels=args.size * args.size)
        model = SpatialRewardModel.from_pretrained(path).eval()
        model.get_processor()
    images = real_photos(args.size)
    print(f"tiny SpatialReward (sharpened), CPU {args.threads} threads, G={args.group_size} edits per group, "
          f"images {args.size}x{args.size}, batch {args.batch_size}, greedy, max_new_tokens {args.max_new_tokens}")
    print(f"{'sources':>7} {'L':>6} {'P':>6} {'S':>6} {'prefill ratio':>13} {'plain s':>8} {'reuse s':>8} "
          f"{'speed-up':>9} {'plain cpu s':>11} {'reuse cpu s':>11} {'cpu speed-up':>12} {'identical texts':>16}")
    for num_sources in (2, 3):
        samples = group_of_edits(images, num_sources, args.group_size)
        model.evaluate_edits(samples[:2], batch_size=2, reuse_prefix=False)  # warm-up
        (plain_t, plain_cpu, plain), (reuse_t, reuse_cpu, reused) = interleaved_best(
            [lambda: model.evaluate_edits(samples, batch_size=args.batch_size, reuse_prefix=False),
             lambda: model.evaluate_edits(samples, batch_size=args.batch_size, reuse_prefix=True)], args.repeats)
        length, prefix, _ = spatialreward_token_counts(model, samples[0])
        suffix = length - prefix
        ratio = (2 * args.group_size * length) / (prefix + 2 * args.group_size * suffix)  # prefix runs once
        identical = all(a.raw_sc == b.raw_sc and a.raw_pq == b.raw_pq for a, b in zip(plain, reused))
        distinct = len({r.raw_sc[0] for r in plain})
        print(f"{num_sources:>7} {length:>6} {prefix:>6} {suffix:>6} {ratio:>12.2f}x {plain_t:>8.2f} "
              f"{reuse_t:>8.2f} {plain_t / reuse_t:>8.2f}x {plain_cpu:>11.2f} {reuse_cpu:>11.2f} "
              f"{plain_cpu / reuse_cpu:>11.2f}x {str(identical):>16}  ({distinct}/{len(plain)} distinct SC texts)")


if __name__ == "__main__":
    main()
