"""The MIE-Bench evaluator report: how well does an evaluator agree with human MOS?

SRCC/KRCC/PLCC per dimension (MIEScore paper, table 3), SRCC per task and category (tables 12-15), the
editing-model leaderboard human vs predicted with ranks and "SRCC to human" (table 4), and the MOS
distributions (figure 2). Every metric comes from :mod:`.metrics`; CIs resample instances
(:mod:`.instance_bootstrap`). :mod:`.report` renders the result as Markdown, :mod:`.plots` draws it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.schema import (
    MIE_CATEGORIES,
    MOS_COLUMN_OF,
    SCORE_KEYS,
    TASK_CATEGORY,
    TASKS,
)
from ..data.dataset_splits import ordered_labels
from ..data.errors import BenchmarkInputError
from ..utils.numbers import finite_float
from .instance_bootstrap import BootstrapSettings, InstanceBootstrap
from .metrics.correlation import LogisticFitWarning, correlations, fit_logistic, srcc
from .metrics.model_ranking import model_ranking_srcc

__all__ = ["HIST_EDGES", "mie_bench_report", "mos_distribution"]

HIST_EDGES = np.linspace(0.0, 100.0, 21)  # 5-point MOS bins on the paper's 0-100 scale (figure 2)


def mie_bench_report(frame, dims: Sequence[str] | None = None, *,
                     bootstrap: BootstrapSettings | None = None) -> dict:
    """All numbers of the MIE-Bench evaluator report.

    ``frame``: :func:`~.dataset_splits.mie_bench_frame` rows aligned with predictions in columns ``pred_<dim>``
    (NaN = no prediction; such items are left out of that dimension). ``dims``: the score keys to evaluate
    (default: those with a ``pred_`` column). Returns a JSON-serialisable dict with sections ``meta,
    correlations, per_task, model_ranking, mos_distribution, notes``; every metric is ``{"value", "ci": [low, high]}``.
    """
    dims = [d for d in (dims or SCORE_KEYS) if f"pred_{d}" in frame.columns]
    if not dims:
        raise BenchmarkInputError("no predicted score column to evaluate")
    n = len(frame)
    if n < 3:
        raise BenchmarkInputError(f"need at least 3 edits with predictions to compute correlations, got {n}")
    pred = {d: frame[f"pred_{d}"].to_numpy(dtype=np.float64) for d in dims}
    mos = {d: frame[MOS_COLUMN_OF[d]].to_numpy(dtype=np.float64) for d in dims}
    boot = InstanceBootstrap(frame["instance_id"].to_numpy(), bootstrap)
    corr = _correlation_section(pred, mos, boot)
    per_task = _per_task_section(frame, pred, mos, boot)
    ranking = _model_ranking_section(frame["editing_model"].astype(str).to_numpy(), pred, mos, boot)
    return {
        "benchmark": "mie-bench",
        "meta": {
            "n_items": n,
            "n_instances": int(frame["instance_id"].nunique()),
            "n_editing_models": len(ranking["models"]),
            "n_tasks": len(per_task["tasks"]),
            "dimensions": list(dims),
            "bootstrap": boot.describe("instances, all edits of a drawn instance_id together"),
        },
        "correlations": corr,
        "per_task": per_task,
        "model_ranking": ranking,
        "mos_distribution": mos_distribution(frame, dims),
        "notes": boot.notes,
    }


def _correlation_section(pred: dict, mos: dict, boot: InstanceBootstrap) -> dict:
    """Table 3: SRCC / KRCC / PLCC (raw and after the 4-parameter logistic) per dimension, with the fit.

    When the fit of all items is unusable (failed, or degenerate even bounded: :mod:`.metrics.logistic_fit`),
    ``plcc_logistic`` has no value and ``logistic`` says why: the report gives raw PLCC only.
    """

    def corr_fn(idx):
        with warnings.catch_warnings():  # the fit of all items is reported per dimension below, with its reason
            warnings.simplefilter("ignore", LogisticFitWarning)
            return {d: correlations(pred[d][idx], mos[d][idx], nan_policy="omit") for d in pred}

    corr = boot(corr_fn, "correlations")
    for d in pred:
        ok = np.isfinite(pred[d]) & np.isfinite(mos[d])
        fit = fit_logistic(pred[d][ok], mos[d][ok])
        corr[d]["n"] = int(ok.sum())
        corr[d]["logistic"] = {"params": [finite_float(p) for p in fit.params], "success": fit.success,
                               "status": fit.status, "message": fit.message, "caveat": fit.caveat}
        if not fit.success:  # the resampled values fell back to raw PLCC: no logistic number to report
            corr[d]["plcc_logistic"] = {"value": None, "ci": [None, None]}
    return corr


def _srcc_or_nan(pred: np.ndarray, mos: np.ndarray) -> float:
    try:
        return srcc(pred, mos, nan_policy="omit")
    except ValueError:  # too few items (e.g. a task absent from a resample)
        return math.nan


def _per_task_section(frame, pred: dict, mos: dict, boot: InstanceBootstrap) -> dict:
    """Tables 12-15: SRCC per task and per category, and the items/instances of each task."""
    task_names = ordered_labels(frame["task"], TASKS)
    tcode = frame["task"].map({t: i for i, t in enumerate(task_names)}).to_numpy()
    cat_names = ordered_labels(frame["category"], MIE_CATEGORIES)
    ccode = frame["category"].map({c: i for i, c in enumerate(cat_names)}).to_numpy()

    def srcc_fn(idx):
        return {d: _srcc_or_nan(pred[d][idx], mos[d][idx]) for d in pred}

    # Stratified: each task's (category's) CI resamples that task's own instances, so the number of items in a
    # task does not vary between resamples as it would when resampling all instances at once.
    per_dim: dict[str, dict] = {d: {"tasks": {}, "categories": {}} for d in pred}
    for key, names, codes in (("tasks", task_names, tcode), ("categories", cat_names, ccode)):
        for k, name in enumerate(names):
            res = boot(srcc_fn, f"SRCC {name}", rows=np.flatnonzero(codes == k), record_notes=False)
            for d in pred:
                per_dim[d][key][name] = res[d]
    task_info = []
    for k, name in enumerate(task_names):
        sel = tcode == k
        task_info.append({"task": name, "category": TASK_CATEGORY.get(name, str(frame["category"][sel].iloc[0])),
                          "n_items": int(sel.sum()), "n_instances": int(frame["instance_id"][sel].nunique())})
    return {"tasks": task_info, "categories": cat_names, "srcc": per_dim}


def _model_ranking_section(models: np.ndarray, pred: dict, mos: dict, boot: InstanceBootstrap) -> dict:
    """Table 4: editing-model leaderboard human vs predicted, and "SRCC to human" (needs 3 or more models)."""
    model_names = sorted(set(models))
    ranking: dict[str, Any] = {"available": len(model_names) >= 3, "models": model_names}
    if len(model_names) < 3:
        ranking["reason"] = f"model-ranking SRCC needs at least 3 editing models, the split has {len(model_names)}"
        return ranking
    # integer model codes: np.unique inside the per-model means is several times faster on ints than strings
    mcode = np.searchsorted(np.asarray(model_names), models)

    def rank_fn(idx):
        out = {}
        for d in pred:
            r = model_ranking_srcc(pred[d][idx], mos[d][idx], mcode[idx], nan_policy="omit")
            means = {model_names[row["model"]]: {"human": row["mean_mos"], "pred": row["mean_pred"]}
                     for row in r.table}
            out[d] = {"srcc": r.srcc, "krcc": r.krcc, "means": means}
        return out

    boot_rank = boot(rank_fn, "model ranking")
    for d in pred:
        full = model_ranking_srcc(pred[d], mos[d], models, nan_policy="omit")
        table = []
        for row in full.table:  # sorted by human rank
            means = boot_rank[d]["means"].get(row["model"], {})
            table.append({"model": row["model"], "human": means.get("human"), "pred": means.get("pred"),
                          "rank_human": row["rank_mos"], "rank_pred": row["rank_pred"]})
        ranking[d] = {"srcc": boot_rank[d]["srcc"], "krcc": boot_rank[d]["krcc"], "table": table}
    return ranking


def _describe(values: np.ndarray) -> dict:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"n": 0}
    q = np.quantile(v, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {"n": int(v.size), "mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(q[0]), "q25": float(q[1]), "median": float(q[2]), "q75": float(q[3]), "max": float(q[4])}


def mos_distribution(frame, dims: Sequence[str] = SCORE_KEYS) -> dict:
    """MOS summaries and histograms: all edits, 2 sources, >= 3 sources (MIEScore paper, figure 2)."""
    ns = frame["num_sources"].to_numpy()
    subsets = {"all": np.ones(len(frame), dtype=bool), "2_sources": ns == 2, "3plus_sources": ns >= 3}
    out: dict[str, Any] = {"bin_edges": HIST_EDGES.tolist(), "subsets": {k: int(m.sum()) for k, m in subsets.items()}}
    for d in dims:
        col = MOS_COLUMN_OF[d]
        if col not in frame.columns:
            continue
        vals = frame[col].to_numpy(dtype=np.float64)
        out[d] = {}
        for name, mask in subsets.items():
            sel = vals[mask & np.isfinite(vals)]
            stats = _describe(sel)
            stats["histogram"] = np.histogram(np.clip(sel, 0, 100), bins=HIST_EDGES)[0].astype(int).tolist()
            out[d][name] = stats
    return out
