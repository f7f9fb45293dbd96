"""Registries of ``name -> "module:Attribute"`` entries, imported only when an entry is looked up."""

from __future__ import annotations

import importlib
from typing import Any, Mapping

__all__ = ["load_registered"]


def load_registered(registry: Mapping[str, str], name: str, package: str, what: str) -> Any:
    """The attribute that ``registry[name]`` names (module relative to ``package``); a clear error for unknown names."""
    try:
        module_name, attribute = registry[name].split(":")
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; choose one of: {', '.join(registry)}") from None
    return getattr(importlib.import_module(module_name, package), attribute)
