"""``miescore benchmark gedit`` / ``imgedit`` / ``editors``: an image editor on the editor benchmarks, and editors
compared in the SpatialReward paper's Table 3 layout.

Everything resumes: rerun the same command after a kill or a failed request. Bad input: one line, exit status 2;
edits left unjudged (a request that failed for good): exit status 1, the report covers the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from .benchmark import add_report_args, bootstrap_settings
from .main import finish_run, number_arg, quiet_transformers
from .model_calls import ModelCallRun, add_call_args, judge_spec
from ..evaluation.editor_benchmarks.protocols import EDITOR_BENCHMARKS, editor_benchmark
from ..evaluation.editor_benchmarks.editor_run import EditorRunOptions, evaluate_editor
from ..evaluation.editor_benchmarks.judge_run import REWARD_JUDGES, recheck_line
from ..evaluation.editor_benchmarks.editor_comparison import parse_runs, write_comparison
from ..evaluation.rescore import rescore_report
from .editors_demo import DEMO_LABEL, run_offline_demo

__all__ = ["PARENT_COMMAND", "register"]

PARENT_COMMAND = "benchmark"  # these are subcommands of `miescore benchmark` (see cli.main.COMMAND_MODULES)


def _judge_arguments(parser: argparse.ArgumentParser, benchmark) -> None:
    parser.add_argument("--dataset", required=True, metavar="DIR_OR_REPO",
                        help=f"the converted benchmark (miescore convert-benchmark {benchmark.dataset})")
    parser.add_argument("--edits", required=True, metavar="DIR_OR_JSONL",
                        help="the editor's outputs: a folder of <key>.png, GEdit's fullset/<task>/<lang>/<key>.png, "
                             'or a JSONL of {"id": "<key>", "edited": "path"} lines (miescore edit\'s edits.jsonl)')
    parser.add_argument("--out", required=True, metavar="DIR", help="report folder (resumable)")
    parser.add_argument("--language", action="append", metavar="LANG", help="only rows of this instruction "
                        "language (repeatable; GEdit: en, cn)")
    parser.add_argument("--category", action="append", metavar="NAME", help="only rows of this task / edit type "
                        "(repeatable)")
    judge = parser.add_argument_group("the MLLM judge")
    judge.add_argument("--backend", choices=["openai", "transformers"],
                       help="openai: any OpenAI-compatible endpoint; transformers: a local VLM checkpoint")
    judge.add_argument("--model", help=f"model name at the endpoint (published numbers: {benchmark.published_judge}) "
                                       "or local checkpoint path")
    judge.add_argument("--base-url", help="endpoint root with the API prefix, e.g. http://127.0.0.1:8000/v1")
    judge.add_argument("--prompts", metavar="PATH", help=f"the user's copy of {benchmark.prompts_expected}; "
                                                         "without it our own wording is used (not comparable)")
    judge.add_argument("--judge-name", help="the judge's name in the records (default: the model name)")
    released = benchmark.request
    judge.add_argument("--max-tokens", type=number_arg(int, minimum=1), default=None,
                       help="answer budget in tokens (default: "
                            f"{released.max_tokens or 'none sent'}, as the released script)")
    judge.add_argument("--temperature", type=number_arg(float, minimum=0.0), default=None,
                       help="sampling temperature (default: none sent, as the released script: the endpoint's "
                            "default; 0 decodes greedily, so that the answer cache is exact)")
    judge.add_argument("--judge-seed", type=int, default=None, metavar="N",
                       help="send this seed with every request (default: none, as the released script); with "
                            "--temperature 0 it pins a self-hosted judge's answers (docs/editor_benchmarks.md)")
    judge.add_argument("--recheck", type=number_arg(int, minimum=1), default=None, metavar="N",
                       help="judge N already-judged edits (drawn with --seed) again without the answer cache and "
                            "report the judge's drift: mean and largest change per score, a CI, the edits that "
                            "changed. Run it before comparing with a number judged long ago")
    judge.add_argument("--parts-order", choices=["text-first", "images-first"], default=released.parts_order,
                       help=f"the prompt text before or after the images (default {released.parts_order}, as the "
                            "released script for the published judge" + (
                                "; images-first: GEdit's Qwen2.5-VL path" if benchmark.name == "gedit" else "")
                            + ")")
    parser.add_argument("--judge", action="append", default=[], metavar="KIND:CKPT",
                        help="also score the edits with a reward model: miescore:CKPT or spatialreward:CKPT "
                             "(repeatable)")
    parser.add_argument("--best-of-n", action="store_true",
                        help="several samples per key: keep the one with the highest overall (default: the mean)")
    if benchmark.round_to is not None:
        parser.add_argument("--no-rounding", action="store_true",
                            help=f"do not round per-image and per-type means to {benchmark.round_to} places as the "
                                 "released scripts do")
    _report_arguments(parser)
    add_call_args(parser, image_defaults={"image_format": released.image_format,
                                          "image_quality": released.image_quality or 90,
                                          "max_pixels": released.max_pixels, "source": "as the released script"})


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label", default=None, metavar="TEXT",
                        help="a line shown at the top of the report and of the closing summary (e.g. 'random "
                             "weights')")
    add_report_args(parser, "keys")


def register(kinds) -> None:
    """Add ``gedit``, ``imgedit`` and ``editors`` to ``miescore benchmark`` (``kinds``: its subparsers)."""
    for benchmark in EDITOR_BENCHMARKS.values():
        parser = kinds.add_parser(benchmark.name, help=f"an image editor on {benchmark.title} (judge protocol)",
                                  description=f"Judge an editor's outputs on {benchmark.title} with the benchmark's "
                                              "protocol and write report.md / report.json / report.html / plots/.")
        _judge_arguments(parser, benchmark)
        parser.set_defaults(func=cmd_editor_benchmark)
    editors = kinds.add_parser("editors", help="compare editors (SpatialReward paper, Table 3 layout)",
                               description="GEdit-EN SC/PQ/Overall and ImgEdit Overall per run with Δ against the "
                                           "baseline, CIs and paired tests, per-category tables and the largest gains "
                                           "and losses as pictures.")
    editors.add_argument("--runs", nargs="+", required=True, metavar="NAME=DIR[,DIR]",
                         help="report folders of 'benchmark gedit' / 'imgedit' per run; the first is the baseline. A "
                              "run of 'miescore edit --select' edits compares its first sample, the selected one "
                              "and the judge's own best of N")
    editors.add_argument("--baseline", help="the run every Δ is against (default: the first; a run of "
                                            "'miescore edit --select' edits: its first sample)")
    editors.add_argument("--by", choices=["miescore", "spatialreward"], default=None,
                         help="compare the scores of this reward model (the runs' --judge KIND:CKPT) instead of the "
                              "MLLM judge's (e.g. runs judged offline by reward models only)")
    editors.add_argument("--out", required=True, metavar="DIR", help="output folder for the comparison report")
    editors.add_argument("--allow-protocol-differences", action="store_true",
                         help="compare runs whose protocols (dataset, judge, requests, prompts, aggregation) differ in "
                              "more than the editor; without it such runs are refused, each difference listed; with "
                              "it every table says so")
    editors.add_argument("--grid-size", type=number_arg(int, minimum=0), default=4,
                         help="pictures of the largest gains and of the largest losses per run (default 4)")
    _report_arguments(editors)
    editors.add_argument("--no-progress", action="store_true", help="hide progress bars")
    editors.set_defaults(func=cmd_editors)
    rescore = kinds.add_parser("rescore", help="recompute a report's numbers from its judgements on disk",
                               description="Recompute every aggregate of a report of 'benchmark gedit', 'imgedit' or "
                                           "'editors' from the per-sample judgements on disk (no judge is called) "
                                           "and say whether each number matches the report bit for bit: exit 0 "
                                           "when all match, 1 when one does not (each listed).")
    rescore.add_argument("report_dir", metavar="REPORT_DIR", help="the --out folder of the report")
    rescore.set_defaults(func=cmd_rescore)
    demo = kinds.add_parser("editors-demo", help="the editor benchmarks end to end offline, on random weights",
                            description="Tiny GEdit-Bench and ImgEdit-Bench fixtures, edited by a tiny editor (or a "
                                        "trained run against its base editor), judged by a tiny random MIEScore, "
                                        "compared: the whole path with nothing downloaded. The numbers mean nothing.")
    demo.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder for everything it makes")
    demo.add_argument("--lora", default=None, metavar="RUN", help="a training run (trainers/flow_grpo_editor.py): "
                      "compare its adapter with its base editor (default: a tiny Flux2-Klein's first sample, the "
                      "one a reward selected of two, and the judge's best of two)")
    demo.add_argument("--device", default="cpu", help="where the tiny models run (default: cpu)")
    demo.set_defaults(func=cmd_editors_demo, extra="rl")


def request_settings(args, benchmark):
    """The run's :class:`~modeling_miescore.data.converters.schema.JudgeRequestSettings`: the benchmark's released
    ones with the options given."""
    released = benchmark.request
    return dataclasses.replace(
        released, parts_order=args.parts_order,
        max_tokens=released.max_tokens if args.max_tokens is None else args.max_tokens,
        temperature=args.temperature, image_format=args.image_format.upper(),
        image_quality=args.image_quality if args.image_format.upper() in ("JPEG", "WEBP") else None,
        max_pixels=args.max_pixels, seed=args.judge_seed)


def cmd_editor_benchmark(args) -> int:
    benchmark = editor_benchmark(args.kind)
    if getattr(args, "no_rounding", False):
        benchmark = dataclasses.replace(benchmark, round_to=None)
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise MIEScoreInputError(f"--out '{out}' is a file, not a folder; pass a folder")
    spec = calls = None
    if args.backend:
        if not args.model:
            raise MIEScoreInputError(f"--backend {args.backend} needs --model (e.g. {benchmark.published_judge})")
        spec = judge_spec(args)
        calls = ModelCallRun(args, f"benchmark {benchmark.name}", out / "judgements.jsonl.cache.sqlite",
                             out / "judgements.jsonl.usage.jsonl", {"dataset": args.dataset, "spec": str(spec)})
    elif args.model or args.base_url or args.prompts or args.recheck:
        raise MIEScoreInputError("--model, --base-url, --prompts and --recheck configure the MLLM judge: add "
                                 "--backend")
    options = EditorRunOptions(calls=calls, spec=spec, prompts_path=args.prompts, judge_name=args.judge_name,
                               request=request_settings(args, benchmark), reward_judges=args.judge,
                               best_of_n=args.best_of_n, device=args.device, dtype=args.dtype,
                               batch_size=args.batch_size, bootstrap=bootstrap_settings(args), plots=not args.no_plots,
                               progress=not args.no_progress, label=args.label, recheck=args.recheck or 0)
    report, unfinished = evaluate_editor(benchmark, args.dataset, args.edits, out, languages=args.language,
                                         categories=args.category, options=options)
    counts = report["counts"]
    if report.get("recheck"):
        print(recheck_line(report["recheck"], benchmark.labels), file=sys.stderr)
    headline = _headline(report["results"], benchmark.labels, benchmark.overall)
    for name, view in report["reward_judges"].items():  # the reward models' overall too (the only one offline)
        headline += _headline(view["results"], view["labels"], REWARD_JUDGES[view["kind"]].overall, f"{name} ")
    judged = (f"{counts['rows_evaluated']} keys evaluated ({counts['missing_edits']} without an edit, "
              f"{counts['flagged']} flagged judgements)" if report["results"] else
              f"{counts['edits']} edits scored by reward models ({counts['missing_edits']} keys without an edit)")
    return finish_run(
        f"{args.label + ': ' if args.label else ''}{benchmark.title}: {judged}"
        f"{'; ' + ', '.join(headline) if headline else ''}; report: '{Path(out) / 'report.md'}'",
        "; ".join(unfinished) + "; rerun the same command to retry them" if unfinished else None)


def _headline(results: dict, labels: dict, overall: str, prefix: str = "") -> list:
    """``"O (en) = 5.477"`` per language of a report's results (not computable: says why)."""
    out = []
    for language, subsets in results.items():
        full = subsets["full"]
        value = full[overall]["value"]
        shown = (f"not computable ({full['not_computable']})" if full.get("not_computable") else
                 "n/a" if value is None else f"{value:.3f}")
        out.append(f"{prefix}{labels[overall]} ({language}) = {shown}")
    return out


def cmd_editors(args) -> int:
    out = Path(args.out).expanduser()
    report = write_comparison(parse_runs(args.runs), out, label=args.label, plots=not args.no_plots,
                              baseline=args.baseline, bootstrap=bootstrap_settings(args), grid_size=args.grid_size,
                              by=args.by, allow_protocol_differences=args.allow_protocol_differences)
    label = f"{report['label']}: " if report["label"] else ""
    return finish_run(f"{label}compared {len(report['runs'])} runs against {report['baseline']}; report: "
                      f"'{out / 'report.md'}'")


def cmd_rescore(args) -> int:
    checked, mismatches = rescore_report(args.report_dir)
    where = Path(args.report_dir) / "report.json"
    if mismatches:
        for line in mismatches:
            print(f"differs: {line}", file=sys.stderr)
        print(f"rescore: {len(mismatches)} of {checked} numbers of '{where}' differ from their recomputation from "
              "the judgements on disk (listed above)", file=sys.stderr)
        return 1
    return finish_run(f"rescore: all {checked} numbers of '{where}' recomputed from the judgements on disk match "
                      "bit for bit")


def cmd_editors_demo(args) -> int:
    from diffusers.utils import logging as diffusers_logging

    quiet_transformers()  # the tiny checkpoints' save and load bars
    diffusers_logging.disable_progress_bar()

    result = run_offline_demo(args.out, lora=args.lora, device=args.device)
    return finish_run(f"\n{DEMO_LABEL}.\n{len(result['commands'])} commands ran (printed above); the comparison: "
                      f"'{result['comparison'] / 'report.md'}'")
