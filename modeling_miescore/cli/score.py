"""``miescore score``, ``score-batch`` and ``demo``: score edits with a MIEScore checkpoint."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from ..utils.numbers import model_fault
from .main import (COMMAND_HELP, EXIT_PARTIAL, add_model_args, add_pixel_budget_arg, finish_run, number_arg,
                   quiet_transformers)
from ..hub.processing_miescore import EditSample, check_instruction
from ..scoring.loading import load_scorer, read_checkpoint_config, model_reference
from ..scoring.jsonl_scoring import (check_input_file, check_output_file, check_producer, merge_shards,
                                     read_predictions, score_jsonl)
from ..data.example_edits import example_edits
from ..data.schema import SHORT_NAMES


def register(sub) -> None:
    score = sub.add_parser("score", help=COMMAND_HELP["score"])
    add_model_args(score)
    add_edit_args(score)
    score.add_argument("--json", action="store_true", help="print the scores as JSON")
    score.set_defaults(func=cmd_score)

    batch = sub.add_parser("score-batch", help=COMMAND_HELP["score-batch"])
    add_model_args(batch)
    batch.add_argument("--input", required=True, help='JSONL lines {"id", "sources": [...], "edited", "instruction"}')
    batch.add_argument("--output", required=True, help="JSONL predictions; appended to, ids already there are skipped")
    batch.add_argument("--batch-size", type=number_arg(int, minimum=1), default=8,
                       help="edits per forward pass (default 8); lower it if memory runs out")
    batch.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                       help="a bad input line is reported with its line number and skipped (default) or stops the run")
    batch.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_pixel_budget_arg(batch)
    batch.set_defaults(func=cmd_score_batch)

    demo = sub.add_parser("demo", help=COMMAND_HELP["demo"])
    add_model_args(demo, required=False)
    demo.add_argument("--workdir", help="where to build the tiny demo checkpoint (default: a temporary folder)")
    demo.add_argument("--json", action="store_true", help="print one JSON object per example instead of a table")
    demo.set_defaults(func=cmd_demo)


def add_edit_args(parser) -> None:
    """``--source`` (repeated), ``--edited``, ``--instruction`` and ``--max-sample-pixels``: one edit
    (:func:`load_cli_edit`)."""
    parser.add_argument("--source", action="append", default=[], metavar="IMAGE",
                        help="a source image; repeat for several sources, in order")
    parser.add_argument("--edited", required=True, metavar="IMAGE", help="the edited image")
    parser.add_argument("--instruction", required=True, help="the editing instruction")
    add_pixel_budget_arg(parser)


def load_cli_edit(args, target_pixels: int | None = None):
    """``--source``/``--edited``/``--instruction`` -> a loaded :class:`EditSample`; every image header is
    checked (format, size, aspect ratio, the per-sample pixel budget) before any image is decoded."""
    if not args.source:
        raise MIEScoreInputError("no source image given; pass at least one --source IMAGE")
    instruction = check_instruction(args.instruction, where="--instruction")
    return EditSample(sources=list(args.source), edited=args.edited, instruction=instruction).load(
        target_pixels=target_pixels, where="the edit", max_sample_pixels=args.max_sample_pixels)


def cmd_score(args) -> int:
    max_pixels = read_checkpoint_config(args.model).get("max_pixels")  # images far above it are reduced on load
    sample = load_cli_edit(args, int(max_pixels) if isinstance(max_pixels, int) else None)
    quiet_transformers()
    model = load_scorer(args.model, device=args.device, dtype=args.dtype)
    scores = model.score(sample.sources, sample.edited, sample.instruction, max_sample_pixels=args.max_sample_pixels)
    fault = model_fault(scores)
    if fault:  # not a number to print: the model is broken (exit 1, as a failed edit in score-batch)
        print(f"miescore score: error: {fault}", file=sys.stderr)
        return EXIT_PARTIAL
    width = max(map(len, scores))
    print(json.dumps(scores) if args.json else "\n".join(f"{k:<{width}}  {v:6.2f}" for k, v in scores.items()))
    return 0


def cmd_score_batch(args) -> int:
    import os

    output = check_output_file(args.output, check_input_file(args.input))  # before the model loads: fail fast
    producer = {"command": "score-batch", "model": model_reference(args.model)}
    check_producer(output, read_predictions(output, repair=False)[0], producer, record=False)
    quiet_transformers()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, device = 0, args.device
    if world_size > 1:  # under `accelerate launch` / torchrun: one contiguous slice of the input per process
        import torch
        import torch.distributed as dist

        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if args.device == "auto":
            device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    model = load_scorer(args.model, device=device, dtype=args.dtype)
    budget = args.max_sample_pixels
    report = score_jsonl(lambda samples, b: model.score_batch(samples, batch_size=b, max_sample_pixels=budget),
                         args.input, args.output,
                         batch_size=args.batch_size, on_error=args.on_error,
                         progress=not args.no_progress and rank == 0, rank=rank, world_size=world_size,
                         target_pixels=int(model.config.max_pixels), max_sample_pixels=budget,
                         producer=producer)
    if world_size > 1:
        dist.barrier()
        if rank == 0:
            merged = merge_shards(args.input, args.output, world_size)
            print(f"merged {world_size} shards: {merged} predictions in '{args.output}'", file=sys.stderr)
        dist.barrier()
        dist.destroy_process_group()
    prefix = f"[rank {rank}] " if world_size > 1 else ""
    return finish_run(
        f"{prefix}scored {report.scored} edits, skipped {report.skipped_existing} already done, "
        f"{len(report.errors)} bad input lines",
        (f"{prefix}{len(report.errors)} input lines were skipped (listed above); fix them and rerun "
         "to score them" if report.errors else None))


def cmd_demo(args) -> int:
    from ..testing import build_tiny_miescore  # deferred: loads httpcore, httpx

    quiet_transformers()
    if args.model is None:
        print("No --model given: building a tiny random-weight MIEScore checkpoint locally (no download).\n"
              "Its scores are MEANINGLESS (random weights); this run only shows the pipeline end to end.\n"
              "For real scores pass --model with a trained MIEScore checkpoint (a local folder or Hub repo id).\n",
              file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="miescore-demo-") as tmp:
        model_path = args.model or build_tiny_miescore(Path(args.workdir or tmp) / "tiny-miescore")
        model = load_scorer(str(model_path), device=args.device, dtype=args.dtype)
        examples = example_edits()
        results = model.score_batch(examples, batch_size=len(examples))
    if args.json:
        print(json.dumps([{"id": e["id"], **r} for e, r in zip(examples, results)], indent=2))
        return 0
    print(_demo_table(examples, results))
    print("\n" + _scale_note(model.config))
    if args.model is None:
        print("Reminder: random weights - these numbers mean nothing. Use --model PATH_OR_REPO for real scores.")
    return 0


def _demo_table(examples: list[dict], results: list[dict]) -> str:
    """One row per example; every column is as wide as its full score name (nothing is cut)."""
    names = list(results[0])
    widths = [max(len(n), 6) for n in names]
    header = f"{'example':<22}{'sources':>8}  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, widths))
    lines = [header, "-" * len(header)]
    for example, result in zip(examples, results):
        row = "  ".join(f"{result[n]:>{w}.2f}" for n, w in zip(names, widths))
        lines.append(f"{example['id']:<22}{len(example['sources']):>8}  {row}")
    return "\n".join(lines)


def _scale_note(config) -> str:
    """What the columns mean, with the overall weighting read from this checkpoint's config."""
    terms = " * ".join(f"{SHORT_NAMES.get(n, n)}^{w:g}" for n, w in zip(config.score_names, config.overall_weights))
    return ("Scores are on the 0-100 MOS scale: visual_quality (how the edited image looks), "
            "instruction_following (did the edit do what was asked), attribute_preservation (was what should "
            f"carry over from each source kept), overall = {terms} (weights from this checkpoint's config).")
