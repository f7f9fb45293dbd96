"""Code named by a string -> the object: ``package.module:function`` specs of a user's code (a reward callable, an
editor factory, an evaluator), with one-line errors, and registries of ``name -> "module:Attribute"`` imported
only when an entry is looked up.

Importing runs the module's code: specs come from the user's own command line or config, never from a
downloaded folder.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from ..hub.errors import MIEScoreInputError
from .suggestions import did_you_mean


def import_callable(spec: str, what: str, error: type = MIEScoreInputError) -> Callable:
    """The callable ``spec`` (``"package.module:function"``, split at its last ``:``) names.

    ``what`` names the spec in errors (``"reward callable"``, ``"--evaluator"``); ``error`` is the exception
    class raised (a :class:`~modeling_miescore.hub.image_io.MIEScoreInputError`, a ``ValueError``, by default) for a
    spec without a module or a function, a module that cannot be imported, or a name that is not callable."""
    module_name, _, attribute = str(spec).rpartition(":")
    if not module_name.strip() or not attribute.strip():
        raise error(f"{what} {spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as failure:
        raise error(f"{what} {spec!r}: cannot import module {module_name!r} ({failure})") from None
    target = getattr(module, attribute, None)
    if not callable(target):
        public = [name for name in dir(module) if not name.startswith("_") and callable(getattr(module, name))]
        raise error(f"{what} {spec!r}: module {module_name!r} has no callable {attribute!r}"
                    f"{did_you_mean(attribute, public)}")
    return target


def import_attribute(target: str, package: str | None = None) -> Any:
    """``"module:Attribute"`` -> the attribute (a module starting with ``.`` is relative to ``package``)."""
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name, package), attribute)


def load_registered(registry: Mapping[str, str], name: str, package: str, what: str) -> Any:
    """The attribute that ``registry[name]`` names (module relative to ``package``); a clear error for unknown names."""
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; choose one of: {', '.join(registry)}")
    return import_attribute(registry[name], package)


__all__ = ["import_attribute", "import_callable", "load_registered"]
