"""Input checks shared by the metric modules (a clear ``ValueError``: which argument, what is wrong, how to fix it),
and the warning classes they issue.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = ["ConstantInputWarning", "MetricWarning", "as_float_1d", "check_nan_policy", "is_constant", "paired",
           "warn_constant"]

NAN_POLICIES = ("raise", "omit")
MIN_PAIRED = 3  # items a correlation needs


class MetricWarning(UserWarning):
    """Base class of the warnings issued by :mod:`modeling_miescore.evaluation.metrics`."""


class ConstantInputWarning(MetricWarning):
    """An input is constant, so the correlation is undefined (NaN)."""


def as_float_1d(x: Any, name: str) -> np.ndarray:
    """``x`` as a 1-D float64 array; ``ValueError`` naming ``name`` otherwise."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D sequence of numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def check_nan_policy(nan_policy: str) -> None:
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")


def paired(x: Any, y: Any, nan_policy: str = "raise") -> tuple[np.ndarray, np.ndarray]:
    """``pred`` and ``mos`` as two equal-length float vectors with NaNs raised on or dropped (pairwise), and at least
    :data:`MIN_PAIRED` items."""
    names = ("pred", "mos")
    check_nan_policy(nan_policy)
    a = as_float_1d(x, names[0])
    b = as_float_1d(y, names[1])
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{names[0]} and {names[1]} differ in length: {a.shape[0]} vs {b.shape[0]}")
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if nan_a.any() or nan_b.any():
        if nan_policy == "raise":
            bad = ", ".join(
                f"{name} has {int(m.sum())} NaN value(s) (first at index {int(np.argmax(m))})"
                for name, m in ((names[0], nan_a), (names[1], nan_b))
                if m.any()
            )
            raise ValueError(f"{bad} of {a.shape[0]}; pass nan_policy='omit' to drop those items pairwise")
        keep = ~(nan_a | nan_b)
        a, b = a[keep], b[keep]
    for name, arr in ((names[0], a), (names[1], b)):
        if np.isinf(arr).any():
            raise ValueError(f"{name} has {int(np.isinf(arr).sum())} infinite value(s); remove or clip them")
    if a.shape[0] < MIN_PAIRED:
        raise ValueError(f"need at least {MIN_PAIRED} items with both {names[0]} and {names[1]}, got {a.shape[0]}")
    return a, b


def is_constant(a: np.ndarray) -> bool:
    return a.shape[0] == 0 or bool(a.min() == a.max())


def warn_constant(a: np.ndarray, b: np.ndarray, names: tuple[str, str], stacklevel: int = 3) -> bool:
    """Issue a :class:`ConstantInputWarning` naming the constant input(s); True when there was one."""
    const = [n for n, arr in zip(names, (a, b)) if is_constant(arr)]
    if const:
        warnings.warn(
            f"{' and '.join(const)} {'is' if len(const) == 1 else 'are'} constant; correlations are NaN",
            ConstantInputWarning,
            stacklevel=stacklevel,
        )
        return True
    return False
