"""The MER-Bench report: K-pair group accuracy (2-P / 3-P / 4-P / overall) and Kendall tau, overall and per
category (SpatialReward paper, tables 1-2; the group metrics are in :mod:`.metrics.group_ranking`). Tau comes
twice: ours (a predicted tie scores 0) and as the authors' released script computes it (a tie scores +1).

CIs resample samples (``sample_id``): the groups cut from one original image and instruction move together.
:func:`mer_bench_markdown` lays the result out as those tables (and the aggregation-weight grid of B.1.3 /
figure 10); :mod:`.report` writes it.
"""

from __future__ import annotations

import numpy as np

from ..data.schema import MER_CATEGORY_LABELS
from .instance_bootstrap import BootstrapSettings, InstanceBootstrap, without_ci
from .metrics.group_ranking import (
    TIE_SCORE_AS_RELEASED,
    group_accuracy,
    kendall_tau_groups,
)
from .report_parts import (counts_phrase, fmt_ci, mer_categories_in_order, notes_section, plot_lines, report_header,
                           report_table)

__all__ = ["mer_bench_markdown", "mer_bench_report"]


def mer_bench_report(frame, scores: dict[str, np.ndarray], *,
                     bootstrap: BootstrapSettings | None = None) -> dict:
    """MER-Bench accuracy and Kendall tau (SpatialReward paper, tables 1-2).

    ``frame``: :func:`~.dataset_splits.mer_bench_frame` rows to evaluate; ``scores``: ``{pair_id: (K,) predicted
    scores in the dataset's order, best first}``. A group is correct only if its scores strictly decrease (ties
    and NaN are wrong); ``tau`` is the mean per-group Kendall tau-a with predicted ties scored 0
    (:func:`~.metrics.group_ranking.group_kendall_tau`), ``tau_as_released`` the same with ties scored +1 (the
    authors' script), for comparison with the paper. CIs resample samples (``sample_id``).
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
    out += [f"## Accuracy by group size (paper table 1, MER-Bench columns): {counts}", "",
            _accuracy_table([f"{k}-P" for k in sizes] + ["Overall", "τ", "τ (as released)"],
                            [acc["by_size"][k] for k in sizes] + [acc["overall"], tau["overall"], tau_rel["overall"]],
                            [meta["n_by_size"].get(k, "") for k in sizes] + [meta["n_groups"]] * 3), "",
            "τ scores a predicted tie 0; τ (as released) scores it +1 as the authors' script does, and is the "
            "one to compare with the paper's table 1.", ""]
    out += plot_lines(report, "accuracy_by_size", "Accuracy by group size")

    out += [f"## Accuracy by editing category (paper table 2): {counts}", "",
            _accuracy_table(labels + ["Overall"], [acc["by_category"][c] for c in cats] + [acc["overall"]],
                            [meta["n_by_category"].get(c, "") for c in cats] + [meta["n_groups"]]), ""]
    out += plot_lines(report, "accuracy_by_category", "Accuracy by category")

    out += [f"## Kendall τ by group size and category: {counts}", ""]
    rows = [[name] + [fmt_ci(t["by_size"][k], 3) for k in sizes] + [fmt_ci(t["by_category"].get(c), 3) for c in cats]
            for name, t in (("τ", tau), ("τ (as released)", tau_rel))]
    out += [report_table(["", *[f"{k}-P" for k in sizes], *labels], rows), ""]

    out += [f"## Accuracy by group size and category: {counts}", ""]
    by_size = report["accuracy_by_size_and_category"]
    rows = [[f"{k}-P"] + [fmt_ci(by_size.get(k, {}).get(c), 3, ci=False) for c in cats] for k in sizes]
    out += [report_table(["Size", *labels], rows), ""]
    out += _mer_grid_lines(report)

    defs = meta["definitions"]
    extra = [f"Accuracy: {defs['accuracy']}.", f"τ: {defs['tau']}.", f"τ (as released): {defs['tau_as_released']}.",
             f"Groups with tied predicted scores (counted wrong): {meta['groups_with_tied_scores']}; "
             f"groups with a missing (null) score (counted wrong): {meta['groups_with_missing_scores']}."]
    return "\n".join(out + notes_section(report, extra))


def _accuracy_table(header: list[str], metrics: list, n_groups: list) -> str:
    return report_table(["", *header], [["Accuracy", *(fmt_ci(m, 3) for m in metrics)], ["Groups", *n_groups]])


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
    labelled = [("**Best**" + (f" ({len(best)} cells tie)" if len(best) > 1 else ""), c) for c in best[:5]]
    rows = [[label, fmt(c["alpha"]), fmt(c["w_if"]), fmt(c["w_con"]), f"{c['accuracy']:.3f}",
             *([f"{c['reported_accuracy']:.3f}"] if held_out else [])]
            for label, c in labelled + [(r["label"], r) for r in grid["paper_readings"].values()]]
    header = ["Cell", "α", "w_if", "w_con", "Accuracy (search)" if held_out else "Accuracy",
              *(["Accuracy (reported)"] if held_out else [])]
    out += [report_table(header, rows), ""]
    if len(best) > 5:
        out += [f"{len(best) - 5} more cells reach the best accuracy (see `{grid['file']}`).", ""]
    return out + plot_lines(report, "aggregation_grid", "Accuracy over the aggregation-weight grid")
