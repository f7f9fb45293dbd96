"""Reading numbers from untrusted places (release files, raw CSV cells, metric results)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_float"]


def finite_float(value: Any) -> float | None:
    """``float(value)`` when it is a finite number, else ``None`` (NaN, inf, text that is no number, ``None``,
    and bools, which are flags rather than numbers)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
