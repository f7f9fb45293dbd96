"""``miescore convert-benchmark NAME --raw DIR --out DIR``: one subcommand per converter of the registry
(:data:`modeling_miescore.data.converters.CONVERTERS`).

Exit status: 0 converted, 2 the raw release has problems (every one listed with file:line), 1 an unusable
environment, option or output folder.
"""

from __future__ import annotations
from .main import COMMAND_HELP, defer_options
from ..data.converters import CONVERTERS, get_converter
from .dataset import add_builder_subcommands


def register(sub) -> None:
    parser = sub.add_parser("convert-benchmark",
                            help=COMMAND_HELP["convert-benchmark"],
                            description="Convert a benchmark's public release (Table 6 of the MIEScore paper, "
                                        "Tables 1 and 3 of the SpatialReward paper) into pointwise / pairwise / "
                                        "editing Parquet configs with a card, for 'miescore benchmark zero-shot', "
                                        "'reward', 'gedit' and 'imgedit'.")
    defer_options(parser, _add_converters)  # the registry imports every converter module: only when used


def _add_converters(parser) -> None:
    add_builder_subcommands(parser, CONVERTERS, get_converter, help_format="convert {title}")
