"""``miescore build-dataset <name>``: one subcommand per builder of the registry
(:data:`modeling_miescore.data.builders.BUILDERS`).

Exit status: 0 built, 2 the raw release has problems (every one listed with file:line), 1 an unusable
environment, option or output folder, or a failed push.
"""

from __future__ import annotations

import argparse


def add_builder_subcommands(parser: argparse.ArgumentParser) -> None:
    """One subcommand per registered builder under ``parser``, each with ``func(args) -> exit status``."""
    from ..data.builders import BUILDERS, get_builder

    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{" + ",".join(BUILDERS) + "}")
    for name in BUILDERS:
        builder = get_builder(name)
        kind_parser = kinds.add_parser(name, help=f"build {builder.title} from its raw release",
                                       description=(builder.__doc__ or "").strip().splitlines()[0])
        builder.add_cli_arguments(kind_parser)
        kind_parser.set_defaults(func=builder.run_cli)


def register(sub) -> None:
    parser = sub.add_parser("build-dataset", help="build a Hub-native dataset (Parquet + card) from a raw release")
    add_builder_subcommands(parser)
