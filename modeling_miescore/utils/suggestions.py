""""Did you mean ...?" for a mistyped name (an option, a YAML key, a reward kind, a tracker): the closest of the
names that exist, by :func:`difflib.get_close_matches` (ratio >= 0.6, the standard library's default, which
catches one or two wrong, missing or swapped letters and nothing far)."""

from __future__ import annotations

import difflib
from typing import Iterable, Optional

__all__ = ["closest_name", "did_you_mean"]


def closest_name(word: str, names: Iterable[str], cutoff: float = 0.6) -> Optional[str]:
    """The name of ``names`` closest to ``word``, or None when none is close."""
    matches = difflib.get_close_matches(word, list(dict.fromkeys(names)), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(word: str, names: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean X?"`` for the closest name, or ``""`` (append it to an error message)."""
    match = closest_name(word, names, cutoff)
    return f"; did you mean {match}?" if match else ""
