"""The MIE-Bench evaluator report: how well does an evaluator agree with human MOS?

SRCC/KRCC/PLCC per dimension (MIEScore paper, table 3), SRCC per task and category (tables 12-15), the
editing-model leaderboard human vs predicted with ranks and "SRCC to human" (table 4), and the MOS
distributions (figure 2). Every metric comes from :mod:`.metrics`; CIs resample instances
(:mod:`.instance_bootstrap`). :func:`mie_bench_markdown` lays the result out as those tables (a dimension's
logistic fit: PLCC (logistic), the bounded refit's, or raw PLCC only with the reason); :mod:`.report` writes it,
:mod:`.plots` draws it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.schema import LONG_NAMES, MIE_CATEGORIES, MOS_COLUMN_OF, SCORE_KEYS, SHORT_NAMES, TASK_CATEGORY, TASKS
from ..data.dataset_splits import ordered_labels
from ..data.errors import BenchmarkInputError
from ..hub.miescore_overall import OVERALL_WEIGHTS
from ..utils.numbers import finite_float
from .instance_bootstrap import BootstrapSettings, InstanceBootstrap
from .metrics.correlation import LogisticFitWarning, correlations, fit_logistic, srcc
from .metrics.model_ranking import model_ranking_srcc
from .report_parts import (SOURCE_SUBSETS, ci_state, counts_phrase, fmt_ci, logistic_status, notes_section,
                           plot_lines, report_header, report_table, title_case)

__all__ = ["HIST_EDGES", "mie_bench_markdown", "mie_bench_report", "mos_distribution"]

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


def mie_bench_markdown(report: dict) -> str:
    meta = report["meta"]
    dims = meta["dimensions"]
    out = report_header(report, "MIE-Bench evaluation report",
                  f"How well the evaluator's predicted scores agree with human MOS on {meta['n_items']} edited images "
                  f"({meta['n_instances']} instances, {meta['n_editing_models']} editing models, "
                  f"{meta['n_tasks']} tasks). ")
    out += _mie_correlation_lines(report, dims)
    out += _mie_per_task_lines(report, dims)
    out += _mie_ranking_lines(report, dims)
    out += _mie_distribution_lines(report, dims)
    return "\n".join(out + notes_section(report, _mie_notes(report, dims)))


def _mie_correlation_lines(report: dict, dims: Sequence[str]) -> list[str]:
    """Paper table 3: SRCC / KRCC / PLCC per dimension, and the one-row paper layout."""
    out = [f"## Correlation with human MOS (paper table 3): {counts_phrase(report['meta'], 'items', 'instances')}", ""]
    rows = [[LONG_NAMES[d], c.get("n", ""), fmt_ci(c["srcc"]), fmt_ci(c["krcc"]), fmt_ci(c["plcc"]), _logistic_cell(c)]
            for d, c in ((d, report["correlations"][d]) for d in dims)]
    out += [report_table(["Dimension", "n (edits)", "SRCC", "KRCC", "PLCC", "PLCC (logistic)"], rows), ""]
    header = [f"Method (n = {counts_phrase(report['meta'], 'items')})"] + [f"{SHORT_NAMES[d]} {s}" for d in dims
                                                                    for s in ("ρs", "ρk", "ρp")]
    row = ["This evaluator"] + [fmt_ci(report["correlations"][d][m], ci=False)
                                for d in dims for m in ("srcc", "krcc", "plcc")]
    out += ["Paper layout (one row, paste under the paper's table 3; ρp = PLCC on raw predictions):", "",
            report_table(header, [row]), ""]
    for d in dims:
        out += plot_lines(report, f"scatter_{d}", f"Predicted vs MOS, {LONG_NAMES[d]}")
    return out


def _logistic_cell(c: dict) -> str:
    """PLCC (logistic), or why there is none (a degenerate or failed fit: raw PLCC only)."""
    status = logistic_status(c)
    if status in ("degenerate", "failed"):
        return f"— ({status} fit: see raw PLCC)"
    return fmt_ci(c.get("plcc_logistic")) + (" (bounded fit)" if status == "constrained" else "")


def _mie_per_task_lines(report: dict, dims: Sequence[str]) -> list[str]:
    """Paper tables 12-15: SRCC per task and per category."""
    pt = report["per_task"]
    meta = report["meta"]
    out = [f"## SRCC per task (paper tables 12–15): {counts_phrase(meta, 'tasks', 'items', 'instances')}", ""]
    rows = [[title_case(t["task"]), t["category"], t["n_items"], t.get("n_instances", "")]
            + [fmt_ci(pt["srcc"][d]["tasks"].get(t["task"]), digits=3) for d in dims] for t in pt["tasks"]]
    rows += [[f"**{title_case(c)} (all tasks)**", c, "", ""]
             + [fmt_ci(pt["srcc"][d]["categories"].get(c), digits=3) for d in dims] for c in pt["categories"]]
    minimum = meta.get("bootstrap", {}).get("min_units", 2)
    out += [report_table(["Task", "Category", "Edits", "Instances", *[SHORT_NAMES[d] for d in dims]], rows), "",
            "Per-task and per-category intervals resample the instances of that task (category) only; a task "
            f"with fewer than {minimum} instances has no interval.", ""]
    return out + plot_lines(report, "srcc_per_task", "SRCC per task")


def _mie_ranking_lines(report: dict, dims: Sequence[str]) -> list[str]:
    """Paper table 4: the editing-model leaderboard, human vs predicted, with SRCC/KRCC to human."""
    mr = report["model_ranking"]
    out = ["## Editing-model leaderboard: human vs predicted (paper table 4): "
           f"{counts_phrase(report['meta'], 'editing_models', 'items', 'instances')}", ""]
    if not mr.get("available"):
        return out + [f"Not computed: {mr.get('reason', 'too few editing models')}.", ""]
    order_dim = "overall" if "overall" in dims else dims[-1]
    header = ["Model", *[f"{SHORT_NAMES[d]} {who}" for d in dims for who in ("Human", "Pred")], "Rank Human",
              "Rank Pred"]
    per_dim = {d: {r["model"]: r for r in mr[d]["table"]} for d in dims}
    rows = [[r["model"], *[fmt_ci(per_dim[d][r["model"]][who], 2, ci=False) for d in dims for who in ("human", "pred")],
             r["rank_human"], r["rank_pred"]] for r in mr[order_dim]["table"]]
    rows += [[label, *[c for d in dims for c in ("", fmt_ci(mr[d][key], 3))], "", ""]
             for label, key in (("**SRCC to human ↑**", "srcc"), ("KRCC to human", "krcc"))]
    short = SHORT_NAMES[order_dim]
    out += [report_table(header, rows), "",
            f"Models are sorted by human {short} MOS; ranks are by {short} (1 = best). "
            "SRCC to human = Spearman correlation between the per-model mean prediction and the per-model "
            "mean MOS.",
            ""]
    out += plot_lines(report, "leaderboard", "Editing-model leaderboard, human vs predicted")
    with_cis = ci_state(report)[0] == "on"
    out += [f"<details><summary>Per-model means{' with confidence intervals' if with_cis else ''}</summary>", ""]
    rows = [[r["model"], *[f"{fmt_ci(per_dim[d][r['model']]['human'], 2)} / {fmt_ci(per_dim[d][r['model']]['pred'], 2)}"
                           for d in dims]] for r in mr[order_dim]["table"]]
    header = ["Model", *[f"{SHORT_NAMES[d]} human / pred" for d in dims]]
    return out + [report_table(header, rows), "", "</details>", ""]


def _mie_distribution_lines(report: dict, dims: Sequence[str]) -> list[str]:
    """Paper figure 2 as a table: MOS summary per dimension for all edits, 2 sources, 3 or more sources."""
    dist = report["mos_distribution"]
    out = [f"## MOS distributions (paper figure 2): {counts_phrase(report['meta'], 'items')}", ""]
    rows = [[LONG_NAMES[d], label, *_summary_cells(dist[d].get(key, {}))]
            for d in dims if d in dist for key, label in SOURCE_SUBSETS.items()]
    out += [report_table(["Dimension", "Subset", "n", "Mean", "Std", "Median", "Range"], rows), ""]
    return out + plot_lines(report, "mos_distribution", "MOS distributions")


def _summary_cells(s: dict) -> list:
    if not s.get("n"):
        return [0, "—", "—", "—", "—"]
    return [s["n"], f"{s['mean']:.2f}", f"{s['std']:.2f}", f"{s['median']:.2f}", f"{s['min']:.1f}–{s['max']:.1f}"]


def _mie_notes(report: dict, dims: Sequence[str]) -> list[str]:
    w_vq, w_if, w_ap = OVERALL_WEIGHTS
    extra = [
        "SRCC = Spearman (average ranks for ties), KRCC = Kendall tau-b, PLCC = Pearson on raw predictions; "
        "PLCC (logistic) = Pearson after the monotonic 4-parameter logistic fit (VQEG / pyiqa convention). A fit "
        "that is a step through a few points, leaves the MOS range or lifts PLCC far above |SRCC| is degenerate: "
        "it is refitted with bounded parameters, and when that is degenerate too, only raw PLCC is reported "
        "(a bootstrap resample whose fit is degenerate contributes its raw PLCC).",
        f"Overall MOS = VQ^{w_vq:g} · IF^{w_if:g} · AP^{w_ap:g} (MIEScore paper, eq. 2).",
    ]
    if report.get("overall_computed"):
        extra.append("The predictions had no `overall`; it was computed from the predicted VQ/IF/AP with eq. 2.")
    for d in dims:
        extra += _logistic_note(SHORT_NAMES[d], report["correlations"][d])
    return extra


def _logistic_note(short: str, c: dict) -> list[str]:
    """One dimension's fit: its β, or why PLCC (logistic) comes from a bounded refit or is not reported."""
    lg = c.get("logistic")
    if not lg:
        return []
    status = logistic_status(c)
    params = lg.get("params") or []
    # an unusable fit carries NaN parameters (null in report.json): no β is printed for it
    beta = "β = (" + ", ".join(f"{x:.4g}" for x in params) + ")" if params and None not in params else ""
    if status == "fitted":
        caveat = f" Note: {lg['caveat']}." if lg.get("caveat") else ""
        return [f"Logistic fit, {short}: {beta}.{caveat}"]
    if status == "constrained":
        return [f"Logistic fit, {short}: {lg.get('message')}: {beta}."]
    return [f"Logistic fit, {short}: {status} ({lg.get('message')}); PLCC (logistic) is not reported, read the "
            "raw PLCC."]
