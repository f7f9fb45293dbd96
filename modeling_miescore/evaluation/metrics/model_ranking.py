"""Model-ranking agreement (MIEScore paper, table 4, row "SRCC to human"): per-model means of predictions and
MOS, and the rank correlation between the two model orders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from scipy import stats

from .coefficients import kendall, spearman
from .inputs import as_float_1d, check_nan_policy, warn_constant

__all__ = ["ModelRanking", "model_ranking_srcc", "per_model_means"]


def per_model_means(values: Any, models: Any, nan_policy: str = "raise") -> tuple[np.ndarray, np.ndarray]:
    """``(sorted unique labels, means)`` of ``values`` (``(n,)`` or ``(n, d)``) per model label; with
    ``nan_policy="omit"`` NaNs are left out of their model's mean (all NaN gives NaN)."""
    check_nan_policy(nan_policy)
    vals = np.asarray(values, dtype=np.float64)
    if vals.ndim not in (1, 2):
        raise ValueError(f"values must be 1-D or 2-D, got shape {vals.shape}")
    labels = np.asarray(models)
    if labels.ndim != 1 or labels.shape[0] != vals.shape[0]:
        raise ValueError(
            f"models must be 1-D with one label per row of values ({vals.shape[0]}), got shape {labels.shape}"
        )
    if vals.shape[0] == 0:
        raise ValueError("values is empty")
    nan = np.isnan(vals)
    if nan.any() and nan_policy == "raise":
        raise ValueError(
            f"values has {int(nan.sum())} NaN value(s); pass nan_policy='omit' to leave them out"
        )
    uniq, inv = np.unique(labels, return_inverse=True)
    v2 = vals.reshape(vals.shape[0], -1)
    ok = ~np.isnan(v2)
    cols = []
    for j in range(v2.shape[1]):
        s = np.bincount(inv, weights=np.where(ok[:, j], v2[:, j], 0.0), minlength=uniq.shape[0])
        c = np.bincount(inv, weights=ok[:, j].astype(np.float64), minlength=uniq.shape[0])
        with np.errstate(invalid="ignore", divide="ignore"):
            cols.append(s / c)
    means = np.stack(cols, axis=1)
    return uniq, (means[:, 0] if vals.ndim == 1 else means)


class ModelRanking(NamedTuple):
    """Result of :func:`model_ranking_srcc`; ``table``: one dict per model by human rank (rank 1 = highest mean,
    equal means share the better rank)."""

    srcc: float
    krcc: float
    table: list[dict[str, Any]]

    def to_dataframe(self):
        """The rank table as a ``pandas.DataFrame`` (pandas imported on call)."""
        import pandas as pd

        return pd.DataFrame(self.table, columns=["model", "mean_pred", "mean_mos", "rank_pred", "rank_mos"])


def _means_from_mapping(mapping: Mapping[Any, Any], name: str) -> dict[Any, float]:
    out = {}
    for key, v in mapping.items():
        arr = np.asarray(v, dtype=np.float64).ravel()
        if arr.size == 0 or np.isnan(arr).all():
            raise ValueError(f"{name}[{key!r}] has no (non-NaN) values")
        out[key] = float(np.nanmean(arr))
    return out


def model_ranking_srcc(pred: Any, mos: Any, models: Any = None, *, nan_policy: str = "raise") -> ModelRanking:
    """Agreement between the model ranking by predicted scores and by human MOS (MIEScore paper, table 4:
    "SRCC to human" = SRCC between the per-model mean prediction and the per-model mean MOS).

    Per item (``pred, mos, models``: equal-length 1-D arrays) or per model (two ``{model: score or item scores}``
    mappings with the same keys); needs at least 3 models.
    """
    if models is None:
        if not isinstance(pred, Mapping) or not isinstance(mos, Mapping):
            raise ValueError("pass models=... with per-item arrays, or two {model: scores} mappings")
        if set(pred) != set(mos):
            missing_p = sorted(map(str, set(mos) - set(pred)))
            missing_m = sorted(map(str, set(pred) - set(mos)))
            raise ValueError(f"model keys differ: missing in pred {missing_p}, missing in mos {missing_m}")
        mp, mm = _means_from_mapping(pred, "pred"), _means_from_mapping(mos, "mos")
        labels = list(pred)
        mean_pred = np.array([mp[k] for k in labels])
        mean_mos = np.array([mm[k] for k in labels])
    else:
        p = as_float_1d(pred, "pred")
        m = as_float_1d(mos, "mos")
        if not (p.shape[0] == m.shape[0] == len(models)):
            raise ValueError(
                f"pred, mos and models differ in length: {p.shape[0]}, {m.shape[0]}, {len(models)}"
            )
        both = np.stack([p, m], axis=1)
        check_nan_policy(nan_policy)
        if nan_policy == "raise" and np.isnan(both).any():
            counts = ", ".join(
                f"{name} has {int(np.isnan(v).sum())} NaN value(s)" for name, v in (("pred", p), ("mos", m))
            )
            raise ValueError(f"{counts}; pass nan_policy='omit' to leave those items out of their model's mean")
        if nan_policy == "omit":
            both[np.isnan(both).any(axis=1)] = np.nan  # pairwise omission
        labels_arr, means = per_model_means(both, models, nan_policy=nan_policy)
        labels = labels_arr.tolist()
        mean_pred, mean_mos = means[:, 0], means[:, 1]
    if len(labels) < 3:
        raise ValueError(f"model-ranking SRCC needs at least 3 models, got {len(labels)}")
    keep = ~(np.isnan(mean_pred) | np.isnan(mean_mos))
    if not keep.all():
        dropped = [labels[i] for i in np.flatnonzero(~keep)]
        raise ValueError(f"models with no usable items: {dropped}")
    rank_pred = stats.rankdata(-mean_pred, method="min").astype(int)
    rank_mos = stats.rankdata(-mean_mos, method="min").astype(int)
    order = np.lexsort((rank_pred, rank_mos))
    table = [
        {
            "model": labels[i],
            "mean_pred": float(mean_pred[i]),
            "mean_mos": float(mean_mos[i]),
            "rank_pred": int(rank_pred[i]),
            "rank_mos": int(rank_mos[i]),
        }
        for i in order
    ]
    warn_constant(mean_pred, mean_mos, ("per-model mean prediction", "per-model mean MOS"))
    return ModelRanking(spearman(mean_pred, mean_mos), kendall(mean_pred, mean_mos), table)
