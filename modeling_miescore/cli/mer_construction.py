"""``miescore mer-bench``: construct a MER-Bench release (SpatialReward paper sec. 4.2-4.3, appendix A.1, prompts
D.3; :mod:`modeling_miescore.data.mer_construction`). Every stage resumes. Exit status 1 while requests or
editors failed for good (rerun to retry them), 2 for bad input (nothing written).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from ..utils.output_paths import ensure_folder
from .main import COMMAND_HELP, finish_run, number_arg
from .model_calls import ModelCallRun, add_call_args
from ..data.mer_construction import (plan_jobs, read_sources, synthesize_instructions, generate_candidates,
                                     parse_system_spec, AnnotationStore, build_annotation_app, export_raw_release)
from ..judges.chat_backends import parse_judge_spec


def register(sub) -> None:
    stages = sub.add_parser("mer-bench", help=COMMAND_HELP["mer-bench"]).add_subparsers(dest="stage", required=True)
    stage = {}
    for name, text, func in (
            ("synthesize", "multi-edit instructions with the D.3 prompts (2:1:1, 2-5 edits)", cmd_synthesize),
            ("candidates", "6 edited images per instruction from a pool of editing systems", cmd_candidates),
            ("annotate", "the Gradio annotation app (hierarchical ranking protocol)", cmd_annotate),
            ("export", "write the raw MER-Bench release (for `build-dataset mer-bench`)", cmd_export)):
        stage[name] = p = stages.add_parser(name, help=text)
        p.add_argument("--folder", required=True, help="the construction folder" + (
            " (resumed when it holds a previous run)" if name == "synthesize" else " (made by `synthesize`)"))
        p.set_defaults(func=func)
    p = stage["synthesize"]
    p.add_argument("--sources", required=True, help="JSONL manifest {image_id, image, domain: general|human}, "
                                                    "or a folder with general/ and human/ subfolders")
    p.add_argument("--model", required=True, metavar="MODEL@URL", help="the instruction writer (paper: "
                   "Qwen-3-VL-235B-A22B-Instruct); MODEL@URL[#API_KEY_ENV] or transformers:PATH")
    p.add_argument("--total", type=number_arg(int, minimum=1), help="instructions to plan, kept 2:1:1 "
                   "(default: every source image)")
    p.add_argument("--seed", type=int, default=0, help="plan seed: subtasks and operation counts (default 0)")
    p.add_argument("--max-tokens", type=number_arg(int, minimum=1), default=1024, help="answer budget (default 1024)")
    p.add_argument("--no-subtask-hint", action="store_true", help="send the D.3 prompt alone, without the line "
                   "naming the planned subtask")
    p.add_argument("--chunk-size", type=number_arg(int, minimum=1), default=32,
                   help="jobs per chunk; the ledger is written after each (default 32)")
    add_call_args(p)
    p = stage["candidates"]
    p.add_argument("--system", action="append", default=[], required=True, metavar="NAME=SPEC",
                   help="an editing system: NAME=module:function or NAME=diffusers:PIPELINE; repeat for the pool")
    p.add_argument("--per-instruction", type=number_arg(int, minimum=2), default=6,
                   help="candidates per instruction (paper: 6)")
    p.add_argument("--seed", type=int, default=0, help="system draw and generation seeds (default 0)")
    p.add_argument("--device", default="auto", help="diffusers pipelines: cpu, cuda, cuda:1 (default auto)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p = stage["export"]
    p.add_argument("--out", required=True, help="the raw release folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--groups-per-type", type=number_arg(int, minimum=1), default=200,
                   help="group target of the preview (paper: 200 per size)")
    p.add_argument("--seed", type=int, default=0, help="group sampling seed of the preview (default 0)")
    for p in (stage["annotate"], stage["export"]):
        p.add_argument("--annotators-per-sample", type=number_arg(int, minimum=1), default=5, help="paper: 5")
    stage["annotate"].add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    stage["annotate"].add_argument("--port", type=number_arg(int, minimum=1, maximum=65535), default=7860,
                                   help="default 7860")


def _existing_folder(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise MIEScoreInputError(f"--folder '{folder}' is not a folder; run `miescore mer-bench synthesize` first")
    return folder


def cmd_synthesize(args) -> int:
    folder = Path(args.folder)
    if folder.exists() and not folder.is_dir():
        raise MIEScoreInputError(f"--folder '{folder}' is a file; pass a folder")
    spec = parse_judge_spec(args.model, "--model")
    calls = ModelCallRun(args, "mer-bench synthesize", folder / "calls.sqlite", folder / "usage.jsonl",
                         {"model": str(spec)}, files={"--sources": args.sources})  # checks --price before any work
    jobs = plan_jobs(read_sources(args.sources), args.total, args.seed)
    ensure_folder(folder, "--folder", named=True)
    with calls:
        run = synthesize_instructions(jobs, folder, calls.engine(spec), max_tokens=args.max_tokens,
                                      hint=not args.no_subtask_hint, chunk_size=args.chunk_size,
                                      progress=not args.no_progress)
    return finish_run(f"finished {run.finished} jobs now, {run.already_done} before; report: "
                      f"'{folder / 'synthesis_report.json'}'",
                      f"{run.unfinished} requests failed for good; rerun the same command to retry them"
                      if run.unfinished else None)


def cmd_candidates(args) -> int:
    folder = _existing_folder(args.folder)
    systems = [parse_system_spec(text) for text in args.system]
    run = generate_candidates(folder, systems, per_instruction=args.per_instruction, seed=args.seed,
                              device=args.device, progress=not args.no_progress)
    for cid, error in run.failed[:20]:
        print(f"failed {cid}: {error}", file=sys.stderr)
    return finish_run(f"made {run.made} candidates now, {run.already_done} before, in '{folder / 'candidates.jsonl'}'",
                      f"{len(run.failed)} candidates failed; rerun the same command to retry them" if run.failed
                      else None)


def cmd_annotate(args) -> int:
    store = AnnotationStore(_existing_folder(args.folder), args.annotators_per_sample)
    demo = build_annotation_app(store)
    demo.queue(default_concurrency_limit=4)
    demo.launch(server_name=args.host, server_port=args.port)
    return 0


def cmd_export(args) -> int:
    report = export_raw_release(_existing_folder(args.folder), args.out, overwrite=args.overwrite,
                                annotators_per_sample=args.annotators_per_sample,
                                groups_per_type=args.groups_per_type, seed=args.seed)
    groups = ", ".join(f"{k} {v}" for k, v in report["groups"].items())
    print(f"exported {report['exported_samples']} samples ({report['incomplete_samples']} still incomplete) to "
          f"'{args.out}'; the builder can form {groups} groups (target {report['target_per_size']} each), "
          f"{report['needs_review']} candidates need expert review (no 3-of-5 majority)", file=sys.stderr)
    return 0
