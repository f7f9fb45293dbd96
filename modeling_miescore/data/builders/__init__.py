"""Dataset builders: raw benchmark releases -> Hub-native Parquet datasets with generated cards.

:data:`BUILDERS` is the registry: it names each builder (the ``miescore build-dataset <name>`` and
``dataset_scripts/build_dataset.py <name>`` argument) and the class that builds it. The command line is made
from it, so a new builder is one entry here plus its module. Imports are lazy: looking a builder up loads
neither ``datasets`` nor ``pyarrow`` nor ``pandas``; they load when a build runs.

Modules: :mod:`.base` (stages, shared options, run, exit status), :mod:`.raw_files` (line-numbered reading,
problem collection, symbolic-link checks), :mod:`.output_folder` (atomic output folder, Parquet shards, card, Hub
push); per dataset its builder with its raw-file readers (:mod:`.mie_bench`, :mod:`.mer_bench`) and its card
(``*_card``), and :mod:`.mie_bench_split` (train/validation/test assignment). The command line and its exit status:
:mod:`modeling_miescore.cli.dataset`.
"""

from __future__ import annotations

from ...utils.import_spec import load_registered

__all__ = ["BUILDERS", "get_builder"]

# name -> "module:Class" (module relative to this package)
BUILDERS: dict[str, str] = {
    "mie-bench": ".mie_bench:MIEBenchBuilder",
    "mer-bench": ".mer_bench:MERBenchBuilder",
}


def get_builder(name: str):
    """The builder class (a :class:`~.base.DatasetBuilder` subclass) registered as ``name``."""
    return load_registered(BUILDERS, name, __name__, "dataset")
