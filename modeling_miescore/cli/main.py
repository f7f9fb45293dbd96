"""The ``miescore`` command line: score, score-batch, demo, build-dataset.

User errors (bad paths, unreadable images, wrong checkpoints, bad input lines) print one line naming the
problem and the fix and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ..image_io import MIEScoreInputError

EXIT_USER_ERROR = 2
EXIT_PARTIAL = 1

# Subcommands that live in their own modules: each module defines `register(subparsers)`, which adds its
# parser(s) with `set_defaults(func=...)`; `func(args) -> int` may raise MIEScoreInputError for user errors.
COMMAND_MODULES: tuple[str, ...] = (
    "serve",
    "skill",
    "spatialreward",
    "benchmark",
    "dataset",
)


def number_arg(convert=int, minimum=None, maximum=None, exclusive=False):
    """argparse ``type=`` for a number within bounds (``exclusive`` makes both bounds strict)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if convert is int else 'a number'}, "
                                             f"got {text!r}") from None
        too_low = minimum is not None and (value <= minimum if exclusive else value < minimum)
        too_high = maximum is not None and (value >= maximum if exclusive else value > maximum)
        if too_low or too_high:
            low = "-inf" if minimum is None else minimum
            high = "inf" if maximum is None else maximum
            bounds = f"({low}, {high})" if exclusive else f"[{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must lie in {bounds}, got {value}")
        return value

    return parse


def _quiet_transformers():
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _add_model_args(parser: argparse.ArgumentParser, required: bool = True):
    parser.add_argument("--model", required=required, help="checkpoint folder or Hub repo id of a MIEScore model")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="weights dtype (default: bfloat16 on GPU, float32 on CPU)")


def _format_scores(scores: dict) -> str:
    width = max(len(k) for k in scores)
    return "\n".join(f"{name:<{width}}  {value:6.2f}" for name, value in scores.items())


def cmd_score(args) -> int:
    from ..image_io import load_image
    from ..scoring.loading import load_scorer

    if not args.source:
        raise MIEScoreInputError("no source image given; pass at least one --source IMAGE")
    if not args.instruction or not args.instruction.strip():
        raise MIEScoreInputError("empty instruction; pass --instruction 'what the edit should do'")
    sources = [load_image(p) for p in args.source]
    edited = load_image(args.edited)
    _quiet_transformers()
    model = load_scorer(args.model, device=args.device, dtype=args.dtype)
    scores = model.score(sources, edited, args.instruction)
    print(json.dumps(scores) if args.json else _format_scores(scores))
    return 0


def cmd_score_batch(args) -> int:
    import os

    from ..scoring.jsonl_scoring import merge_shards, score_jsonl
    from ..scoring.loading import load_scorer

    if not Path(args.input).is_file():
        raise MIEScoreInputError(f"input file '{args.input}' does not exist")
    _quiet_transformers()
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
    report = score_jsonl(lambda samples, b: model.score_batch(samples, batch_size=b), args.input, args.output,
                         batch_size=args.batch_size, on_error=args.on_error,
                         progress=not args.no_progress and rank == 0, rank=rank, world_size=world_size)
    if world_size > 1:
        dist.barrier()
        if rank == 0:
            merged = merge_shards(args.input, args.output, world_size)
            print(f"merged {world_size} shards: {merged} predictions in '{args.output}'", file=sys.stderr)
        dist.barrier()
        dist.destroy_process_group()
    prefix = f"[rank {rank}] " if world_size > 1 else ""
    print(f"{prefix}scored {report.scored} edits, skipped {report.skipped_existing} already done, "
          f"{len(report.errors)} bad input lines", file=sys.stderr)
    if report.errors:
        print(f"{prefix}{len(report.errors)} input lines were skipped (listed above); fix them and rerun to score them",
              file=sys.stderr)
        return EXIT_PARTIAL
    return 0


def cmd_demo(args) -> int:
    from ..scoring.loading import load_scorer
    from ..testing import build_tiny_miescore, example_edits

    _quiet_transformers()
    tmp = None
    if args.model is None:
        print("No --model given: building a tiny random-weight MIEScore checkpoint locally (no download).\n"
              "Its scores are MEANINGLESS (random weights); this run only shows the pipeline end to end.\n"
              "For real scores pass --model with a trained MIEScore checkpoint (a local folder or Hub repo id).\n",
              file=sys.stderr)
        tmp = tempfile.TemporaryDirectory(prefix="miescore-demo-")
        model_path = build_tiny_miescore(Path(args.workdir or tmp.name) / "tiny-miescore")
    else:
        model_path = args.model
    try:
        model = load_scorer(str(model_path), device=args.device, dtype=args.dtype)
        examples = example_edits()
        results = model.score_batch(examples, batch_size=len(examples))
    finally:
        if tmp is not None:
            tmp.cleanup()
    if args.json:
        print(json.dumps([{"id": e["id"], **r} for e, r in zip(examples, results)], indent=2))
        return 0
    names = list(results[0])
    header = f"{'example':<22}{'sources':>8}  " + "  ".join(f"{n[:12]:>12}" for n in names)
    print(header)
    print("-" * len(header))
    for example, result in zip(examples, results):
        row = "  ".join(f"{result[n]:12.2f}" for n in names)
        print(f"{example['id']:<22}{len(example['sources']):>8}  {row}")
    print("\nScores are on the 0-100 MOS scale: visual_quality (how the edited image looks), "
          "instruction_following (did the edit do what was asked), attribute_preservation (was what should "
          "carry over from each source kept), overall = VQ^0.3 * IF^0.4 * AP^0.3.")
    if args.model is None:
        print("Reminder: random weights - these numbers mean nothing. Use --model PATH_OR_REPO for real scores.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="miescore", description="Human-aligned evaluation of multi-source image editing.")
    sub = parser.add_subparsers(dest="command", required=True)

    score = sub.add_parser("score", help="score one edit")
    _add_model_args(score)
    score.add_argument("--source", action="append", default=[], metavar="IMAGE",
                       help="a source image; repeat for several sources, in order")
    score.add_argument("--edited", required=True, metavar="IMAGE", help="the edited image")
    score.add_argument("--instruction", required=True, help="the editing instruction")
    score.add_argument("--json", action="store_true", help="print the scores as JSON")
    score.set_defaults(func=cmd_score)

    batch = sub.add_parser("score-batch", help="score a JSONL file of edits, resumable")
    _add_model_args(batch)
    batch.add_argument("--input", required=True, help='JSONL lines {"id", "sources": [...], "edited", "instruction"}')
    batch.add_argument("--output", required=True, help="JSONL predictions; appended to, ids already there are skipped")
    batch.add_argument("--batch-size", type=int, default=8)
    batch.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                       help="a bad input line is reported with its line number and skipped (default) or stops the run")
    batch.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    batch.set_defaults(func=cmd_score_batch)

    demo = sub.add_parser("demo", help="score the bundled example edits end to end")
    _add_model_args(demo, required=False)
    demo.add_argument("--workdir", help="where to build the tiny demo checkpoint (default: a temporary folder)")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(func=cmd_demo)

    for module_name in COMMAND_MODULES:
        import importlib

        importlib.import_module(f"modeling_miescore.cli.{module_name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "batch_size", 1) is not None and getattr(args, "batch_size", 1) < 1:
        parser.error("--batch-size must be >= 1")
    try:
        return int(args.func(args) or 0)
    except MIEScoreInputError as err:
        print(f"miescore {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"miescore {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
