"""Percentile bootstrap confidence intervals of any metric, optionally resampling whole instances (the 12 edits of
one MIE-Bench instance, the candidates of one MER-Bench group).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .inputs import MetricWarning

__all__ = ["CI", "MIN_RESAMPLING_UNITS", "bootstrap_ci", "distinct_resamples", "too_few_units"]

MIN_RESAMPLING_UNITS = 10


def distinct_resamples(k: int) -> int:
    """How many different resamples (multisets of size ``k``) ``k`` resampling units allow: C(2k - 1, k)."""
    return math.comb(2 * k - 1, k) if k > 0 else 0


def too_few_units(k: int, what: str = "resampling units", minimum: int = MIN_RESAMPLING_UNITS) -> str | None:
    """Why ``k`` units are too few for a bootstrap interval (None when they are enough)."""
    if k >= minimum:
        return None
    what = what[:-1] if k == 1 and what.endswith("s") else what
    count = distinct_resamples(k)
    plural = "" if count == 1 else "s"
    return (f"only {k} {what} to resample ({count:,} distinct resample{plural}); a confidence interval needs at "
            f"least {minimum}")


class CI(NamedTuple):
    """A point estimate with a percentile-bootstrap interval."""

    point: float
    low: float
    high: float


def _leaves(obj: Any, prefix: tuple = ()) -> dict[tuple, float]:
    if isinstance(obj, Mapping):
        out: dict[tuple, float] = {}
        for k, v in obj.items():
            out.update(_leaves(v, prefix + (k,)))
        return out
    if obj is None:
        return {}
    try:
        return {prefix: float(obj)}
    except (TypeError, ValueError):
        return {}  # non-numeric leaves (labels, None) get no interval


def _rebuild(template: Any, values: dict[tuple, CI], prefix: tuple = ()) -> Any:
    if isinstance(template, Mapping):
        out = {}
        for k, v in template.items():
            sub = _rebuild(v, values, prefix + (k,))
            if sub is not None:
                out[k] = sub
        return out
    return values.get(prefix)


def _take(arr: Any, idx: np.ndarray) -> Any:
    if isinstance(arr, np.ndarray):
        return arr[idx]
    if hasattr(arr, "iloc"):  # pandas
        return arr.iloc[idx]
    return [arr[i] for i in idx]


def bootstrap_ci(
    fn: Callable[..., Any],
    *arrays: Any,
    n: int = 1000,
    seed: int = 0,
    groups: Any = None,
    level: float = 0.95,
    min_units: int = MIN_RESAMPLING_UNITS,
) -> CI | dict[Any, Any]:
    """Percentile bootstrap CI of ``fn(*arrays)`` (a number or a nested dict of numbers: a :class:`CI` per leaf).

    Rows (axis 0) are resampled ``n`` times; with ``groups`` (one id per row) whole instances are, so correlated
    rows do not make the interval too narrow. Resamples where ``fn`` gives NaN or raises ``ValueError`` are left
    out, and a :class:`MetricWarning` reports how many. With fewer than ``min_units`` distinct resampling units
    the bounds are NaN and a :class:`MetricWarning` says why (``min_units=1`` resamples anyway).
    """
    arrays, size = _checked_arrays(arrays, n, level)
    point_raw = fn(*arrays)
    point = _leaves(point_raw)
    if not point:
        raise ValueError("fn must return a number or a dict of numbers")
    keys = list(point)
    draw = _index_sampler(np.random.default_rng(seed), size, groups)  # checks ``groups`` first
    units = size if groups is None else int(np.unique(np.asarray(groups)).shape[0])
    reason = too_few_units(units, "rows" if groups is None else "groups", min_units)
    if reason is not None:
        warnings.warn(f"{reason}: the interval is omitted (NaN)", MetricWarning, stacklevel=2)
        cis = {k: CI(point[k], math.nan, math.nan) for k in keys}
        return cis[()] if keys == [()] else _rebuild(point_raw, cis)

    samples, failed = _resample(fn, arrays, draw, int(n), keys)
    n_nan = int(np.isnan(samples).any(axis=1).sum())
    if n_nan:
        warnings.warn(
            f"{n_nan} of {int(n)} bootstrap resamples gave NaN or failed ({failed} raised ValueError); "
            "they are left out of the percentiles",
            MetricWarning,
            stacklevel=2,
        )
    alpha = (1.0 - level) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column -> NaN bounds
        lows = np.nanquantile(samples, alpha, axis=0)
        highs = np.nanquantile(samples, 1.0 - alpha, axis=0)
    cis = {k: CI(point[k], float(lo), float(hi)) for k, lo, hi in zip(keys, lows, highs)}
    if keys == [()]:
        return cis[()]
    return _rebuild(point_raw, cis)


def _checked_arrays(arrays: tuple, n: int, level: float) -> tuple[tuple, int]:
    """The arrays (regular lists as numpy arrays) and their common length; ``ValueError`` for bad arguments."""
    if not arrays:
        raise ValueError("pass at least one array to resample")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    arrays = tuple(np.asarray(a) if isinstance(a, (list, tuple)) and _is_regular(a) else a for a in arrays)
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise ValueError(f"arrays differ in length: {[len(a) for a in arrays]}")
    size = lengths.pop()
    if size == 0:
        raise ValueError("arrays are empty")
    return arrays, size


def _index_sampler(rng: np.random.Generator, size: int, groups: Any) -> Callable[[], np.ndarray]:
    """A function drawing one resample's row indices: ``size`` rows, or whole groups when ``groups`` is given."""
    if groups is None:
        return lambda: rng.integers(0, size, size)
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != size:
        raise ValueError(f"groups must give one id per row ({size}), got shape {g.shape}")
    _, inv = np.unique(g, return_inverse=True)
    # rows sorted by group: group k is order[start_k : start_k + count_k]
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv)
    starts = np.cumsum(counts) - counts
    n_groups = counts.shape[0]

    def draw() -> np.ndarray:
        pick = rng.integers(0, n_groups, n_groups)
        lens = counts[pick]
        out_starts = np.cumsum(lens) - lens
        return order[np.repeat(starts[pick] - out_starts, lens) + np.arange(int(lens.sum()))]

    return draw


def _resample(fn: Callable[..., Any], arrays: tuple, draw: Callable[[], np.ndarray], n: int,
              keys: list[tuple]) -> tuple[np.ndarray, int]:
    """``(n, len(keys))`` resampled values (NaN rows where ``fn`` raised ``ValueError``) and that failure count."""
    samples = np.full((n, len(keys)), np.nan)
    failed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetricWarning)
        for r in range(n):
            idx = draw()
            try:
                res = _leaves(fn(*(_take(a, idx) for a in arrays)))
            except ValueError:
                failed += 1
                continue
            samples[r] = [res.get(k, np.nan) for k in keys]
    return samples, failed


def _is_regular(seq: Sequence) -> bool:
    """True when a list converts to a non-object numpy array (not ragged groups)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(seq).dtype != object
    except ValueError:
        return False
