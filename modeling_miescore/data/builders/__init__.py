"""Dataset builders: raw benchmark releases -> Hub-native Parquet datasets with generated cards.

Each builder module exposes ``build_<name>(raw_dir, out_dir, ...) -> summary``,
``add_cli_arguments(parser)`` and ``run_cli(args) -> int``; :data:`BUILDERS` maps the CLI names
(``miescore build-dataset <name>``) to the modules. Imports are lazy: ``datasets``/``pyarrow`` load
only when a build runs.
"""

from __future__ import annotations

import importlib

BUILDERS = {
    "mie-bench": "modeling_miescore.data.builders.mie_bench",
    "mer-bench": "modeling_miescore.data.builders.mer_bench",
}

_LAZY = {
    "build_mie_bench": ".mie_bench",
    "build_mer_bench": ".mer_bench",
    "DatasetValidationError": ".common",
    "OutputExistsError": ".common",
    "HubPushError": ".common",
    "Problem": ".common",
}

__all__ = sorted([*_LAZY, "BUILDERS", "get_builder"])


def get_builder(name: str):
    """The builder module for a CLI name (``"mie-bench"`` / ``"mer-bench"``)."""
    try:
        return importlib.import_module(BUILDERS[name])
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(BUILDERS)}") from None


def __getattr__(name):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name], __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
