"""The editing-model leaderboard as Markdown (the layout of the MIEScore paper's tables 8-11: the evaluator's mean
predicted score per editing model, task and category), from the dict of :mod:`.editing_models_report`;
:mod:`.report` writes it."""

from __future__ import annotations

from ..data.schema import LONG_NAMES, SHORT_NAMES
from .report_parts import counts_phrase, fmt_ci, notes_section, plot_lines, report_header, report_table, title_case

__all__ = ["editing_models_markdown"]


def editing_models_markdown(report: dict) -> str:
    meta = report["meta"]
    dims = meta["dimensions"]
    lb = report["leaderboard"]
    order_dim = "overall" if "overall" in dims else dims[-1]
    out = report_header(report, "Editing-model leaderboard (predicted scores)",
                  f"{meta['n_editing_models']} editing models ranked by the evaluator's mean predicted score over "
                  f"{meta['n_items']} edits ({meta['n_instances']} instances, {len(meta['tasks'])} tasks). ")

    counts = counts_phrase(meta, "editing_models", "items", "instances", "tasks")
    out += [f"## Leaderboard: {counts}", ""]
    by_dim = {d: {r["model"]: r for r in lb[d]} for d in dims}
    rows = []
    for r in lb[order_dim]:
        rows.append([r["rank"], r["model"], r["n_items"]] + [fmt_ci(by_dim[d][r["model"]]["all"], 2) for d in dims])
    out += [report_table(["Rank", "Model", "n (edits)", *[SHORT_NAMES[d] for d in dims]], rows,
                   "rl" + "r" * (len(dims) + 1)), ""]
    out += [f"Ranked by mean predicted {SHORT_NAMES[order_dim]}.", ""]
    out += plot_lines(report, "editing_models", "Mean predicted score per editing model")

    cats = meta["categories"]
    tcat = meta["task_category"]
    for d in dims:
        out += [f"## {LONG_NAMES[d]} per task (paper tables 8–11 layout): {counts}", ""]
        for cgroup in ([c for c in cats if c == "regional"], [c for c in cats if c != "regional"]):
            tasks = [t for t in meta["tasks"] if tcat.get(t) in cgroup]
            if not tasks:
                continue
            label = " + ".join(title_case(c) for c in cgroup)
            rows = [[r["model"]] + [fmt_ci(r["tasks"][t], 2, ci=False) for t in tasks] for r in lb[d]]
            out += [f"**{label} editing**", "", report_table(["Model/Task", *[title_case(t) for t in tasks]], rows), ""]
        rows = [[r["model"]] + [fmt_ci(r["categories"][c], 2) for c in cats] + [fmt_ci(r["all"], 2)] for r in lb[d]]
        out += ["**By category**", "", report_table(["Model", *[title_case(c) for c in cats], "All"], rows), ""]
        out += plot_lines(report, f"heatmap_{d}", f"Mean predicted {SHORT_NAMES[d]} per model and task")

    extra = ["Scores are the evaluator's predictions on the 0–100 MOS scale, not human ratings; a model's score is "
             "the mean over its edits (per task: over its edits of that task)."]
    return "\n".join(out + notes_section(report, extra))
