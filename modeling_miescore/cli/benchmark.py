"""``miescore benchmark``: evaluate an evaluator on MIE-Bench / MER-Bench, or rank editing models.

With ``--model`` the scores are kept in ``DIR/predictions.jsonl`` and a rerun resumes from it. ``mer-bench --grid``
picks its best cell only on held-out splits, as the paper searches on a disjoint validation set (B.1.3).
Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# only the error class at import time: `miescore --help` and the other subcommands never pay for scipy/pandas
from ..hub.errors import MIEScoreInputError
from .main import COMMAND_HELP, add_device_args, number_arg, quiet_transformers
from ..data.input_export import export_mie_inputs, input_cache_dir
from ..evaluation.model_runs import check_prediction_cache, score_mer_with_spatialreward
from ..scoring.jsonl_scoring import read_done_ids, score_jsonl, make_output_folder
from ..scoring.loading import load_scorer, model_reference, read_checkpoint_config
from ..evaluation.instance_bootstrap import BootstrapSettings
from ..data.dataset_splits import load_split, mie_bench_frame, mer_split_names, mer_bench_frame
from ..evaluation.prediction_files import (align_predictions, join_scores, read_group_predictions,
                                           read_group_sub_scores, read_score_predictions)
from ..evaluation.protocol import package_version, scores_protocol
from ..evaluation.report import write_report, REPORT_FILES, write_json
from ..evaluation.report_parts import ci_state, fmt_ci, logistic_status
from ..data.schema import SHORT_NAMES
from ..evaluation.plots import mie_bench_plots, aggregation_grid_plot, mer_bench_plots, editing_models_plots
from ..evaluation.aggregation_grid import DEFAULT_GRID, aggregation_grid, grid_summary, parse_grid_values
from ..evaluation.mer_bench_report import mer_bench_report

_PRED_HELP_MIE = ('JSONL, one line per edit: {"id": <dataset id>, "visual_quality": x, "instruction_following": x, '
                  '"attribute_preservation": x, "overall": x} (e.g. the output of "miescore score-batch"); '
                  "any subset of the score keys works")
_PRED_HELP_MER = ('JSONL, one line per group: {"pair_id": <dataset pair_id>, "scores": [s_1, ..., s_K]} with one '
                  "score per edited image in the dataset's order (best first); higher = better; null = no score "
                  '(counted wrong); optional "sub_scores" (SpatialReward\'s four sub-scores per image) for --grid')


def _common(parser: argparse.ArgumentParser, *, pred_help: str, model_help: str, dataset_required: bool = True,
            split_default: str = "test", split_help: str = "dataset split (default: %(default)s)") -> None:
    parser.add_argument("--dataset", required=dataset_required, metavar="DIR_OR_REPO",
                        help="Hub-native dataset folder (from 'miescore build-dataset') or Hub repo id")
    parser.add_argument("--split", default=split_default, help=split_help)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--predictions", metavar="JSONL", help=pred_help)
    source.add_argument("--model", metavar="CKPT", help=model_help)
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder for report.md, report.json, plots/")
    add_report_args(parser, "instances")
    add_evaluation_run_args(parser)


def add_report_args(parser: argparse.ArgumentParser, resampled: str) -> None:
    """The confidence intervals and plots of a report (here and in :mod:`.editor_benchmarks`): ``--bootstrap``
    (resamples of the ``resampled`` units), ``--level``, ``--seed``, ``--no-plots``."""
    parser.add_argument("--bootstrap", type=number_arg(int, minimum=0), default=1000, metavar="N",
                        help=f"bootstrap resamples of {resampled} for the confidence intervals; 0 = none "
                             "(default: %(default)s)")
    parser.add_argument("--level", type=number_arg(float, minimum=0.0, maximum=1.0, exclusive=True), default=0.95,
                        help="confidence level (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    parser.add_argument("--no-plots", action="store_true", help="no plots: report.md/report.json only")


def bootstrap_settings(args) -> BootstrapSettings:
    """The :class:`BootstrapSettings` of :func:`add_report_args`' options (and ``--no-progress``)."""
    return BootstrapSettings(n=args.bootstrap, seed=args.seed, level=args.level, progress=not args.no_progress)


def add_evaluation_run_args(parser: argparse.ArgumentParser) -> None:
    """The options every evaluator benchmark shares (here and in :mod:`.external_benchmarks`): ``--allow-missing``,
    and with ``--model`` its ``--batch-size``, ``--device`` and ``--dtype``; ``--no-progress``."""
    parser.add_argument("--allow-missing", action="store_true",
                        help="evaluate the ids present in both dataset and predictions instead of stopping")
    parser.add_argument("--batch-size", type=number_arg(int, minimum=1), default=8,
                        help="scoring batch size with --model (default: %(default)s)")
    add_device_args(parser, when="with --model: ")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def register(subparsers) -> None:
    bench = subparsers.add_parser(
        "benchmark", help=COMMAND_HELP["benchmark"],
        description="Write a report (report.md, report.json, plots/) that compares an evaluator with human "
                    "judgements, or ranks editing models by predicted scores.")
    kinds = bench.add_subparsers(dest="kind", required=True)  # more kinds: modules naming it PARENT_COMMAND

    mie = kinds.add_parser("mie-bench", help="SRCC/KRCC/PLCC with human MOS, per task, model ranking",
                           description="How human-aligned is an evaluator on MIE-Bench? MIEScore paper tables 3, 4, "
                                       "12-15 and figure 2, every number with a bootstrap CI over instances.")
    _common(mie, pred_help=_PRED_HELP_MIE,
            model_help="a MIEScore checkpoint folder or Hub repo id to score the split with")
    _cache_dir_arg(mie)
    mie.set_defaults(func=cmd_mie_bench)

    mer = kinds.add_parser("mer-bench", help="K-pair group accuracy and Kendall tau",
                           description="MER-Bench 2-P/3-P/4-P/overall accuracy and tau, per category "
                                       "(SpatialReward paper tables 1-2).")
    _common(mer, pred_help=_PRED_HELP_MER, model_help="a SpatialReward checkpoint to score the groups with",
            split_default=None, split_help="comma-separated splits (default: every <K>pair split the dataset has)")
    mer.add_argument("--grid", action="store_true",
                     help="re-aggregate the predictions' sub_scores (SpatialReward: s_if, s_con, naturalness, "
                          "artifacts) over a grid of alpha and SC weights, without the model (paper B.1.3, "
                          "figure 10): writes grid.json, grid.png and the best cell in the report")
    mer.add_argument("--grid-alpha", default=None, metavar="LIST",
                     help="with --grid: comma-separated alpha values in [0, 1] (default: 0, 0.1, ..., 1)")
    mer.add_argument("--grid-w-con", default=None, metavar="LIST",
                     help="with --grid: comma-separated source-consistency weights in [0, 1], w_if = 1 - w_con "
                          "(default: 0, 0.1, ..., 1)")
    mer.add_argument("--grid-split", default=None, metavar="SPLITS",
                     help="with --grid: search the grid on these splits of --dataset, held out of --split (the "
                          "paper searches on a disjoint validation set), and report the best cell there and on "
                          "--split; without it the grid runs on the reported groups and no best cell is picked")
    mer.set_defaults(func=cmd_mer_bench)

    ed = kinds.add_parser("editing-models", help="leaderboard of editing models by predicted scores per task",
                          description="Rank editing models by the evaluator's mean predicted VQ/IF/AP/overall, per "
                                      "task and category (MIEScore paper tables 8-11 layout).")
    _common(ed, pred_help=_PRED_HELP_MIE + '; without --dataset each line also needs "editing_model" and "task" '
                                          '(optional "instance_id")',
            model_help="a MIEScore checkpoint to score the dataset split with (needs --dataset)",
            dataset_required=False)
    _cache_dir_arg(ed)
    ed.set_defaults(func=cmd_editing_models)
    return kinds


def _cache_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="with --model: where the split's images are exported for scoring, a cache kept "
                             "between runs (default: $HF_HOME/miescore, beside the Hugging Face caches)")


def _score_with_miescore(ds, args, out: Path) -> Path:
    """Score a MIE-Bench-format split with a MIEScore checkpoint into ``out/predictions.jsonl`` (resumable)."""
    config = read_checkpoint_config(args.model)
    if config.get("model_type") != "miescore":
        raise MIEScoreInputError(
            f"--model '{args.model}' is not a MIEScore checkpoint (model_type={config.get('model_type')!r}); "
            "score the split with your evaluator and pass --predictions instead")
    check_prediction_cache(out, {"model": model_reference(args.model), "dataset": model_reference(args.dataset),
                                 "split": args.split})
    progress = not args.no_progress
    preds = out / "predictions.jsonl"
    done, _ = read_done_ids(preds)
    if done.issuperset(str(i) for i in ds["id"]):  # a finished run: report again without loading the model
        print(f"all {len(ds)} edits already scored in '{preds}'", file=sys.stderr)
        return preds
    inputs = export_mie_inputs(ds, input_cache_dir(ds, args.cache_dir), progress=progress)
    quiet_transformers()
    model = load_scorer(args.model, device=args.device, dtype=args.dtype)
    report = score_jsonl(lambda samples, b: model.score_batch(samples, batch_size=b), inputs, preds,
                         batch_size=args.batch_size, on_error="stop", progress=progress)
    print(f"scored {report.scored} edits, {report.skipped_existing} already in '{preds}'", file=sys.stderr)
    return preds


def _mie_predictions(args, out: Path, *, require_mos: bool, verb: str):
    """``(joined frame, predictions frame, predictions path, Alignment)`` of the MIE-Bench split and its
    predictions (from --predictions, or scored with --model)."""
    ds = load_split(args.dataset, args.split)
    frame = mie_bench_frame(ds, require_mos=require_mos)
    preds_path = _score_with_miescore(ds, args, out) if args.model else Path(args.predictions)
    preds = read_score_predictions(preds_path)
    joined, alignment = join_scores(frame, preds, allow_missing=args.allow_missing, source=str(preds_path))
    if not alignment.ok:
        print(f"warning: {alignment.describe()}; {verb} the {alignment.n_matched} matched ids", file=sys.stderr)
    return joined, preds, preds_path, alignment


def _finish(args, out: Path, report: dict, *, preds_path: Path, alignment, plots_fn) -> int:
    """Record the run (and the id alignment), draw the plots unless --no-plots, write report.json/report.md."""
    if alignment is not None:
        report["alignment"] = alignment.to_dict()
    report["run"] = {"dataset": args.dataset, "split": args.split, "miescore_version": package_version(),
                     "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                     **({"model": args.model} if args.model else {}), "predictions": str(preds_path)}
    report["protocol"] = scores_protocol(
        report["benchmark"], datasets=[{"dataset": args.dataset, "split": args.split,
                                        "keys": alignment.n_matched if alignment is not None else None}],
        predictions=[preds_path], model=args.model,
        aggregation={"bootstrap": {"n": args.bootstrap, "seed": args.seed, "level": args.level},
                     "allow_missing": bool(args.allow_missing)})
    if not args.no_plots:
        report["plots"] = plots_fn()
    json_path, md_path = write_report(out, report)
    print(f"wrote {md_path}, {json_path}, {out / 'report.html'}"
          + (f" and {len(report['plots'])} plots" if report.get("plots") else ""))
    return 0


def _warn_without_cis(report: dict) -> None:
    """Say on stderr when the report has no intervals because the split has too few instances (samples)."""
    state, settings = ci_state(report)
    if state == "omitted":
        print(f"warning: no confidence intervals: {settings['omitted']}; the report gives point estimates only",
              file=sys.stderr)


def _warn_unusable_fits(report: dict) -> None:
    """Say on stderr which dimensions' logistic fit was degenerate (or failed, or needed the bounded refit)."""
    for d in report["meta"]["dimensions"]:
        c = report["correlations"][d]
        status, message = logistic_status(c), c.get("logistic", {}).get("message")
        if status in ("degenerate", "failed"):
            print(f"warning: {SHORT_NAMES[d]}: the 4-parameter logistic fit is {status} ({message}); the report gives "
                  "raw PLCC only", file=sys.stderr)
        elif status == "constrained":
            print(f"note: {SHORT_NAMES[d]}: {message}", file=sys.stderr)


def _headline(name: str, metric: dict, digits: int = 4) -> str:
    return f"  {name:<28}{fmt_ci(metric, digits)}"


def cmd_mie_bench(args) -> int:
    from ..evaluation.mie_bench_report import mie_bench_report  # deferred: loads scipy
    out = make_output_folder(args.out, "--out: ", {"--predictions": args.predictions}, REPORT_FILES)
    joined, preds, preds_path, alignment = _mie_predictions(args, out, require_mos=True, verb="evaluating")
    report = mie_bench_report(joined, bootstrap=bootstrap_settings(args))
    report["overall_computed"] = bool(preds.attrs.get("overall_computed"))
    _warn_without_cis(report)
    _warn_unusable_fits(report)
    meta = report["meta"]
    print(f"MIE-Bench {args.split}: {meta['n_items']} edits, {meta['n_instances']} instances, SRCC with human MOS:")
    for d in report["meta"]["dimensions"]:
        print(_headline(SHORT_NAMES[d], report["correlations"][d]["srcc"]))
    return _finish(args, out, report, preds_path=preds_path, alignment=alignment,
                   plots_fn=lambda: mie_bench_plots(joined, report, out))


def _score_mer_with_model(splits: dict, args, out: Path) -> Path:
    """Score MER-Bench groups with a SpatialReward checkpoint into ``out/predictions.jsonl`` (resumable)."""
    config = read_checkpoint_config(args.model)
    model_type = config.get("model_type")
    if model_type not in ("spatialreward", "qwen3_vl"):
        raise MIEScoreInputError(
            f"mer-bench --model needs a SpatialReward checkpoint (model_type 'spatialreward', or the authors' plain "
            f"Qwen3-VL release), but '{args.model}' has model_type={model_type!r}; score the groups with your "
            "evaluator and pass --predictions")
    quiet_transformers()
    identity = {"model": model_reference(args.model), "dataset": model_reference(args.dataset),
                "splits": sorted(splits)}
    preds = score_mer_with_spatialreward(splits, args.model, out, device=args.device, dtype=args.dtype,
                                         batch_size=args.batch_size, progress=not args.no_progress,
                                         identity=identity)
    print(f"predictions in '{preds}'", file=sys.stderr)
    return preds


def _mer_split_names(args) -> list[str]:
    """``--split`` as a list; by default every ``<K>pair`` split of the dataset (recorded in ``args.split``)."""
    if args.split is None:
        names = mer_split_names(args.dataset)
    else:
        names = [s.strip() for s in args.split.split(",") if s.strip()]
        if not names:
            raise MIEScoreInputError("--split is empty; pass e.g. 2pair,3pair,4pair")
    args.split = ",".join(names)
    return names


def _grid_split_names(args, reported: list[str]) -> list[str]:
    """``--grid-split`` as a list of splits held out of the reported ones (a split in both is refused)."""
    if not args.grid_split:
        return []
    if not args.grid:
        raise MIEScoreInputError("--grid-split needs --grid")
    names = [s.strip() for s in args.grid_split.split(",") if s.strip()]
    both = sorted(set(names) & set(reported))
    if both:
        raise MIEScoreInputError(
            f"--grid-split {','.join(both)} is also reported (--split {','.join(reported)}): the best cell must not be "
            "picked on the groups the report evaluates; give --split and --grid-split disjoint splits")
    return names


def _mer_grid(args, out: Path, frame, preds_path: Path, grid_frame=None):
    """``--grid``: ``(cells, summary)`` of the aggregation-weight grid, written to grid.json; searched on the
    held-out ``grid_frame`` (``--grid-split``), or in-sample on ``frame`` with no best cell picked."""
    alphas = parse_grid_values(args.grid_alpha, "--grid-alpha") if args.grid_alpha else DEFAULT_GRID
    w_cons = parse_grid_values(args.grid_w_con, "--grid-w-con") if args.grid_w_con else DEFAULT_GRID
    search = frame if grid_frame is None else grid_frame
    subs = read_group_sub_scores(preds_path, search)
    cells = aggregation_grid([subs[p] for p in search["pair_id"]], alphas, w_cons)
    reported_cells = None
    if grid_frame is not None:
        reported = read_group_sub_scores(preds_path, frame)
        reported_cells = aggregation_grid([reported[p] for p in frame["pair_id"]], alphas, w_cons)
    summary = grid_summary(cells, len(search), searched_on=sorted(set(search["split"])),
                           reported_cells=reported_cells, reported_on=sorted(set(frame["split"])))
    write_json(out / summary["file"], cells)
    if summary["best"]:
        best = summary["best"][0]
        print(f"Aggregation grid ({len(cells)} cells, searched on {','.join(summary['searched_on'])}): best accuracy "
              f"{best['accuracy']:.3f} at alpha={best['alpha']:g}, w_if={best['w_if']:g}, w_con={best['w_con']:g}"
              + (f" ({len(summary['best'])} cells tie)" if len(summary["best"]) > 1 else "")
              + f"; on the reported {','.join(summary['reported_on'])}: {best['reported_accuracy']:.3f}")
    else:
        print(f"Aggregation grid ({len(cells)} cells) on the reported groups: no best cell picked "
              "(in-sample; pass --grid-split with held-out splits)")
    for reading in summary["paper_readings"].values():
        print(f"  {reading['label']}: {reading['accuracy']:.3f}"
              + (f" (reported: {reading['reported_accuracy']:.3f})" if "reported_accuracy" in reading else ""))
    return cells, summary


def _print_mer_summary(args, report: dict) -> None:
    """The console summary; groups without a usable score are said here too, not only in report.md."""
    meta, acc = report["meta"], report["accuracy"]
    n_missing, n = meta["groups_with_missing_scores"], meta["n_groups"]
    if 0 < n_missing < n:
        print(f"warning: {n_missing} of {n} groups have a missing (null) score; they count as wrong", file=sys.stderr)
    _warn_without_cis(report)
    print(f"MER-Bench ({args.split}): {n} groups from {meta['n_samples']} samples")
    if n_missing == n:
        print(f"  NO PREDICTIONS: every one of the {n} groups has a missing (null) score (a failed model run?), so "
              "every number below is 0 by construction")
    for k in sorted(acc["by_size"], key=int):
        print(_headline(f"{k}-P accuracy", acc["by_size"][k], 3))
    print(_headline("Overall accuracy", acc["overall"], 3))
    print(_headline("Kendall tau (tie = 0)", report["tau"]["overall"], 3))
    print(_headline("Kendall tau (as released)", report["tau_as_released"]["overall"], 3))


def cmd_mer_bench(args) -> int:
    out = make_output_folder(args.out, "--out: ", {"--predictions": args.predictions}, REPORT_FILES)
    names = _mer_split_names(args)
    grid_names = _grid_split_names(args, names)
    splits = {name: load_split(args.dataset, name) for name in names}
    grid_splits = {name: load_split(args.dataset, name) for name in grid_names}
    frame = mer_bench_frame(splits)
    preds_path = (_score_mer_with_model({**splits, **grid_splits}, args, out) if args.model
                  else Path(args.predictions))
    grid_frame = mer_bench_frame(grid_splits) if grid_splits else None
    scores = read_group_predictions(preds_path, frame)
    if grid_frame is not None:  # the held-out groups' lines are the grid's, not extra predictions
        held_out = set(grid_frame["pair_id"])
        scores = {p: v for p, v in scores.items() if p not in held_out}
    alignment = align_predictions(frame["pair_id"].tolist(), scores, allow_missing=args.allow_missing,
                                  source=str(preds_path), what="pair id")
    if not alignment.ok:
        print(f"warning: {alignment.describe('pair id')}; evaluating the {alignment.n_matched} matched groups",
              file=sys.stderr)
    frame = frame[frame["pair_id"].isin(set(scores))].reset_index(drop=True)
    report = mer_bench_report(frame, scores, bootstrap=bootstrap_settings(args))
    _print_mer_summary(args, report)
    grid = _mer_grid(args, out, frame, preds_path, grid_frame) if args.grid else None
    if grid:
        report["aggregation_grid"] = grid[1]

    def plots():
        paths = mer_bench_plots(report, out)
        if grid:
            paths["aggregation_grid"] = aggregation_grid_plot(*grid, out)
        return paths

    return _finish(args, out, report, preds_path=preds_path, alignment=alignment, plots_fn=plots)


def cmd_editing_models(args) -> int:
    from ..evaluation.editing_models_report import editing_models_report, frame_from_predictions  # deferred: scipy
    out = make_output_folder(args.out, "--out: ", {"--predictions": args.predictions}, REPORT_FILES)
    alignment = None
    if args.dataset is None:
        if args.model:
            raise MIEScoreInputError("--model needs --dataset (the edits to score)")
        preds_path = Path(args.predictions)
        frame = frame_from_predictions(read_score_predictions(args.predictions), args.predictions)
    else:
        frame, _, preds_path, alignment = _mie_predictions(args, out, require_mos=False, verb="ranking on")
    report = editing_models_report(frame, bootstrap=bootstrap_settings(args))
    dims = report["meta"]["dimensions"]
    order = "overall" if "overall" in dims else dims[-1]
    _warn_without_cis(report)
    meta = report["meta"]
    print(f"Editing models ranked by predicted {SHORT_NAMES[order]} ({meta['n_items']} edits, "
          f"{meta['n_instances']} instances, {meta['n_tasks']} tasks):")
    for row in report["leaderboard"][order]:
        print(_headline(f"{row['rank']:>2}. {row['model']}", row["all"], 2))
    return _finish(args, out, report, preds_path=preds_path, alignment=alignment,
                   plots_fn=lambda: editing_models_plots(report, out))
