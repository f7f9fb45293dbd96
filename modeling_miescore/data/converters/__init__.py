"""Converters: external image-editing benchmarks, from their public release formats, into one single-source edit
dataset (Parquet + card, ``datasets.load_dataset``-native) that ``miescore benchmark zero-shot`` / ``reward`` read,
and the editor benchmarks' editing inputs that ``miescore benchmark gedit`` / ``imgedit`` judge an editor on.

``miescore convert-benchmark NAME --raw DIR --out DIR`` (or ``get_converter(NAME)(raw, out).build()``) runs one.

Registry (:data:`CONVERTERS`, ``name -> converter class``). Each converter module declares its benchmark once, next
to the converter: the class carries its :class:`~.schema.BenchmarkSpec` (``spec``: title, kinds, the release format's
source URL, what the release folder holds and the file or split converted by default, dimension mapping, tie rule,
the protocol that scores it, the report columns it fills, an editor benchmark's judge protocol, the citation) and
registers with ``@register_converter``; the module's docstring cites how the release is laid out. The registry
(:class:`ConverterRegistry`, the pyiqa / timm pattern) imports this package's modules by name on first use (as
pyiqa's arch registry scans its folder), so there is no central list. Adding a benchmark: one converter module here and one fixture writing its
release (``make_raw_<module>`` in ``modeling_miescore.testing.raw_benchmarks``); the tests iterate the registry.

``miescore convert-benchmark --help`` lists the registered benchmarks (MIEScore Table 6, SpatialReward Tables 1
and 3). MER-Bench (SpatialReward Table 1) is built by ``miescore build-dataset mer-bench`` (its own K-pair schema).

Common output schema. Two configs, each one ``test`` split, written under ``data/<config>/``:

* ``pointwise``: one edited image with human scores: ``id``, ``source_images`` (list of images; one for
  single-source benchmarks), ``edited_image``, ``instruction``, ``editing_model``, ``group_id`` (rows that share
  sources/instruction or a ranking group), ``subset`` (the benchmark's task type or sub-split) and
  ``human_visual_quality``, ``human_instruction_following``, ``human_attribute_preservation``, ``human_overall``
  (float, on the benchmark's own scale, null where the benchmark has no such dimension; which benchmark
  dimension fills which column is the ``dimensions`` mapping of the spec, recorded in the card).
* ``pairwise``: two edits of the same sources and instruction with a human preference: ``id``,
  ``source_images``, ``instruction``, ``edited_a``, ``edited_b``, ``edited_a_id``, ``edited_b_id`` (ids of the
  edited images: an image in several pairs keeps one id, so it is scored once), ``model_a``, ``model_b``,
  ``label`` (ClassLabel ``a`` / ``b`` / ``tie`` / ``both_bad``), ``dimension`` (the MIEScore score key the
  preference is about), ``subset``, ``group_id``.
* ``editing`` (editor benchmarks): an editing input for an editor to answer, no edited image and no human label:
  ``id`` (unique), ``key`` (the benchmark's key), ``source_images``, ``instruction``, ``category`` (the benchmark's
  task type), ``language`` (instruction language) and one bool column per subset flag of the spec
  (GEdit-Bench: ``intersection_exist``). ``miescore benchmark gedit`` / ``imgedit`` judge an editor's outputs.

The card's metadata holds a ``miescore_benchmark`` block (name, kinds, dimension mapping, tie rule, format source)
that the benchmark runner reads. Bad raw data: every problem is listed with file:line (Parquet/Arrow: file:row)
and nothing is written (CLI exit status 2).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Iterator

__all__ = ["CONVERTERS", "ConverterRegistry", "benchmark_spec", "editor_protocols", "get_converter",
           "register_converter"]


class ConverterRegistry(Mapping):
    """``name -> converter class`` over the modules of ``package`` (at ``path``), imported on first use; ordered by
    module name."""

    def __init__(self, package: str, path):
        self._package, self._path = package, [str(p) for p in path]
        self._classes: dict[str, type] = {}
        self._loaded = False

    def register(self, cls: type) -> type:
        """Class decorator: register a :class:`~.base.BenchmarkConverter` subclass under ``cls.spec.name``."""
        name = cls.spec.name
        if cls.__module__.rpartition(".")[0] != self._package:
            raise ValueError(f"converter {name!r} is defined in {cls.__module__}, not in a module of {self._package}; "
                             "put each converter module in that package")
        taken = self._classes.get(name)
        if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"two converters register the benchmark name {name!r}: {taken.__module__}."
                             f"{taken.__qualname__} and {cls.__module__}.{cls.__qualname__}")
        self._classes[name] = cls
        return cls

    def modules(self) -> list[str]:
        """The package's module names (every one is imported; the converter modules register a class)."""
        return sorted(m.name for m in pkgutil.iter_modules(self._path) if not m.name.startswith("_"))

    def _load(self) -> dict[str, type]:
        if not self._loaded:
            for module in self.modules():
                importlib.import_module(f".{module}", self._package)
            self._loaded = True
            self._classes = dict(sorted(self._classes.items(), key=lambda item: item[1].__module__))
        return self._classes

    def __getitem__(self, name: str) -> type:
        classes = self._load()
        try:
            return classes[name]
        except KeyError:
            raise ValueError(f"unknown benchmark {name!r}; choose one of: {', '.join(classes)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, name) -> bool:
        return name in self._load()


CONVERTERS = ConverterRegistry(__name__, __path__)
register_converter = CONVERTERS.register


def get_converter(name: str):
    """The converter class (a :class:`~.base.BenchmarkConverter` subclass) registered as ``name``."""
    return CONVERTERS[name]


def editor_protocols() -> dict:
    """``name -> EditorBenchmark``: the judge protocols the registered converters declare (``spec.editor``), in
    registry order: what ``miescore benchmark gedit`` / ``imgedit`` run and their reports dispatch on."""
    return {cls.spec.editor.name: cls.spec.editor for cls in CONVERTERS.values() if cls.spec.editor}


def benchmark_spec(name: str):
    """The :class:`~.schema.BenchmarkSpec` of the benchmark registered as ``name``, or None for an unknown name."""
    return CONVERTERS[name].spec if name in CONVERTERS else None

