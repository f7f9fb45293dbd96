"""The attention-collapse metrics of the SpatialReward paper (arXiv 2602.07458, sec. 5.4 / Table 5, appendix C.1).

Pure numpy. Every function takes attention maps as arrays of any 2-D shape (the paper uses 24 x 24); a map is
normalised to sum 1 before use (C.1: "normalized such that sum A_ij = 1"), so raw non-negative weights are fine.

* :func:`entropy` - Shannon entropy ``H(A) = -sum A_ij log A_ij`` in nats (natural log: the paper's values, e.g.
  ``H_src`` = 5.71, lie below ``log(576)`` = 6.36, the entropy of a uniform 24 x 24 map); ``0 log 0 = 0``.
* :func:`entropy_gap` - Balance, ``|H(A_src) - H(A_edit)|``.
* :func:`concentration_index` - the mass of the top 10 % of the cells, ``ceil(0.1 * cells)`` of them (58 of
  576), so a uniform map gives 58/576 and a one-hot map gives 1.
* :func:`inter_sample_stability` - the mean Pearson correlation between the flattened source maps of distinct
  samples (``E_{i != j}``). A constant map has no Pearson correlation; pairs with one are left out
  (:func:`pairwise_correlations` gives NaN for them).
* :func:`source_map` - ``A_src`` for an edit with several sources. The paper's edits have one source; here
  ``A_src`` is the mean of the per-source maps (each normalised first, so every source weighs the same),
  which is the source map itself for one source.
* :func:`sample_metrics` / :func:`summarize` - the per-sample values and the ``{"mean", "std"}`` summaries of
  Table 5 (std is numpy's population std, ``ddof=0``; the paper does not say which).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["TOP_FRACTION", "concentration_index", "entropy", "entropy_gap", "inter_sample_stability",
           "normalize_map", "pairwise_correlations", "sample_metrics", "source_map", "stability_per_sample",
           "stability_summary", "summarize"]

TOP_FRACTION = 0.1  # C.1: "the cumulative probability mass of the top 10% tokens"


def normalize_map(attention_map) -> np.ndarray:
    """``attention_map`` as a float64 array summing to 1; ValueError for negative, non-finite or all-zero maps."""
    array = np.asarray(attention_map, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"an attention map must be 2-D (rows x columns), got shape {array.shape}")
    if array.size == 0 or not np.isfinite(array).all():
        raise ValueError("an attention map must be non-empty and finite")
    if (array < 0).any():
        raise ValueError(f"an attention map must be non-negative (minimum {array.min():.3g})")
    total = array.sum()
    if total <= 0:
        raise ValueError("an attention map must have positive mass (all cells are zero)")
    return array / total


def entropy(attention_map) -> float:
    """Shannon entropy in nats of the normalised map (C.1); 0 for a one-hot map, ``log(cells)`` for a uniform one."""
    p = normalize_map(attention_map).ravel()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def entropy_gap(source, edited) -> float:
    """Balance ``|H(A_src) - H(A_edit)|`` (C.1)."""
    return abs(entropy(source) - entropy(edited))


def concentration_index(attention_map, top_fraction: float = TOP_FRACTION) -> float:
    """Mass of the ``ceil(top_fraction * cells)`` largest cells of the normalised map (C.1 "Conc.")."""
    if not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction must lie in (0, 1], got {top_fraction}")
    p = np.sort(normalize_map(attention_map).ravel())[::-1]
    top = max(1, math.ceil(top_fraction * p.size - 1e-9))  # 1e-9: 0.1 * 570 must stay 57, not 58
    return float(p[:top].sum())


def source_map(source_maps: Sequence) -> np.ndarray:
    """``A_src``: the mean of the normalised per-source maps (the map itself for one source); sums to 1."""
    if len(source_maps) == 0:
        raise ValueError("an edit needs at least one source map")
    maps = [normalize_map(m) for m in source_maps]
    if len({m.shape for m in maps}) > 1:
        raise ValueError(f"source maps must share one shape, got {sorted({m.shape for m in maps})}")
    return np.mean(maps, axis=0)


def _flatten(maps: Sequence) -> np.ndarray:
    arrays = [np.asarray(m, dtype=np.float64) for m in maps]
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"maps must share one shape, got {sorted({a.shape for a in arrays})}")
    return np.stack([a.ravel() for a in arrays]) if arrays else np.zeros((0, 0))


def pairwise_correlations(maps: Sequence) -> np.ndarray:
    """``(n, n)`` Pearson correlations of the flattened maps; NaN on the diagonal and for constant maps."""
    flat = _flatten(maps)
    centred = flat - flat.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centred, axis=1)
    constant = norms <= 1e-9 * np.linalg.norm(flat, axis=1)  # rounding leaves ~1e-18 for a uniform map
    safe = np.where(constant, 1.0, norms)
    corr = np.clip((centred @ centred.T) / np.outer(safe, safe), -1.0, 1.0)
    corr[constant, :] = np.nan
    corr[:, constant] = np.nan
    np.fill_diagonal(corr, np.nan)
    return corr


def stability_per_sample(maps: Sequence) -> np.ndarray:
    """For each map, its mean correlation with every other sample's map (NaN when it has none)."""
    corr = pairwise_correlations(maps)
    with np.errstate(invalid="ignore"):
        valid = ~np.isnan(corr)
        counts = valid.sum(axis=1)
        sums = np.where(valid, corr, 0.0).sum(axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def inter_sample_stability(maps: Sequence) -> float:
    """Stability (C.1): the mean Pearson correlation over distinct pairs of maps; NaN with fewer than 2 usable maps."""
    values = _pair_values(pairwise_correlations(maps))
    return float(values.mean()) if values.size else float("nan")


def _pair_values(corr: np.ndarray) -> np.ndarray:
    upper = corr[np.triu_indices(corr.shape[0], k=1)] if corr.size else np.zeros(0)
    return upper[~np.isnan(upper)]


def sample_metrics(source_maps: Sequence, edited_map) -> dict:
    """The per-edit values: ``entropy_gap``, ``source_entropy``, ``edited_entropy``, ``concentration`` (of
    ``A_src``: C.1 groups it with source awareness) and ``edited_concentration``."""
    src = source_map(source_maps)
    h_src, h_edit = entropy(src), entropy(edited_map)
    return {"entropy_gap": abs(h_src - h_edit), "source_entropy": h_src, "edited_entropy": h_edit,
            "concentration": concentration_index(src), "edited_concentration": concentration_index(edited_map)}


def summarize(values: Iterable[float]) -> dict:
    """``{"mean", "std", "n"}`` over the finite values (None for mean / std when there are none)."""
    array = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if array.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(array.mean()), "std": float(array.std()), "n": int(array.size)}


def stability_summary(maps: Sequence) -> dict:
    """Stability as ``{"mean", "std", "n"}`` over the distinct pairs (Table 5 "Corr." with its spread)."""
    values = _pair_values(pairwise_correlations(maps))
    return summarize(values.tolist())
