"""The MER-Bench report: K-pair group accuracy (2-P / 3-P / 4-P / overall) and Kendall tau, overall and per
category (SpatialReward paper, tables 1-2; the group metrics are in :mod:`.metrics.group_ranking`). Tau comes
twice: ours (a predicted tie scores 0) and as the authors' released script computes it (a tie scores +1).

CIs resample samples (``sample_id``): the groups cut from one original image and instruction move together.
"""

from __future__ import annotations

import numpy as np

from .instance_bootstrap import BootstrapSettings, InstanceBootstrap, without_ci
from .metrics.group_ranking import (
    TIE_SCORE_AS_RELEASED,
    group_accuracy,
    kendall_tau_groups,
)

__all__ = ["mer_bench_report"]


def mer_bench_report(frame, scores: dict[str, np.ndarray], *,
                     bootstrap: BootstrapSettings | None = None) -> dict:
    """MER-Bench accuracy and Kendall tau (SpatialReward paper, tables 1-2).

    ``frame``: :func:`~.dataset_splits.mer_bench_frame` rows to evaluate; ``scores``: ``{pair_id: (K,) predicted
    scores in the dataset's order, best first}``. A group is correct only if its scores strictly decrease (ties
    and NaN are wrong); ``tau`` is the mean per-group Kendall tau-a with predicted ties scored 0
    (:func:`~.metrics.group_ranking.group_kendall_tau`), ``tau_as_released`` the same with ties scored +1 (the
    authors' script), for comparison with the paper. CIs resample samples (``sample_id``): the groups cut from one
    original image and instruction move together.
    """
    groups = [scores[p] for p in frame["pair_id"]]
    sizes = frame["k"].to_numpy(dtype=np.int64)
    # fixed-width unicode, not object dtype: metrics' per-category summary calls .item() on the labels
    cats = np.asarray(frame["category"].astype(str).tolist(), dtype=str)
    boot = InstanceBootstrap(frame["sample_id"].to_numpy(), bootstrap, unit="samples")
    res = boot(lambda idx: _accuracy_and_tau([groups[i] for i in idx], cats[idx]), "MER-Bench")
    _drop_thin_cis(res, boot, sizes, cats)
    full_acc = group_accuracy(groups, categories=cats)
    # size x category accuracy (no CI: cells hold few groups)
    matrix = {}
    for k in sorted(set(sizes.tolist())):
        sel = sizes == k
        a = group_accuracy([groups[i] for i in np.flatnonzero(sel)], categories=cats[sel])
        matrix[str(k)] = a["by_category"]
    flat = np.concatenate(groups) if groups else np.array([])
    n_ties = int(sum(np.unique(g[np.isfinite(g)]).size < np.isfinite(g).sum() for g in groups))
    n_nan = int(sum(bool(np.isnan(g).any()) for g in groups))
    return {
        "benchmark": "mer-bench",
        "meta": {
            "n_groups": len(groups),
            "n_samples": int(frame["sample_id"].nunique()),
            "n_by_size": {str(k): v for k, v in full_acc["n_by_size"].items()},
            "n_by_category": full_acc["n_by_category"],
            "splits": sorted(set(frame["split"])),
            "n_scores": int(flat.size),
            "groups_with_tied_scores": n_ties,
            "groups_with_missing_scores": n_nan,
            "bootstrap": boot.describe("samples, all groups of a drawn sample_id together"),
            "definitions": dict(_DEFINITIONS),
        },
        "accuracy": res["accuracy"],
        "tau": res["tau"],
        "tau_as_released": res["tau_as_released"],
        "accuracy_by_size_and_category": matrix,
        "notes": boot.notes,
    }


_DEFINITIONS = {
    "accuracy": "a group is correct only if the predicted scores strictly decrease in the human order "
                "(equal or missing scores are wrong); overall = mean over all groups",
    "tau": "mean per-group Kendall tau-a; a predicted tie (or a missing score) scores 0, so a constant "
           "predictor gets 0",
    "tau_as_released": "the same with a predicted tie (or a missing score) scored +1, as the authors' released "
                       "script does (its stable sort keeps tied candidates in human order); compare this one with "
                       "the paper's table 1",
}


def _drop_thin_cis(res: dict, boot: InstanceBootstrap, sizes: np.ndarray, cats: np.ndarray) -> None:
    """Remove the intervals of the sizes and categories whose groups come from too few samples to resample."""
    for name in res:
        for key, labels in (("by_size", sizes.astype(str)), ("by_category", cats)):
            for label, metric in res[name][key].items():
                if boot.too_few(np.flatnonzero(labels == str(label))):
                    res[name][key][label] = without_ci(metric)


def _accuracy_and_tau(groups: list[np.ndarray], cats: np.ndarray) -> dict:
    """Group accuracy and mean Kendall tau (ties 0, and as released): overall, by group size (keys as strings)
    and by category."""
    summaries = {"accuracy": group_accuracy(groups, categories=cats),
                 "tau": kendall_tau_groups(groups, categories=cats),
                 "tau_as_released": kendall_tau_groups(groups, categories=cats, tie_score=TIE_SCORE_AS_RELEASED)}
    return {name: {"overall": s["overall"], "by_size": {str(k): v for k, v in s["by_size"].items()},
                   "by_category": s["by_category"]} for name, s in summaries.items()}
