"""Registries of ``name -> "module:Attribute"`` entries, imported only when an entry is looked up."""

from __future__ import annotations

import importlib
from typing import Any, Mapping

__all__ = ["import_attribute", "load_registered"]


def import_attribute(target: str, package: str | None = None) -> Any:
    """``"module:Attribute"`` -> the attribute (a module starting with ``.`` is relative to ``package``)."""
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name, package), attribute)


def load_registered(registry: Mapping[str, str], name: str, package: str, what: str) -> Any:
    """The attribute that ``registry[name]`` names (module relative to ``package``); a clear error for unknown names."""
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; choose one of: {', '.join(registry)}")
    return import_attribute(registry[name], package)
