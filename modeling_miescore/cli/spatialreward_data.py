"""``miescore spatialreward-data``: build SpatialReward SFT rows with the spatial-prior data pipeline (paper
sec. 3.3, prompts D.2; :mod:`modeling_miescore.data.spatialreward_pipeline`). ``--aligner`` (stage III) defaults
to the grounder, as in the paper. Rerunning resumes; samples whose requests failed for good are retried (exit
status 1 while some remain).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from ..utils.output_paths import ensure_folder
from .main import COMMAND_HELP, finish_run, number_arg
from .model_calls import ModelCallRun, add_call_args
from ..judges.chat_backends import parse_judge_spec
from ..data.spatialreward_pipeline import PipelineJudges, PipelineConfig, read_edit_records, run_pipeline

_JUDGES = (("grounder", "stage I grounding (paper: Qwen-3-VL-235B-A22B-Instruct)"),
           ("face_judge", "stage II SC of human-centric edits, with crops (paper: Gemini-2.5-Pro)"),
           ("object_judge", "stage II SC of general edits, with box overlays (paper: GPT-5)"),
           ("pq_judge", "stage II perceptual quality (paper: GPT-5)"),
           ("aligner", "stage III consistency check and token interleaving (default: the grounder)"))


def register(sub) -> None:
    parser = sub.add_parser("spatialreward-data", help=COMMAND_HELP["spatialreward-data"])
    parser.add_argument("--input", required=True,
                        help="score-batch JSONL, or a MIE-Bench / converted-benchmark / MER-Bench dataset")
    parser.add_argument("--split", help="split of a dataset --input (default: test; MER-Bench: every split)")
    parser.add_argument("--out", required=True, help="output folder (resumed when it holds a previous run)")
    for name, help_text in _JUDGES:
        parser.add_argument("--" + name.replace("_", "-"), required=name != "aligner", metavar="MODEL@URL",
                            help=help_text + "; MODEL@URL[#API_KEY_ENV] or transformers:PATH")
    parser.add_argument("--max-tokens", type=number_arg(int, minimum=1), default=1024,
                        help="answer budget of every request (default 1024)")
    parser.add_argument("--min-similarity", type=number_arg(float, minimum=0, maximum=1), default=0.6,
                        help="stage III (ours, not the paper's): the refined reasoning must keep this share of the "
                             "original wording (difflib ratio over words, tokens removed; default 0.6; 0 = off)")
    parser.add_argument("--keep-unclean-scores", action="store_true",
                        help="stage II: keep scores the parser had to repair (clamped, rescaled, read from broken "
                             "JSON); by default such answers are rejected (ours, not the paper's)")
    parser.add_argument("--box-num", choices=("edits", "grounder"), default="edits",
                        help="stage I regions asked for: one per edit of the row (num_edits / num_regions; else one "
                             "per source, the default) or as many as the grounder finds")
    parser.add_argument("--edited-only-annotations", action="store_true",
                        help="stage II: draw boxes on / crop patches from the edited image only, instead of the "
                             "source images too as the D.2.2 prompts describe")
    parser.add_argument("--crop-padding", type=number_arg(float, minimum=0), default=0.15,
                        help="human-centric crops: margin around a box, as a share of its size (default 0.15)")
    parser.add_argument("--chunk-size", type=number_arg(int, minimum=1), default=64,
                        help="samples per chunk; the ledger is written after each (default 64)")
    parser.add_argument("--limit", type=number_arg(int, minimum=1), help="only the first N input edits")
    add_call_args(parser)
    parser.set_defaults(func=cmd_spatialreward_data)


def _judges(specs: dict, calls):
    """The pipeline's judges, each the call engine of its spec (judges named twice share one engine)."""
    named = {name: calls.engine(spec) for name, spec in specs.items()}
    return PipelineJudges(grounder=named["grounder"], face=named["face_judge"], object=named["object_judge"],
                          pq=named["pq_judge"], aligner=named["aligner"])


def cmd_spatialreward_data(args) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MIEScoreInputError(f"--out '{out}' is a file; pass a folder")
    specs = {name: parse_judge_spec(getattr(args, name) or args.grounder, "--" + name.replace("_", "-"))
             for name, _ in _JUDGES}  # before any work starts; the aligner defaults to the grounder
    calls = ModelCallRun(args, "spatialreward-data", out / "calls.sqlite", out / "usage.jsonl",  # checks --price
                         {"judges": {name: str(spec) for name, spec in specs.items()}},
                         files={"--input": args.input, "the SFT rows": out / "sft_rows.jsonl"})
    records, problems = read_edit_records(args.input, args.split, out / "inputs", progress=not args.no_progress)
    for where, message in problems[:20]:
        print(f"skipped {where}: {message}", file=sys.stderr)
    if args.limit:
        records = records[:args.limit]
    if not records:
        raise MIEScoreInputError(f"'{args.input}' holds no usable edit ({len(problems)} unusable lines)")
    ensure_folder(out, "--out", named=True)
    config = PipelineConfig(max_tokens=args.max_tokens, min_similarity=args.min_similarity,
                            crop_padding=args.crop_padding, chunk_size=args.chunk_size, box_num_mode=args.box_num,
                            annotate_sources=not args.edited_only_annotations,
                            reject_unclean_scores=not args.keep_unclean_scores)
    with calls:
        run = run_pipeline(records, out, _judges(specs, calls), config, progress=not args.no_progress,
                           input_problems=problems)
        calls.extra["stage_seconds"] = {k: round(v, 3) for k, v in run.stage_seconds.items()}
    summary = run.report
    return finish_run(
        f"finished {run.finished} samples now, {run.already_done} before; {summary['sc']['rows']} SC and "
        f"{summary['pq']['rows']} PQ rows in '{out / 'sft_rows.jsonl'}' (rejections: report.json)",
        (f"requests failed for good at {run.unfinished}; rerun the same command to retry those "
         "samples" if run.unfinished else None))
