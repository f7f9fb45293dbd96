"""The MIE-Bench evaluator report as Markdown (the layout of the MIEScore paper's tables 3, 4, 12-15 and figure 2),
from the dict of :mod:`.mie_bench_report`; :mod:`.report` writes it; the parts it shares with the other reports
are in :mod:`.report_parts`. Also how a dimension's logistic fit is reported
(:func:`logistic_status`: PLCC (logistic), the bounded refit's, or raw PLCC only with the reason).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..data.schema import LONG_NAMES, SHORT_NAMES
from ..hub.miescore_overall import OVERALL_WEIGHTS
from .report_parts import (SOURCE_SUBSETS, ci_state, counts_phrase, fmt_ci, notes_section, plot_lines,
                           report_header, report_table, title_case)

__all__ = ["logistic_status", "mie_bench_markdown"]


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
    rows = []
    for d in dims:
        c = report["correlations"][d]
        rows.append([LONG_NAMES[d], c.get("n", ""), fmt_ci(c["srcc"]), fmt_ci(c["krcc"]), fmt_ci(c["plcc"]),
                     _logistic_cell(c)])
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


def logistic_status(c: dict) -> str:
    """The logistic fit's status of one dimension's correlations (``metrics.logistic_fit.FIT_STATUSES``)."""
    lg = c.get("logistic") or {}
    return lg.get("status") or ("fitted" if lg.get("success", True) else "failed")


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
    rows = []
    for t in pt["tasks"]:
        rows.append([title_case(t["task"]), t["category"], t["n_items"], t.get("n_instances", "")]
                    + [fmt_ci(pt["srcc"][d]["tasks"].get(t["task"]), digits=3) for d in dims])
    for c in pt["categories"]:
        rows.append([f"**{title_case(c)} (all tasks)**", c, "", ""]
                    + [fmt_ci(pt["srcc"][d]["categories"].get(c), digits=3) for d in dims])
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
    header = ["Model"]
    for d in dims:
        header += [f"{SHORT_NAMES[d]} Human", f"{SHORT_NAMES[d]} Pred"]
    header += ["Rank Human", "Rank Pred"]
    rows = []
    per_dim = {d: {r["model"]: r for r in mr[d]["table"]} for d in dims}
    for r in mr[order_dim]["table"]:
        m = r["model"]
        cells = [m]
        for d in dims:
            e = per_dim[d][m]
            cells += [fmt_ci(e["human"], 2, ci=False), fmt_ci(e["pred"], 2, ci=False)]
        cells += [r["rank_human"], r["rank_pred"]]
        rows.append(cells)
    srow, krow = ["**SRCC to human ↑**"], ["KRCC to human"]
    for d in dims:
        srow += ["", fmt_ci(mr[d]["srcc"], 3)]
        krow += ["", fmt_ci(mr[d]["krcc"], 3)]
    rows += [srow + ["", ""], krow + ["", ""]]
    short = SHORT_NAMES[order_dim]
    out += [report_table(header, rows), "",
            f"Models are sorted by human {short} MOS; ranks are by {short} (1 = best). "
            "SRCC to human = Spearman correlation between the per-model mean prediction and the per-model "
            "mean MOS.",
            ""]
    out += plot_lines(report, "leaderboard", "Editing-model leaderboard, human vs predicted")
    with_cis = ci_state(report)[0] == "on"
    out += [f"<details><summary>Per-model means{' with confidence intervals' if with_cis else ''}</summary>", ""]
    rows = []
    for r in mr[order_dim]["table"]:
        m = r["model"]
        rows.append([m] + [f"{fmt_ci(per_dim[d][m]['human'], 2)} / {fmt_ci(per_dim[d][m]['pred'], 2)}"
                           for d in dims])
    header = ["Model", *[f"{SHORT_NAMES[d]} human / pred" for d in dims]]
    return out + [report_table(header, rows), "", "</details>", ""]


def _mie_distribution_lines(report: dict, dims: Sequence[str]) -> list[str]:
    """Paper figure 2 as a table: MOS summary per dimension for all edits, 2 sources, 3 or more sources."""
    dist = report["mos_distribution"]
    out = [f"## MOS distributions (paper figure 2): {counts_phrase(report['meta'], 'items')}", ""]
    rows = []
    for d in dims:
        if d not in dist:
            continue
        for key, label in SOURCE_SUBSETS.items():
            s = dist[d].get(key, {})
            if not s.get("n"):
                rows.append([LONG_NAMES[d], label, 0, "—", "—", "—", "—"])
                continue
            rows.append([LONG_NAMES[d], label, s["n"], f"{s['mean']:.2f}", f"{s['std']:.2f}", f"{s['median']:.2f}",
                         f"{s['min']:.1f}–{s['max']:.1f}"])
    out += [report_table(["Dimension", "Subset", "n", "Mean", "Std", "Median", "Range"], rows), ""]
    return out + plot_lines(report, "mos_distribution", "MOS distributions")


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
