"""Peak memory (RSS) of one MIEScore scoring call, measured in a process of its own so that peaks do not mix.

Loads the checkpoint, resets the peak (``/proc/self/clear_refs``, Linux), scores the workload once and prints
JSON: ``rss_mib`` (resident after loading and reading every weight once: safetensors are memory-mapped, so
weights not yet read would otherwise count as the call's memory), ``peak_mib`` (the high-water mark during
the call) and ``extra_mib`` (their difference: what the call needed beyond the loaded model). Used by
bench_realistic.py.

    python benchmarks/peak_rss.py --model CKPT --sources 2 --edits 4 --batch-size 4 [--no-reuse] [--size 512]
"""

from __future__ import annotations

import argparse
import json
import re


def memory_mib() -> dict[str, float]:
    status = open("/proc/self/status").read()
    return {key: int(re.search(rf"{key}:\s+(\d+)", status).group(1)) / 1024 for key in ("VmRSS", "VmHWM")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--sources", type=int, required=True)
    parser.add_argument("--edits", type=int, default=1, help="edits of the same sources (one group)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-reuse", action="store_true")
    args = parser.parse_args()

    import torch

    from bench_common import group_of_edits, real_photos
    from modeling_miescore.scoring.loading import load_scorer

    torch.set_num_threads(args.threads)
    model = load_scorer(args.model, device="cpu", dtype="float32")
    with torch.no_grad():  # safetensors are memory-mapped: read every weight so that it counts as loaded
        for parameter in model.parameters():
            parameter.sum()
    samples = group_of_edits(real_photos(args.size), args.sources, args.edits)
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the high-water mark restarts at the current RSS
    before = memory_mib()
    model.score_batch(samples, batch_size=args.batch_size, reuse_prefix=not args.no_reuse)
    after = memory_mib()
    print(json.dumps({"rss_mib": before["VmRSS"], "peak_mib": after["VmHWM"],
                      "extra_mib": after["VmHWM"] - before["VmRSS"]}))


if __name__ == "__main__":
    main()
