"""The ``miescore`` command line: the parser, shared argument types and ``main``.

Every command lives in its own module of this package, named in ``COMMAND_MODULES`` below (``score`` holds
``score``, ``score-batch`` and ``demo``; the others hold the command of their name); ``miescore --help`` lists them.
Options shared by the commands that call large models (``judge``, ``spatialreward-data``) are in
:mod:`.model_calls`.

User errors (bad paths, unreadable images, wrong checkpoints, bad input lines) print one line naming the
problem and the fix and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import sys

from ..image_io import MIEScoreInputError

EXIT_USER_ERROR = 2
EXIT_PARTIAL = 1

# Subcommands that live in their own modules: each module defines `register(subparsers)`, which adds its
# parser(s) with `set_defaults(func=...)`; `func(args) -> int` may raise MIEScoreInputError for user errors.
COMMAND_MODULES: tuple[str, ...] = (
    "score",
    "serve",
    "skill",
    "spatialreward",
    "benchmark",
    "dataset",
    "convert_benchmark",
    "analyze_attention",
    "baselines",
    "tokens",
    "space",
    "judge",
    "spatialreward_data",
    "doctor",
    "mer_construction",
    "edit",
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


def finish_run(summary: str, unfinished: str | None = None) -> int:
    """Print a command's closing ``summary`` to stderr and, when some work was left undone, the ``unfinished``
    line (what was left and how to retry it); the exit status: 0, or ``EXIT_PARTIAL`` when ``unfinished``."""
    print(summary, file=sys.stderr)
    if unfinished:
        print(unfinished, file=sys.stderr)
        return EXIT_PARTIAL
    return 0


def _quiet_transformers():
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def add_device_args(parser, when: str = "") -> None:
    """``--device`` and ``--dtype`` of the commands that load a checkpoint (``parser``: a parser or an argument
    group); ``when`` prefixes both helps, e.g. ``"with --model: "`` where loading a model is optional."""
    from ..scoring.loading import DTYPES

    parser.add_argument("--device", default="auto", help=f"{when}cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--dtype", default="auto", choices=list(DTYPES),
                        help=f"{when}weights dtype (default: bfloat16 on GPU, float32 on CPU)")


def add_pixel_budget_arg(parser: argparse.ArgumentParser) -> None:
    """``--max-sample-pixels``: the per-edit decoded-pixel budget checked from the image headers."""
    from ..processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS

    parser.add_argument("--max-sample-pixels", type=number_arg(int, minimum=1), default=DEFAULT_MAX_SAMPLE_PIXELS,
                        metavar="PIXELS", help="decoded pixels allowed per edit, all its images together, checked "
                        f"from the image headers before decoding (default {DEFAULT_MAX_SAMPLE_PIXELS:,})")


def _add_model_args(parser: argparse.ArgumentParser, required: bool = True):
    parser.add_argument("--model", required=required, help="checkpoint folder or Hub repo id of a MIEScore model")
    add_device_args(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="miescore", description="Human-aligned evaluation of multi-source image editing.")
    sub = parser.add_subparsers(dest="command", required=True)

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
