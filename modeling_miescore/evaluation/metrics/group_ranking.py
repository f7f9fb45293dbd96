"""K-pair group metrics (MER-Bench: SpatialReward paper, sec. 4 and tables 1-2): exact-order group accuracy and
per-group Kendall tau; each group lists the predicted scores of its candidates in human order (best first).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from .inputs import as_float_1d

__all__ = ["TIE_SCORE_AS_RELEASED", "group_accuracy", "group_correct", "group_kendall_tau", "kendall_tau_groups"]

# The authors' MER-Bench script sorts the candidates by predicted score with a stable sort, so a predicted tie keeps
# the human order: a tied pair counts as concordant. ``tie_score=TIE_SCORE_AS_RELEASED`` reproduces its tau.
TIE_SCORE_AS_RELEASED = 1.0


def _flatten_groups(groups: Any, sizes: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(flat scores, sizes) from a list of per-group score lists, a 2-D array, or flat scores + sizes."""
    if sizes is not None:
        flat = as_float_1d(groups, "groups (flat scores)")
        sz = np.asarray(sizes)
        if sz.ndim != 1 or not np.issubdtype(sz.dtype, np.integer):
            raise ValueError("sizes must be a 1-D sequence of integers")
        if int(sz.sum()) != flat.shape[0]:
            raise ValueError(f"sizes sum to {int(sz.sum())} but there are {flat.shape[0]} scores")
    elif isinstance(groups, np.ndarray) and groups.ndim == 2:
        flat = groups.astype(np.float64).ravel()
        sz = np.full(groups.shape[0], groups.shape[1], dtype=np.int64)
    else:
        try:
            groups = list(groups)
            sz = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))
            flat = np.fromiter(chain.from_iterable(groups), dtype=np.float64, count=int(sz.sum()))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"groups must be a sequence of score sequences ({exc})") from None
    if sz.shape[0] == 0:
        raise ValueError("no groups given")
    if (sz < 2).any():
        i = int(np.argmax(sz < 2))
        raise ValueError(f"every group needs at least 2 candidates; group {i} has {int(sz[i])}")
    return flat, sz.astype(np.int64)


def _by_size(flat: np.ndarray, sizes: np.ndarray):
    """Yield ``(k, group indices, (m, k) score matrix)`` per group size: ragged groups padded into 2-D blocks."""
    starts = np.cumsum(sizes) - sizes
    for k in np.unique(sizes):
        idx = np.flatnonzero(sizes == k)
        yield int(k), idx, flat[starts[idx, None] + np.arange(k)]


def group_correct(groups: Any, sizes: Any = None) -> np.ndarray:
    """Per group: True if the predicted scores are strictly decreasing along the human order (best first).

    MER-Bench exact match (SpatialReward ``calculate_accuracy.py``): a duplicated or NaN score makes the group
    wrong. ``groups``: per-group score lists, a 2-D array, or flat scores with ``sizes`` (group lengths).
    """
    flat, sz = _flatten_groups(groups, sizes)
    out = np.zeros(sz.shape[0], dtype=bool)
    for _, idx, block in _by_size(flat, sz):
        out[idx] = np.all(block[:, :-1] > block[:, 1:], axis=1)  # NaN compares False
    return out


def group_kendall_tau(groups: Any, sizes: Any = None, *, tie_score: float = 0.0) -> np.ndarray:
    """Per-group Kendall tau-a between the predicted order and the human order; a tied or NaN pair scores
    ``tie_score`` in [-1, 1].

    The reference code scores a tie as concordant (:data:`TIE_SCORE_AS_RELEASED`), so a constant predictor gets
    tau = 1. The default 0 (plain tau-a) gives a constant predictor tau = 0, chance level, and ties never raise tau
    above what the resolved pairs earn; -1 counts ties as discordant (strictest).
    """
    if not -1.0 <= float(tie_score) <= 1.0:
        raise ValueError(f"tie_score must lie in [-1, 1], got {tie_score}")
    flat, sz = _flatten_groups(groups, sizes)
    out = np.empty(sz.shape[0], dtype=np.float64)
    for k, idx, block in _by_size(flat, sz):
        i, j = np.triu_indices(k, 1)
        hi, lo = block[:, i], block[:, j]  # human: candidate i is better than candidate j
        conc = (hi > lo).sum(axis=1)
        disc = (hi < lo).sum(axis=1)
        ties = i.shape[0] - conc - disc
        out[idx] = (conc - disc + float(tie_score) * ties) / i.shape[0]
    return out


def _summarise(values: np.ndarray, sizes: np.ndarray, categories: Any) -> dict[str, Any]:
    res: dict[str, Any] = {"overall": float(values.mean()), "n_groups": int(values.shape[0])}
    ks = np.unique(sizes)
    res["by_size"] = {int(k): float(values[sizes == k].mean()) for k in ks}
    res["n_by_size"] = {int(k): int((sizes == k).sum()) for k in ks}
    if categories is not None:
        cats = np.asarray(categories)
        if cats.ndim != 1 or cats.shape[0] != values.shape[0]:
            raise ValueError(
                f"categories must give one label per group ({values.shape[0]}), got shape {cats.shape}"
            )
        uniq, inv = np.unique(cats, return_inverse=True)
        sums = np.bincount(inv, weights=values.astype(np.float64), minlength=uniq.shape[0])
        counts = np.bincount(inv, minlength=uniq.shape[0])
        # numpy scalars -> Python values; object arrays (e.g. pandas strings) already hold Python objects
        labels = [u.item() if isinstance(u, np.generic) else u for u in uniq]
        res["by_category"] = {u: float(s / c) for u, s, c in zip(labels, sums, counts)}
        res["n_by_category"] = {u: int(c) for u, c in zip(labels, counts)}
    return res


def group_accuracy(groups: Any, sizes: Any = None, categories: Any = None) -> dict[str, Any]:
    """K-pair group accuracy (MER-Bench 2-/3-/4-pair accuracy, SpatialReward paper tables 1-2) of
    :func:`group_correct`, overall, per group size and per category (``categories``: a label per group).

    ``overall`` is the mean over all groups (micro, as the reference ``np.mean``; it equals the macro mean over
    sizes for MER-Bench's 200/200/200 groups).
    """
    flat, sz = _flatten_groups(groups, sizes)
    return _summarise(group_correct(flat, sz).astype(np.float64), sz, categories)


def kendall_tau_groups(
    groups: Any, sizes: Any = None, categories: Any = None, *, tie_score: float = 0.0
) -> dict[str, Any]:
    """Mean per-group Kendall tau (MER-Bench tau column, SpatialReward paper table 1), overall, per group
    size and per category, as :func:`group_accuracy`; ``tie_score``: :func:`group_kendall_tau`.
    """
    flat, sz = _flatten_groups(groups, sizes)
    return _summarise(group_kendall_tau(flat, sz, tie_score=tie_score), sz, categories)
