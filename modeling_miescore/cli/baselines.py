"""``miescore baselines``: the Table 3 baseline metrics per edit of a MIE-Bench split, as predictions files.

::

    miescore baselines --dataset DIR_OR_REPO --split test --metrics ssim,ms_ssim --out 'preds-{metric}.jsonl'
    miescore benchmark mie-bench --dataset DIR_OR_REPO --split test --predictions preds-ssim.jsonl --out report-ssim
    miescore baselines --list

Resumable (rerun the same command), one file per metric; see :mod:`modeling_miescore.baselines`.
"""

from __future__ import annotations

import sys

from ..image_io import MIEScoreInputError
from .main import EXIT_PARTIAL


def register(sub) -> None:
    parser = sub.add_parser(
        "baselines", help="compute Table 3 baseline metrics (SSIM, LPIPS, BRISQUE, CLIPScore, ...) per edit",
        description="Compute classical and vision-language baselines of the MIEScore paper's Table 3 for every edit "
                    "of a MIE-Bench split and write them as predictions for 'miescore benchmark mie-bench "
                    "--predictions'. Full-reference metrics compare the edited image with each source (resized to "
                    "the edited image's size) and average; no-reference metrics score the edited image; text-image "
                    "metrics compare the instruction with the edited image. Weights are never downloaded: a "
                    "missing file is named with the folder to copy it into.")
    parser.add_argument("--dataset", metavar="DIR_OR_REPO",
                        help="MIE-Bench folder (from 'miescore build-dataset mie-bench') or Hub repo id")
    parser.add_argument("--split", default="test", help="dataset split (default: %(default)s)")
    parser.add_argument("--metrics", metavar="NAMES", help="comma-separated metric names, e.g. ssim,ms_ssim (--list)")
    parser.add_argument("--out", metavar="JSONL",
                        help="predictions file; with several metrics a path containing {metric}, e.g. "
                             "'preds-{metric}.jsonl'; appended to, ids already there are skipped")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--list", action="store_true", help="list the Table 3 rows, their metric names and status")
    parser.set_defaults(func=cmd_baselines)


def baselines_table() -> str:
    """One line per Table 3 row: name, status, kind, library metric, direction, paper row (and why not, if not)."""
    from ..baselines.registry import BASELINES

    rows = [("name", "status", "kind", "library:metric", "better", "Table 3 row")]
    for b in BASELINES.values():
        rows.append((b.name, b.status, b.kind, f"{b.library}:{b.metric_id}" if b.library else "-",
                     "-" if b.unavailable else ("lower" if b.lower_better else "higher"), b.paper_row))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
    notes = [f"  {b.name}: {b.unavailable}" for b in BASELINES.values() if b.unavailable]
    return "\n".join(lines + ["", "Out of scope here:"] + notes)


def cmd_baselines(args) -> int:
    if args.list:
        print(baselines_table())
        return 0
    missing = [flag for flag, value in (("--dataset", args.dataset), ("--metrics", args.metrics), ("--out", args.out))
               if not value]
    if missing:
        raise MIEScoreInputError(f"missing {', '.join(missing)}; e.g. --dataset DIR --metrics ssim,ms_ssim "
                                 "--out 'preds-{metric}.jsonl' (or --list)")
    from ..baselines.compute import compute_mie_bench_baselines

    report = compute_mie_bench_baselines(args.dataset, args.split, args.metrics, args.out, device=args.device,
                                         progress=not args.no_progress)
    for name, path in report.outputs.items():
        print(f"{name}: wrote {report.written[name]} edits, skipped {report.skipped_existing[name]} already in "
              f"'{path}'", file=sys.stderr)
    if report.errors:
        print(f"{len(report.errors)} edit/metric pairs could not be computed (listed above); fix them and rerun "
              "the same command to compute them", file=sys.stderr)
        return EXIT_PARTIAL
    return 0
