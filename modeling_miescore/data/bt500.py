"""ITU-R BT.500 screening of subjective ratings: outlier ratings per item, then unreliable subjects.

Steps 1 and 2 of :func:`modeling_miescore.data.mos.compute_mos` (MIEScore paper, "Subjective Data Processing",
following ITU-R BT.500 Annex 2 §2.3.1, renumbered A1-2.3.1 in BT.500-14). Vectorised with numpy ``bincount``
over integer group codes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["CellOutliers", "REL_TOL", "find_outliers", "group_mean_std", "screen_subjects"]

# ITU-R BT.500 Annex 2 §2.3.1 constants.
_KURTOSIS_NORMAL_RANGE = (2.0, 4.0)  # 2 <= beta2 <= 4 -> treat the cell's scores as normal
_BOUND_NORMAL = 2.0  # 2 sigma if normal ...
_BOUND_NON_NORMAL = math.sqrt(20.0)  # ... sqrt(20) sigma otherwise
_MAX_OUTLIER_SHARE = 0.05  # reject if (P+Q)/n > 0.05 (BT.500; also the paper's "over 5%")
_MAX_ASYMMETRY = 0.3  # BT.500 only: ... and |P-Q|/(P+Q) < 0.3
# "At or beyond the bound": ratings within this relative tolerance of the bound count as at it, so
# that a rating sitting exactly on mu + 2 sigma (common with discrete scales) is not lost to
# floating-point rounding.
REL_TOL = 1e-9


def group_mean_std(codes: np.ndarray, values: np.ndarray, n_groups: int, ddof: int):
    """Per-group count, mean, standard deviation (NaN where count <= ddof) and deviations."""
    n = np.bincount(codes, minlength=n_groups).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes, weights=values, minlength=n_groups) / n
        dev = values - mean[codes]
        ss = np.bincount(codes, weights=dev * dev, minlength=n_groups)
        std = np.sqrt(ss / (n - ddof))
    std[n <= ddof] = np.nan
    return n, mean, std, dev


@dataclass
class CellOutliers:
    """Step 1 per (item, dimension) cell and per rating; see :func:`find_outliers`."""

    n: np.ndarray
    mean: np.ndarray
    sigma: np.ndarray
    kurtosis: np.ndarray
    normal: np.ndarray
    spread: np.ndarray  # sigma > 0 (up to rounding): outliers are possible
    bound_factor: np.ndarray  # 2 or sqrt(20)
    is_p: np.ndarray  # per rating: r >= mu + bound
    is_q: np.ndarray  # per rating: r <= mu - bound

    @property
    def is_outlier(self) -> np.ndarray:
        return self.is_p | self.is_q


def find_outliers(r: np.ndarray, cell: np.ndarray, n_cells: int) -> CellOutliers:
    """Step 1, ITU-R BT.500 Annex 2 §2.3.1: outlier ratings of each (item, dimension) cell, over all subjects.

    ``beta2 = m4 / m2**2`` (biased moments); 2 <= beta2 <= 4 -> bound 2 sigma, else sqrt(20) sigma (sigma with
    ddof=0); a rating at or beyond ``mu +/- bound`` is an outlier. Cells with sigma == 0 have none.
    """
    n, mean, sigma, dev = group_mean_std(cell, r, n_cells, ddof=0)
    m2 = sigma**2
    m4 = np.bincount(cell, weights=dev**4, minlength=n_cells) / n
    spread = sigma > REL_TOL * np.maximum(1.0, np.abs(mean))  # sigma == 0 up to rounding
    with np.errstate(invalid="ignore", divide="ignore"):
        kurtosis = np.where(spread, m4 / np.where(spread, m2, 1.0) ** 2, np.nan)
    normal = (kurtosis >= _KURTOSIS_NORMAL_RANGE[0]) & (kurtosis <= _KURTOSIS_NORMAL_RANGE[1])
    factor = np.where(normal, _BOUND_NORMAL, _BOUND_NON_NORMAL)
    bound = np.where(spread, factor * sigma, np.inf)  # no outliers where sigma == 0
    tol = REL_TOL * np.maximum(1.0, np.abs(mean) + bound)
    limit = (bound - np.where(np.isfinite(bound), tol, 0.0))[cell]
    return CellOutliers(n, mean, sigma, kurtosis, normal, spread, factor, is_p=dev >= limit, is_q=-dev >= limit)


def screen_subjects(subject: np.ndarray, n_subjects: int, outliers: CellOutliers, rule: str) -> pd.DataFrame:
    """Step 2, BT.500 Annex 2 §2.3.1 subject rejection, with P/Q/n pooled over all of a subject's ratings.

    ``"bt500"``: flag when ``(P+Q)/n > 0.05`` and ``|P-Q|/(P+Q) < 0.3``; ``"paper"``: when ``(P+Q)/n > 0.05``
    (MIEScore paper, "Subjective Data Processing": "over 5% of their ratings are outliers"). Returns the
    ``subject_stats`` table with a ``flagged`` column (the caller decides ``rejected``).
    """
    n = np.bincount(subject, minlength=n_subjects)
    P = np.bincount(subject, weights=outliers.is_p, minlength=n_subjects).astype(np.int64)
    Q = np.bincount(subject, weights=outliers.is_q, minlength=n_subjects).astype(np.int64)
    ratio = (P + Q) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        asymmetry = np.where(P + Q > 0, np.abs(P - Q) / np.maximum(P + Q, 1), np.nan)
    flagged = ratio > _MAX_OUTLIER_SHARE
    if rule == "bt500":
        # P+Q == 0 gives NaN asymmetry; such a subject cannot pass the first test anyway.
        flagged &= np.nan_to_num(asymmetry, nan=1.0) < _MAX_ASYMMETRY
    return pd.DataFrame({"n": n, "P": P, "Q": Q, "ratio": ratio, "asymmetry": asymmetry, "flagged": flagged})
