"""The MER-Bench evaluator report as Markdown (the layout of the SpatialReward paper's tables 1 and 2, and the
aggregation-weight grid of B.1.3 / figure 10), from the dict of :mod:`.mer_bench_report`; :mod:`.report` writes it.
"""

from __future__ import annotations

from ..data.schema import MER_CATEGORY_LABELS
from .report_parts import (counts_phrase, fmt_ci, mer_categories_in_order, notes_section, plot_lines, report_header,
                           report_table)

__all__ = ["mer_bench_markdown"]


def mer_bench_markdown(report: dict) -> str:
    meta = report["meta"]
    acc, tau, tau_rel = report["accuracy"], report["tau"], report["tau_as_released"]
    sizes = sorted(acc["by_size"], key=int)
    cats = mer_categories_in_order(acc.get("by_category", {}))
    labels = [MER_CATEGORY_LABELS.get(c, c) for c in cats]
    intro = (f"K-pair ranking accuracy of the evaluator on {meta['n_groups']} groups from {meta['n_samples']} "
             "samples. ")
    if meta["groups_with_missing_scores"] == meta["n_groups"]:
        intro += ("**Every group has a missing (null) score: there is no prediction to evaluate, so every "
                  "accuracy below is 0 by construction.** ")
    out = report_header(report, "MER-Bench evaluation report", intro, what="pair ids")

    counts = counts_phrase(meta, "groups", "samples")
    out += [f"## Accuracy by group size (paper table 1, MER-Bench columns): {counts}", ""]
    header = [f"{k}-P" for k in sizes] + ["Overall", "τ", "τ (as released)"]
    row = [fmt_ci(acc["by_size"][k], 3) for k in sizes] + [fmt_ci(acc["overall"], 3), fmt_ci(tau["overall"], 3),
                                                            fmt_ci(tau_rel["overall"], 3)]
    nrow = [meta["n_by_size"].get(k, "") for k in sizes] + [meta["n_groups"]] * 3
    out += [report_table(["", *header], [["Accuracy", *row], ["Groups", *nrow]]), "",
            "τ scores a predicted tie 0; τ (as released) scores it +1 as the authors' script does, and is the "
            "one to compare with the paper's table 1.", ""]
    out += plot_lines(report, "accuracy_by_size", "Accuracy by group size")

    out += [f"## Accuracy by editing category (paper table 2): {counts}", ""]
    header = labels + ["Overall"]
    row = [fmt_ci(acc["by_category"][c], 3) for c in cats] + [fmt_ci(acc["overall"], 3)]
    nrow = [meta["n_by_category"].get(c, "") for c in cats] + [meta["n_groups"]]
    out += [report_table(["", *header], [["Accuracy", *row], ["Groups", *nrow]]), ""]
    out += plot_lines(report, "accuracy_by_category", "Accuracy by category")

    out += [f"## Kendall τ by group size and category: {counts}", ""]
    rows = [[name] + [fmt_ci(t["by_size"][k], 3) for k in sizes] + [fmt_ci(t["by_category"].get(c), 3) for c in cats]
            for name, t in (("τ", tau), ("τ (as released)", tau_rel))]
    out += [report_table(["", *[f"{k}-P" for k in sizes], *labels], rows), ""]

    out += [f"## Accuracy by group size and category: {counts}", ""]
    rows = []
    for k in sizes:
        cells = report["accuracy_by_size_and_category"].get(k, {})
        rows.append([f"{k}-P"] + [fmt_ci(cells.get(c), 3, ci=False) for c in cats])
    out += [report_table(["Size", *labels], rows), ""]
    out += _mer_grid_lines(report)

    defs = meta["definitions"]
    extra = [f"Accuracy: {defs['accuracy']}.", f"τ: {defs['tau']}.", f"τ (as released): {defs['tau_as_released']}.",
             f"Groups with tied predicted scores (counted wrong): {meta['groups_with_tied_scores']}; "
             f"groups with a missing (null) score (counted wrong): {meta['groups_with_missing_scores']}."]
    return "\n".join(out + notes_section(report, extra))


def _mer_grid_lines(report: dict) -> list[str]:
    """The aggregation-weight grid search (SpatialReward paper B.1.3 / figure 10), when ``--grid`` ran."""
    grid = report.get("aggregation_grid")
    if not grid:
        return []
    fmt = "{:g}".format
    held_out = grid.get("held_out", False)
    where = (f"searched on the held-out split(s) {', '.join(grid['searched_on'])} ({grid['n_groups']} groups), "
             f"reported on {', '.join(grid['reported_on'])}" if held_out
             else f"computed on the {grid['n_groups']} reported groups")
    out = ["## Aggregation weights: grid search (SpatialReward paper, B.1.3 / figure 10)", "",
           "The reward re-aggregated from the predictions' sub-scores, without running the model: "
           "R = (SC/25)^α · (PQ/25)^(1−α), SC = w_if·s_if + w_con·s_con, "
           f"PQ = {fmt(grid['pq_weights'][0])}·naturalness + {fmt(grid['pq_weights'][1])}·artifacts; accuracy "
           f"(exact order, ties and missing sub-scores wrong) {where}. {grid['n_cells']} cells: "
           f"α ∈ {{{', '.join(map(fmt, grid['alphas']))}}}, w_con ∈ {{{', '.join(map(fmt, grid['w_cons']))}}}, "
           f"w_if = 1 − w_con; every cell is in `{grid['file']}`.", ""]
    if not held_out:
        out += [f"No best cell is picked: {grid.get('best_refused', '')}.", ""]
    best = grid["best"]
    reported = (lambda c: f"{c['reported_accuracy']:.3f}") if held_out else None
    rows = [["**Best**" + (f" ({len(best)} cells tie)" if len(best) > 1 else ""), fmt(c["alpha"]), fmt(c["w_if"]),
             fmt(c["w_con"]), f"{c['accuracy']:.3f}", *([reported(c)] if reported else [])] for c in best[:5]]
    rows += [[r["label"], fmt(r["alpha"]), fmt(r["w_if"]), fmt(r["w_con"]), f"{r['accuracy']:.3f}",
              *([reported(r)] if reported else [])] for r in grid["paper_readings"].values()]
    header = ["Cell", "α", "w_if", "w_con", "Accuracy (search)" if held_out else "Accuracy",
              *(["Accuracy (reported)"] if held_out else [])]
    out += [report_table(header, rows), ""]
    if len(best) > 5:
        out += [f"{len(best) - 5} more cells reach the best accuracy (see `{grid['file']}`).", ""]
    return out + plot_lines(report, "aggregation_grid", "Accuracy over the aggregation-weight grid")
