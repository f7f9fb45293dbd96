"""Pearson, Spearman and Kendall coefficients on already checked float vectors (no validation, no warnings; a constant
input gives NaN, silently).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .inputs import is_constant

__all__ = ["kendall", "pearson", "rankdata", "spearman"]


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r of two validated vectors; NaN when one is constant (no scipy warning)."""
    # Elementwise products and numpy's pairwise sum, not BLAS dot: as fast on this size, more accurate, and
    # free of BLAS thread spin-up, which made a dot product 100x slower on a busy shared CPU.
    da = a - a.mean()
    db = b - b.mean()
    den = math.sqrt(float(np.sum(da * da)) * float(np.sum(db * db)))
    if den == 0.0:
        return float("nan")
    return float(np.clip(np.sum(da * db) / den, -1.0, 1.0))


def rankdata(a: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank); same values as ``scipy.stats.rankdata`` but
    about 3x faster on 36k items (one argsort, no array-API dispatch)."""
    sorter = np.argsort(a)
    inv = np.empty(sorter.shape[0], dtype=np.intp)
    inv[sorter] = np.arange(sorter.shape[0])
    s = a[sorter]
    obs = np.concatenate(([True], s[1:] != s[:-1]))
    dense = np.cumsum(obs)[inv]
    count = np.concatenate((np.flatnonzero(obs), [obs.shape[0]]))
    return 0.5 * (count[dense] + count[dense - 1] + 1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    # SRCC = Pearson r of the average ranks (ties share their mean rank), as scipy.stats.spearmanr.
    return pearson(rankdata(a), rankdata(b))


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    # KRCC = Kendall tau-b (tie-corrected), scipy's O(n log n) implementation.
    if is_constant(a) or is_constant(b):
        return float("nan")
    return float(stats.kendalltau(a, b).statistic)
