"""``miescore build-dataset <name>`` (one subcommand per :data:`modeling_miescore.data.builders.BUILDERS` entry) and
``miescore convert-benchmark NAME`` (one per :data:`modeling_miescore.data.converters.CONVERTERS` entry).

Exit status:

* **0**: the dataset was built (and pushed, with ``--push-to-hub``).
* **2**: the command cannot run as given, and nothing was built: a bad option; a missing or invalid raw
  release (every problem is listed with file:line); an existing ``--out`` without ``--overwrite``, or one that
  another build is writing; a missing ``data`` extra; ``--push-to-hub`` without a valid repository id, a
  token, or a reachable Hub (all checked before building).
* **1**: the build ran and a later step failed: the push after a successful build (the local dataset is
  complete), or a write error such as a full disk (nothing is left half-written).
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from typing import Mapping
from ..data.builders.base import BuildUsageError
from ..hub.errors import MIEScoreInputError
from ..data.builders.output_folder import HubPushError, HubPushUnavailableError, OutputExistsError
from ..data.builders.raw_files import DatasetValidationError
from ..utils.output_lock import OutputBusyError
from .main import COMMAND_HELP, defer_options
from ..data.converters import CONVERTERS, get_converter

EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN = 0, 1, 2


def option_flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, bool]]:
    """``{dest: (long flag, is a switch)}`` of the options of ``parser`` (a builder's ``dest`` is the API
    parameter it sets)."""
    flags = {}
    for action in parser._actions:  # argparse keeps no public list of a parser's actions
        long_flags = [f for f in action.option_strings if f.startswith("--")]
        if long_flags and action.dest != "help":
            flags[action.dest] = (long_flags[0], action.nargs == 0)
    return flags


def flag_wording(message: str, flags: Mapping[str, tuple[str, bool]]) -> str:
    """An API message in command-line words: a switch written ``name=True`` and a parameter whose name has an
    underscore (``out_dir``, ``push_to_hub=...``) become their flags. Names inside paths or quotes stay."""
    for dest, (flag, is_switch) in flags.items():
        if is_switch:
            message = re.sub(rf"(?<![\w./\\'\"-]){re.escape(dest)}=True\b", flag, message)
        elif "_" in dest:
            message = re.sub(rf"(?<![\w./\\'\"-]){re.escape(dest)}(?![\w/\\'\"-])", flag, message)
    return message


def _exit_status(err: BaseException) -> int | None:
    """The exit status for an exception of a build, ``None`` for an unexpected one (a bug: let it raise)."""
    cannot_run = (DatasetValidationError, BuildUsageError, OutputExistsError, OutputBusyError,
                  HubPushUnavailableError, ImportError, MIEScoreInputError)
    if isinstance(err, cannot_run):
        return EXIT_CANNOT_RUN
    if isinstance(err, (HubPushError, OSError)):
        return EXIT_FAILED
    return None


def run_builder(builder, flags: Mapping[str, tuple[str, bool]], args: argparse.Namespace) -> int:
    """Build from parsed ``args``; print the summary (stdout) or one clear error (stderr); return the exit status."""
    try:
        summary = builder.from_cli_args(args).build()
    except Exception as err:  # noqa: BLE001 - sorted by _exit_status; anything else is re-raised
        status = _exit_status(err)
        if status is None:
            raise
        if isinstance(err, ImportError):
            message = f"building needs the data extra ({err.name or err} missing): pip install 'miescore[data]'"
        else:
            message = flag_wording(str(err), flags)
        print(f"error: {message}", file=sys.stderr)
        return status
    print(summary.describe())
    return EXIT_OK


def add_builder_subcommands(parser: argparse.ArgumentParser, registry=None, lookup=None,
                            help_format: str = "build {title} from its raw release") -> None:
    """One subcommand per builder of ``registry`` (``name -> "module:Class"``, with its ``lookup``; default: the
    dataset builders) under ``parser``."""
    if registry is None:
        from ..data.builders import BUILDERS as registry
        from ..data.builders import get_builder as lookup

    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{" + ",".join(registry) + "}")
    for name in registry:
        builder = lookup(name)
        kind_parser = kinds.add_parser(name, help=help_format.format(title=builder.title),
                                       description=(builder.__doc__ or "").strip().splitlines()[0])
        builder.add_cli_arguments(kind_parser)
        kind_parser.set_defaults(func=functools.partial(run_builder, builder, option_flags(kind_parser)))


def register(sub) -> None:
    parser = sub.add_parser("build-dataset", help=COMMAND_HELP["build-dataset"])
    defer_options(parser, add_builder_subcommands)  # the builders' modules are imported only when it is used
    parser = sub.add_parser("convert-benchmark", help=COMMAND_HELP["convert-benchmark"],
                            description="Convert a benchmark's public release (Table 6 of the MIEScore paper, "
                                        "Tables 1 and 3 of the SpatialReward paper) into pointwise / pairwise / "
                                        "editing Parquet configs with a card, for 'miescore benchmark zero-shot', "
                                        "'reward', 'gedit' and 'imgedit'.")
    defer_options(parser, lambda parser: add_builder_subcommands(parser, CONVERTERS, get_converter,
                                                                 help_format="convert {title}"))
