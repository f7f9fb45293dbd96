"""``miescore build-dataset <name>``: one subcommand per builder of the registry
(:data:`modeling_miescore.data.builders.BUILDERS`).

Exit status: 0 built, 2 the raw release has problems (every one listed with file:line), 1 an unusable
environment, option or output folder, or a failed push.
"""

from __future__ import annotations

import argparse


def add_builder_subcommands(parser: argparse.ArgumentParser, registry=None, lookup=None,
                            help_format: str = "build {title} from its raw release") -> None:
    """One subcommand per registered builder under ``parser``, each with ``func(args) -> exit status``.

    ``registry`` / ``lookup``: a ``name -> "module:Class"`` registry and its lookup function (default: the dataset
    builders); ``help_format``: each subcommand's help, with the builder's ``{title}``.
    """
    if registry is None:
        from ..data.builders import BUILDERS as registry
        from ..data.builders import get_builder as lookup

    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{" + ",".join(registry) + "}")
    for name in registry:
        builder = lookup(name)
        kind_parser = kinds.add_parser(name, help=help_format.format(title=builder.title),
                                       description=(builder.__doc__ or "").strip().splitlines()[0])
        builder.add_cli_arguments(kind_parser)
        kind_parser.set_defaults(func=builder.run_cli)


def register(sub) -> None:
    parser = sub.add_parser("build-dataset", help="build a Hub-native dataset (Parquet + card) from a raw release")
    add_builder_subcommands(parser)
