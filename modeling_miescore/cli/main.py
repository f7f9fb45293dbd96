"""The ``miescore`` command line: the parser, shared argument types and ``main``.

User errors print one line naming the problem and the fix and exit with status 2; no traceback. An output the
machine cannot write (an ``OutputWriteError``) prints one line and exits with status 1. Options are matched exactly
(``allow_abbrev=False`` on every parser); an unknown option prints the usage of the (sub)command it was given to and
the closest real option; a missing extra names the extra to install.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys

from ..hub.errors import MIEScoreInputError
from ..utils.output_paths import OutputWriteError
from ..scoring.loading import DTYPES
from ..hub.processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS
from .. import __version__
from ..utils.third_party_logs import quiet_third_party_logs
from ..utils.suggestions import did_you_mean, missing_extra_message

EXIT_USER_ERROR = 2
EXIT_PARTIAL = 1
EXIT_WRITE_FAILED = 1

# Every command: the module(s) that add it and its one-line help. Each module's `register(subparsers)` adds its
# parser(s) with `set_defaults(func=...)`; a command with subcommands returns its `add_subparsers()` action, and a
# module adding subcommands under it names that module in `PARENT_COMMAND` and is listed after it (registered when
# that command is first parsed). A run imports only the modules of its command; `miescore --help` imports none.
COMMANDS: dict[str, tuple[str, str]] = {
    "score": ("score", "score one edit"),
    "score-batch": ("score", "score a JSONL file of edits, resumable"),
    "demo": ("score", "score the bundled example edits end to end"),
    "serve": ("serve", "run the HTTP reward server (dynamic batching, JSON API, Prometheus metrics)"),
    "set-skill": ("skill", "write a skill (rubric) text file into a MIEScore checkpoint's config"),
    "spatialreward": ("spatialreward", "judge one edit with SpatialReward (edit regions, reasoning, sub-scores, "
                                       "reward)"),
    "benchmark": ("benchmark external_benchmarks editor_benchmarks",
                  "benchmark an evaluator (MIE-Bench, MER-Bench) or rank editing models"),
    "build-dataset": ("dataset", "build a Hub-native dataset (Parquet + card) from a raw release"),
    "convert-benchmark": ("dataset", "convert an external editing benchmark's release into the common Parquet schema"),
    "analyze-attention": ("analyze_attention", "attention of a generative judge's reasoning over each image: maps, "
                                               "Table-5 metrics, overlays"),
    "baselines": ("baselines", "compute Table 3 baseline metrics (SSIM, LPIPS, BRISQUE, CLIPScore, ...) per edit"),
    "tokens": ("tokens", "token budget of a checkpoint's prompts: rubric, instruction, labels, images, prefix reuse, "
                         "length limits"),
    "space": ("space", "assemble a ready-to-push Hugging Face Space folder"),
    "judge": ("judge", "score edits with a general MLLM as a zero-shot judge (resumable)"),
    "spatialreward-data": ("spatialreward_data", "build SpatialReward SFT rows with the D.2 data pipeline (grounding, "
                                                 "expert annotation, alignment; resumable)"),
    "doctor": ("doctor", "is this checkpoint sane? loading, processor consistency, token budget, score spread and "
                         "directions, parsing, throughput"),
    "mer-bench": ("mer_construction", "construct a MER-Bench release: synthesize instructions, generate candidates, "
                                      "annotate (Gradio), export the raw release"),
    "edit": ("edit", "make edits with an image editor (optionally with a trained LoRA)"),
    "export-vllm": ("export_vllm", "write a SpatialReward checkpoint in the plain Qwen3-VL layout that vLLM serves (no "
                                   "custom code; the reward settings kept), or a MIEScore one for the MIEScore vLLM "
                                   "plugin"),
}
COMMAND_HELP: dict[str, str] = {command: text for command, (_, text) in COMMANDS.items()}
COMMAND_MODULES: dict[str, tuple[str, ...]] = {  # module -> the top-level commands it adds (or adds under)
    module: tuple(c for c, (names, _) in COMMANDS.items() if module in names.split())
    for names, _ in COMMANDS.values() for module in names.split()}


def command_modules_for(argv: list[str] | None) -> list[str]:
    """The command modules ``argv`` needs: those adding its command (its first word); none when it names no command
    (``--help``, ``--version``, a typo), which gets the table of :data:`COMMAND_HELP` instead."""
    words = [a for a in argv or () if not a.startswith("-")]
    return [m for m, commands in COMMAND_MODULES.items() if words and words[0] in commands]


def number_arg(convert=int, minimum=None, maximum=None, exclusive=False):
    """argparse ``type=`` for a finite number within bounds (``exclusive`` makes both bounds strict)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if convert is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not math.isfinite(value):  # nan passes every bound check below; inf is no setting either
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        too_low = minimum is not None and (value <= minimum if exclusive else value < minimum)
        too_high = maximum is not None and (value >= maximum if exclusive else value > maximum)
        if too_low or too_high:
            if maximum is None or minimum is None:  # one bound: "must be >= 1"
                sign = (">" if minimum is not None else "<") + ("" if exclusive else "=")
                raise argparse.ArgumentTypeError(f"must be {sign} {minimum if maximum is None else maximum}, "
                                                 f"got {value}")
            bounds = f"({minimum}, {maximum})" if exclusive else f"[{minimum}, {maximum}]"
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


def quiet_transformers() -> None:
    """Silence transformers' warnings and progress bars before a command loads a checkpoint."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def add_device_args(parser, when: str = "") -> None:
    """``--device`` and ``--dtype`` of the commands that load a checkpoint (``parser``: a parser or an argument
    group); ``when`` prefixes both helps, e.g. ``"with --model: "`` where loading a model is optional."""
    parser.add_argument("--device", default="auto", help=f"{when}cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--dtype", default="auto", choices=list(DTYPES),
                        help=f"{when}weights dtype (default: bfloat16 on GPU, float32 on CPU)")


def add_pixel_budget_arg(parser: argparse.ArgumentParser) -> None:
    """``--max-sample-pixels``: the per-edit decoded-pixel budget checked from the image headers."""
    parser.add_argument("--max-sample-pixels", type=number_arg(int, minimum=1), default=DEFAULT_MAX_SAMPLE_PIXELS,
                        metavar="PIXELS", help="decoded pixels allowed per edit, all its images together, checked "
                        f"from the image headers before decoding (default {DEFAULT_MAX_SAMPLE_PIXELS:,})")


def add_model_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--model`` (a MIEScore checkpoint folder or Hub repo id) with ``--device`` and ``--dtype``."""
    parser.add_argument("--model", required=required, help="checkpoint folder or Hub repo id of a MIEScore model")
    add_device_args(parser)


class CommandParser(argparse.ArgumentParser):
    """The parser of ``miescore`` and of each of its commands: options and subcommands can be added when it first
    parses or shows its help (:func:`defer_options`), so that a command whose options need a slow import
    (``serve``: pydantic, about 0.4 s) or a registry (``convert-benchmark``: every converter module) costs the other
    commands nothing. Its subparsers action knows its parser (``owner``), for subcommands added under it later."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # every command's parser too (add_parser builds this class)
        super().__init__(*args, **kwargs)
        self.deferred_options = []

    def add_subparsers(self, **kwargs):
        action = super().add_subparsers(**kwargs)
        action.owner = self
        return action

    def _add_deferred_options(self) -> None:
        while self.deferred_options:
            self.deferred_options.pop(0)(self)

    def parse_known_args(self, args=None, namespace=None):
        self._add_deferred_options()  # a command's parser is called through this by its parent's subparsers
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:  # said by the innermost (sub)command, with its usage, before its parent sees them
            self.error(self.unknown_arguments_message(extras))
        return namespace, extras

    def unknown_arguments_message(self, extras: list) -> str:
        shown = [e.split("=", 1)[0] for e in extras if e.startswith("-")]
        if not shown:
            return f"unrecognized arguments: {' '.join(extras)}"
        options = [s for action in self._actions for s in action.option_strings]
        hint = did_you_mean(shown[0], options)
        # the values after an unknown option are not echoed: `--api-key KEY` (or `--api-key=KEY`) must not print
        # the key; each is counted
        hidden = len(extras) - len(shown) + sum("=" in e for e in extras if e.startswith("-"))
        values = f" ({hidden} value(s) not shown)" if hidden else ""
        return f"unrecognized arguments: {' '.join(shown)}{values}{hint}"

    def format_usage(self) -> str:
        self._add_deferred_options()
        return super().format_usage()

    def format_help(self) -> str:
        self._add_deferred_options()
        return super().format_help()


def defer_options(parser: CommandParser, add) -> None:
    """Call ``add(parser)`` when ``parser`` (a command's parser) first parses or formats its help."""
    parser.deferred_options.append(add)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``miescore`` parser: with ``argv``, the commands it names (:func:`command_modules_for`), or only the table
    of commands (:data:`COMMAND_HELP`) when it names none; without, every command's parser."""
    parser = CommandParser(prog="miescore", description="Human-aligned evaluation of multi-source image editing.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    names = list(COMMAND_MODULES) if argv is None else command_modules_for(argv)
    if not names:  # `miescore --help`, `--version`, a typo: the commands and their help, no module imported
        for command, text in COMMAND_HELP.items():
            sub.add_parser(command, help=text)
        return parser
    opened = {}  # module name -> the subcommands its register() opened
    for module_name in names:
        module = importlib.import_module(f"modeling_miescore.cli.{module_name}")
        parent = getattr(module, "PARENT_COMMAND", None)
        if parent is not None and parent not in opened:
            raise RuntimeError(f"cli.{module_name} adds subcommands to '{parent}', which is not listed before it in "
                               "COMMAND_MODULES or returns no subparsers from register()")
        if parent is not None:  # subcommands of a command: added when that command is parsed
            defer_options(opened[parent].owner, lambda _, register=module.register, kinds=opened[parent]:
                          register(kinds))
            continue
        action = module.register(sub)
        if action is not None:
            opened[module_name] = action
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_third_party_logs()  # before any command imports transformers or peft (see that module)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"miescore {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except (MIEScoreInputError, OutputWriteError, ModuleNotFoundError) as err:
        message = str(err)
        if isinstance(err, ModuleNotFoundError):
            message = missing_extra_message(err, getattr(args, "extra", None))
            if message is None:
                raise
        print(f"miescore {args.command}: error: {message}", file=sys.stderr)
        return EXIT_WRITE_FAILED if isinstance(err, OutputWriteError) else EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
