"""``package.module:function`` specs naming a user's code (a reward callable, an editor factory, a single-source
evaluator, an editing system) -> the callable, with one-line errors that say what was asked for.

Importing runs the module's code: these specs come from the user's own command line or config, never from a
downloaded folder.
"""

from __future__ import annotations

import importlib
from typing import Callable

from ..image_io import MIEScoreInputError
from .suggestions import did_you_mean

__all__ = ["import_callable"]


def import_callable(spec: str, what: str, error: type = MIEScoreInputError) -> Callable:
    """The callable ``spec`` (``"package.module:function"``, split at its last ``:``) names.

    ``what`` names the spec in errors (``"reward callable"``, ``"--evaluator"``); ``error`` is the exception
    class raised (a :class:`~modeling_miescore.image_io.MIEScoreInputError`, a ``ValueError``, by default) for a
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
