"""``miescore benchmark zero-shot`` and ``miescore benchmark reward``: an evaluator on external benchmarks (the
paper's Table 6 / Table 1 layout with the published rows). With ``--model`` each dataset is scored first into
``DIR/<benchmark>/predictions.jsonl`` (resumable).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from .benchmark import add_evaluation_run_args
from .main import number_arg, quiet_transformers
from ..scoring.loading import load_scorer, load_spatialreward, read_checkpoint_config, model_reference
from ..evaluation.model_runs import check_prediction_cache
from ..evaluation.converted_benchmarks import load_benchmark
from ..evaluation.report import REPORT_FILES
from ..scoring.jsonl_scoring import make_output_folder
from ..evaluation.protocol import scores_protocol
from ..evaluation.prediction_files import read_score_predictions
from ..evaluation.instance_bootstrap import BootstrapSettings

__all__ = ["register"]

PARENT_COMMAND = "benchmark"  # these are subcommands of `miescore benchmark` (see cli.main.COMMAND_MODULES)


def _arguments(parser: argparse.ArgumentParser, *, bootstrap: bool) -> None:
    parser.add_argument("--dataset", action="append", required=True, metavar="DIR",
                        help="a converted benchmark folder (repeat for several benchmarks)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--predictions", action="append", metavar="JSONL",
                        help="predictions for the datasets, one file per --dataset, in the same order")
    source.add_argument("--model", metavar="CKPT", help="a MIEScore or SpatialReward checkpoint to score with")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder for report.md / report.json")
    parser.add_argument("--row-name", default=None, help="name of this run's row in the table "
                                                         "(default: the model folder's name, or 'predictions')")
    add_evaluation_run_args(parser)
    if bootstrap:
        parser.add_argument("--bootstrap", type=number_arg(int, minimum=0), default=0, metavar="N",
                            help="MER-Bench: bootstrap resamples for CIs (default: 0, point estimates)")


def register(kinds) -> None:
    """Add the ``zero-shot`` and ``reward`` subcommands to ``miescore benchmark`` (``kinds``: its subparsers)."""
    zero = kinds.add_parser("zero-shot", help="single-source benchmarks, MIEScore paper Table 6 layout",
                            description="Pairwise accuracy / SRCC on GenAI-Bench, AURORA-Bench, EditScore-Bench, "
                                        "ImagenHub, EBench-18K, EditReward-Bench and IEQA (converted with "
                                        "'miescore convert-benchmark'), beside the paper's Table 6.")
    _arguments(zero, bootstrap=False)
    zero.set_defaults(func=cmd_zero_shot)
    reward = kinds.add_parser("reward", help="reward benchmarks, SpatialReward paper Table 1 layout",
                              description="EditReward-Bench (EditScore's) PF/Cons./Ovrl., MMRB2 Single/Multi/Ovrl. "
                                          "and MER-Bench 2-P/3-P/4-P/Ovrl./tau, beside the paper's Table 1.")
    _arguments(reward, bootstrap=True)
    reward.set_defaults(func=cmd_reward)


def _load_model(args):
    model_type = read_checkpoint_config(args.model).get("model_type")
    quiet_transformers()
    if model_type == "miescore":
        return load_scorer(args.model, device=args.device, dtype=args.dtype)
    if model_type in ("spatialreward", "qwen3_vl"):
        return load_spatialreward(args.model, device=args.device, dtype=args.dtype)
    raise MIEScoreInputError(f"--model '{args.model}' has model_type={model_type!r}; pass a MIEScore or "
                             "SpatialReward checkpoint, or score with your evaluator and pass --predictions")


def _prediction_paths(args, benchmarks, out: Path) -> list[Path]:
    if args.predictions is not None:
        if len(args.predictions) != len(benchmarks):
            raise MIEScoreInputError(f"{len(benchmarks)} --dataset but {len(args.predictions)} --predictions; "
                                     "give one predictions file per dataset, in the same order")
        return [Path(p) for p in args.predictions]
    from ..evaluation.converted_scoring import needs_scoring, score_converted  # deferred: loads scipy
    scorer, paths = None, []
    for data in benchmarks:
        folder = out / data.name
        identity = {"model": model_reference(args.model), "dataset": model_reference(data.dataset)}
        check_prediction_cache(folder, identity)
        if needs_scoring(data, folder):  # the model is loaded only when something is left to score
            scorer = scorer or _load_model(args)
            score_converted(data, scorer, folder, batch_size=args.batch_size, progress=not args.no_progress,
                            identity=identity)
        else:
            print(f"all of {data.name} already scored in '{folder / 'predictions.jsonl'}'", file=sys.stderr)
        paths.append(folder / "predictions.jsonl")
    return paths


def _prepare(args):
    given = {f"--predictions {k + 1}": p for k, p in enumerate(args.predictions or [])}
    out = make_output_folder(args.out, "--out: ", given, REPORT_FILES)
    benchmarks = [load_benchmark(d) for d in args.dataset]
    names = [b.name for b in benchmarks]
    if len(set(names)) != len(names):
        raise MIEScoreInputError(f"the same benchmark was given twice ({', '.join(names)}); pass each once")
    paths = _prediction_paths(args, benchmarks, out)
    row_name = args.row_name or (Path(args.model).name if args.model else "predictions")
    run = {"datasets": ", ".join(args.dataset), "predictions": ", ".join(map(str, paths)), "model": args.model,
           "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    return out, benchmarks, paths, row_name, run


def _protocol(kind: str, args, benchmarks, paths, results, aggregation: dict) -> dict:
    """The report's protocol: each benchmark's data and rows, the predictions scored, the model, the aggregation."""
    datasets = [{"dataset": path, "split": data.protocol, "keys": result.get("n_rows")}
                for path, data, result in zip(args.dataset, benchmarks, results)]
    return scores_protocol(kind, datasets=datasets, predictions=paths, model=args.model,
                           aggregation={**aggregation, "allow_missing": bool(args.allow_missing),
                                        "protocols": [data.protocol for data in benchmarks]})


def cmd_zero_shot(args) -> int:
    from ..evaluation.paper_tables import evaluate_zero_shot, write_zero_shot_report  # deferred: loads scipy

    out, benchmarks, paths, row_name, run = _prepare(args)
    results = [evaluate_zero_shot(data, read_score_predictions(path), allow_missing=args.allow_missing,
                                  source=str(path)) for data, path in zip(benchmarks, paths)]
    json_path, md_path = write_zero_shot_report(out, results, row_name=row_name, run=run,
                                                protocol=_protocol("zero-shot", args, benchmarks, paths, results, {}))
    for result in results:
        print(f"  {result['column']:<20}{result['value']:.4f} ({result['metric']})")
    print(f"wrote {md_path}, {json_path}", file=sys.stderr)
    return 0


def cmd_reward(args) -> int:
    from ..evaluation.paper_tables import evaluate_reward, write_reward_report  # deferred: loads scipy

    out, benchmarks, paths, row_name, run = _prepare(args)
    settings = BootstrapSettings(n=args.bootstrap, progress=not args.no_progress)
    results = [evaluate_reward(data, path, allow_missing=args.allow_missing, bootstrap=settings)
               for data, path in zip(benchmarks, paths)]
    json_path, md_path = write_reward_report(out, results, row_name=row_name, run=run, protocol=_protocol(
        "reward", args, benchmarks, paths, results, {"bootstrap": {"n": args.bootstrap, "seed": settings.seed,
                                                                   "level": settings.level}}))
    for result in results:
        print(f"  {result['benchmark']:<16}" + "  ".join(f"{k}={v:.3f}" for k, v in result["values"].items()
                                                        if v is not None))
    print(f"wrote {md_path}, {json_path}", file=sys.stderr)
    return 0
