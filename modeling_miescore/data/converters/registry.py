"""The converter registry (the pyiqa / timm pattern): each converter module registers its class with
``@register_converter`` next to its declaration (``spec``, a :class:`~.schema.BenchmarkSpec`), and the registry
imports the package's modules by name on first use, as pyiqa's arch registry scans its folder: there is no central
list of benchmarks to keep up to date. A new converter module is found by being in the package.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Iterator

__all__ = ["ConverterRegistry"]


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
