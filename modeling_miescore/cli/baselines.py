"""``miescore baselines``: the Table 3 baseline metrics per edit of a MIE-Bench split, one resumable predictions file
per metric (:mod:`modeling_miescore.baselines`).
"""

from __future__ import annotations


from ..hub.errors import MIEScoreInputError
from .main import COMMAND_HELP, finish_run
from ..baselines.registry import BASELINES
from ..baselines.compute import output_paths, compute_mie_bench_baselines
from ..baselines.scorers import load_evaluator, parse_evaluator_options
from ..scoring.jsonl_scoring import check_output_file


def register(sub) -> None:
    parser = sub.add_parser(
        "baselines", help=COMMAND_HELP["baselines"],
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
    parser.add_argument("--evaluator", metavar="MODULE:FUNCTION",
                        help="instead of --metrics: a single-source evaluator, evaluate(source, edited, instruction) "
                             "-> a number or {score key: number}, run on each source and averaged (the paper's "
                             "protocol for single-source methods); e.g. "
                             "modeling_miescore.baselines.editscore_adapter:editscore")
    parser.add_argument("--evaluator-option", action="append", default=[], metavar="KEY=VALUE",
                        help="with --evaluator: call MODULE:FUNCTION with these keyword options first (a factory that "
                             "returns the evaluator, e.g. model_name_or_path=...); repeatable; values read as JSON "
                             "when they parse")
    parser.add_argument("--evaluator-name", metavar="NAME",
                        help="with --evaluator: the predictions' metric name (default: the function's name)")
    parser.add_argument("--out", metavar="JSONL",
                        help="predictions file; with several metrics a path containing {metric}, e.g. "
                             "'preds-{metric}.jsonl'; appended to, ids already there are skipped")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--list", action="store_true", help="list the Table 3 rows, their metric names and status")
    parser.set_defaults(func=cmd_baselines)


def baselines_table() -> str:
    """One line per Table 3 row (name, status, kind, library metric, direction, paper row), then how each row runs
    here, or why it does not."""
    rows = [("name", "status", "kind", "library:metric", "better", "Table 3 row")]
    for b in BASELINES.values():
        direction = "-" if (b.unavailable or b.runs_via) else ("lower" if b.lower_better else "higher")
        rows.append((b.name, b.status, b.kind, f"{b.library}:{b.metric_id}" if b.library else "-", direction,
                     b.paper_row))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
    how = [f"  {b.name}: {b.how}" for b in BASELINES.values()]
    return "\n".join(lines + ["", "How each row runs here:"] + how)


def _evaluator(args):
    """The single-source evaluator of ``--evaluator`` (its factory called with the options), after the output path
    is checked (a model is not loaded for a run that cannot write)."""
    name = args.evaluator_name or args.evaluator.rpartition(":")[2]
    for path in output_paths(args.out, [name]).values():
        check_output_file(path)
    return load_evaluator(args.evaluator, parse_evaluator_options(args.evaluator_option), name)


def cmd_baselines(args) -> int:
    if args.list:
        print(baselines_table())
        return 0
    if args.evaluator and args.metrics:
        raise MIEScoreInputError("give --metrics or --evaluator, not both")
    if (args.evaluator_option or args.evaluator_name) and not args.evaluator:
        raise MIEScoreInputError("--evaluator-option and --evaluator-name need --evaluator")
    missing = [flag for flag, value in (("--dataset", args.dataset), ("--metrics or --evaluator",
                                                                      args.metrics or args.evaluator),
                                        ("--out", args.out)) if not value]
    if missing:
        raise MIEScoreInputError(f"missing {', '.join(missing)}; e.g. --dataset DIR --metrics ssim,ms_ssim "
                                 "--out 'preds-{metric}.jsonl' (or --list)")

    evaluator = _evaluator(args) if args.evaluator else None
    report = compute_mie_bench_baselines(args.dataset, args.split, args.metrics, args.out, device=args.device,
                                         progress=not args.no_progress, evaluator=evaluator)
    return finish_run("\n".join(f"{name}: wrote {report.written[name]} edits, skipped {report.skipped_existing[name]} "
                                 f"already in '{path}'" for name, path in report.outputs.items()),
                      f"{len(report.errors)} edit/metric pairs could not be computed (listed above); fix them and "
                      "rerun the same command to compute them" if report.errors else None)
