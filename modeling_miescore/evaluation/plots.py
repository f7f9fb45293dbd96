"""PNG plots of the MIE-Bench, MER-Bench and editing-model reports, drawn with the figure parts of
:mod:`.report_parts` (matplotlib's Agg canvas, never ``pyplot``; the reading rules every plot keeps are there).
Every function returns ``{plot name: path relative to out_dir}``; files go to ``out_dir/plots/`` (the aggregation
grid: ``out_dir/grid.png``) and are written atomically.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..data.schema import LONG_NAMES, MER_CATEGORY_LABELS, MOS_COLUMN_OF, SHORT_NAMES
from .report_parts import (CATEGORY_COLOURS, ci_state, error_bar_note, error_bars, fmt_ci, has_ci, legend_below,
                           logistic_status, mer_categories_in_order, new_figure, plot_value, save_figure, title_case,
                           y_floor)

__all__ = ["aggregation_grid_plot", "editing_models_plots", "mer_bench_plots", "mie_bench_plots", "scatter_plots",
           "srcc_per_task_plot"]



def _bars(ax, x, series, capsize: int) -> None:
    """Bars side by side at each ``x``, one per ``(label, metrics, colour)`` of ``series``, with their CIs."""
    width = 0.8 / len(series)
    for j, (label, ms, colour) in enumerate(series):
        ax.bar(x - 0.4 + width * (j + 0.5), [plot_value(m) for m in ms], width, yerr=error_bars(ms), capsize=capsize,
               label=label, color=colour)


def _cell_values(ax, mat: np.ndarray, lo: float, hi: float, fmt: str) -> None:
    """Each finite cell's value written on a heat map of at most 400 cells (dark text on viridis' bright end)."""
    for (i, j), v in np.ndenumerate(mat if mat.size <= 400 else []):
        if np.isfinite(v):
            ax.text(j, i, format(v, fmt), ha="center", va="center", fontsize=6,
                    color="black" if v - lo > 0.6 * (hi - lo) else "white")


# ---------------------------------------------------------------------------------------------------------
# MIE-Bench
# ---------------------------------------------------------------------------------------------------------


def mie_bench_plots(frame, report: dict, out_dir) -> dict[str, str]:
    """Scatter (pred vs MOS + logistic curve) per dimension, SRCC per task, leaderboard, MOS distributions.

    ``frame``: the evaluated rows with ``mos_<d>`` and ``pred_<d>`` columns (as given to ``mie_bench_report``).
    """
    out = Path(out_dir)
    dims = report["meta"]["dimensions"]
    paths = scatter_plots(frame, report, dims, out)
    paths["srcc_per_task"] = srcc_per_task_plot(report, dims, out)
    if report["model_ranking"].get("available"):
        paths["leaderboard"] = _leaderboard_plot(report, dims, out)
    paths["mos_distribution"] = _mos_distribution_plot(report, dims, out)
    return paths


def scatter_plots(frame, report: dict, dims: list[str], out: Path) -> dict[str, str]:
    """Predicted vs MOS per dimension, coloured by category, with the report's 4-parameter logistic fit.

    The title and the legend say which PLCC the plot shows: after the fit, after the bounded refit, or raw PLCC
    when the fit is degenerate or failed (then no curve is drawn, and the axes say why).
    """
    from .metrics.logistic_fit import logistic4  # deferred: loads scipy

    paths: dict[str, str] = {}
    cats = frame["category"].astype(str).to_numpy()
    for d in dims:
        pred = frame[f"pred_{d}"].to_numpy(dtype=float)
        mos = frame[MOS_COLUMN_OF[d]].to_numpy(dtype=float)
        ok = np.isfinite(pred) & np.isfinite(mos)
        fig = new_figure(5.2, 4.6)
        ax = fig.add_subplot()
        small = ok.sum() < 2000
        for c in dict.fromkeys(cats[ok]):
            sel = ok & (cats == c)
            ax.scatter(pred[sel], mos[sel], s=12 if small else 4, alpha=0.7 if small else 0.35,
                       color=CATEGORY_COLOURS.get(c), label=title_case(c), rasterized=True, linewidths=0)
        c = report["correlations"][d]
        status = logistic_status(c)
        params = (c.get("logistic") or {}).get("params") or [None]
        if status in ("fitted", "constrained") and ok.any() and None not in params:
            xs = np.linspace(pred[ok].min(), pred[ok].max(), 200)
            label = "4-parameter logistic fit" if status == "fitted" else \
                "bounded 4-parameter logistic fit (the least-squares fit was degenerate)"
            ax.plot(xs, logistic4(xs, *params), color="black", lw=1.6, label=label)
            second = f"PLCC (logistic{', bounded fit' if status == 'constrained' else ''}) " \
                     f"{fmt_ci(c.get('plcc_logistic'), 3)}"
        else:
            ax.text(0.02, 0.98, f"no logistic curve: the fit is {status}\n(raw PLCC shown)", transform=ax.transAxes,
                    ha="left", va="top", fontsize=7, color="dimgray")
            second = f"PLCC (raw; logistic fit {status}) {fmt_ci(c['plcc'], 3)}"
        ax.set_title(f"{LONG_NAMES[d]}: SRCC {fmt_ci(c['srcc'], 3)}\n{second}", fontsize=9)
        ax.set_xlabel(f"predicted {SHORT_NAMES[d]}")
        ax.set_ylabel(f"MOS {SHORT_NAMES[d]}")
        ax.grid(alpha=0.3)
        legend_below(fig, ncol=2)  # inside the axes it would hide points
        paths[f"scatter_{d}"] = save_figure(fig, out, f"scatter_{d}")
    return paths


def srcc_per_task_plot(report: dict, dims: list[str], out: Path) -> str:
    """SRCC with MOS per task (bars coloured by category, CIs as error bars), one panel per dimension.

    A task with too few instances to resample has no CI: its bar is hatched (no error bar); an undefined SRCC is
    marked "n/a".
    """
    from matplotlib.patches import Patch

    pt = report["per_task"]
    tasks = [t["task"] for t in pt["tasks"]]
    tcats = [t["category"] for t in pt["tasks"]]
    colours = [CATEGORY_COLOURS.get(c, "grey") for c in tcats]
    fig = new_figure(max(7.0, 0.55 * len(tasks) + 2), 2.6 * len(dims) + 1.0)
    axes = fig.subplots(len(dims), 1, squeeze=False)[:, 0]
    x = np.arange(len(tasks))
    state, boot = ci_state(report)
    any_without_ci = False
    for ax, d in zip(axes, dims):
        ms = [pt["srcc"][d]["tasks"].get(t) for t in tasks]
        vals = np.array([plot_value(m) for m in ms])
        bars = ax.bar(x, np.nan_to_num(vals), color=colours, yerr=error_bars(ms), capsize=2, error_kw={"lw": 0.8})
        for bar, v, m in zip(bars, vals, ms):
            if state == "on" and np.isfinite(v) and not has_ci(m):
                bar.set_hatch("///")
                bar.set_alpha(0.6)
                any_without_ci = True
        for i in np.flatnonzero(~np.isfinite(vals)):
            ax.text(i, 0.02, "n/a", ha="center", va="bottom", fontsize=7, color="dimgray")
        ax.set_ylabel(f"SRCC {SHORT_NAMES[d]}")
        ax.set_ylim(y_floor(ms), 1.05)
        ax.axhline(0, color="black", lw=0.6)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xticks(x)
        ax.set_xticklabels([title_case(t) for t in tasks] if ax is axes[-1] else [], rotation=45, ha="right",
                           fontsize=7)
    handles = [Patch(color=CATEGORY_COLOURS.get(c, "grey"), label=title_case(c)) for c in dict.fromkeys(tcats)]
    if any_without_ci:
        few = f"fewer than {boot['min_units']} instances" if boot.get("min_units") else "one instance"
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label=f"{few}: no CI"))
    legend_below(fig, handles, ncol=len(handles))
    fig.suptitle(f"SRCC with human MOS per task ({error_bar_note(report)} over the task's instances)", fontsize=9)
    return save_figure(fig, out, "srcc_per_task")


def _leaderboard_plot(report: dict, dims: list[str], out: Path) -> str:
    """Per-model mean human MOS vs mean prediction, one panel per dimension (paper table 4)."""
    mr = report["model_ranking"]
    order_dim = "overall" if "overall" in dims else dims[-1]
    models = [r["model"] for r in mr[order_dim]["table"]]
    fig = new_figure(max(7.0, 0.6 * len(models) + 2), 2.6 * len(dims) + 1.0)
    axes = fig.subplots(len(dims), 1, squeeze=False)[:, 0]
    for ax, d in zip(axes, dims):
        rows = {r["model"]: r for r in mr[d]["table"]}
        _bars(ax, np.arange(len(models)), [("Human MOS", [rows[m]["human"] for m in models], "#8C8C8C"),
                                           ("Predicted", [rows[m]["pred"] for m in models], "#4C72B0")], 2)
        ax.set_ylabel(SHORT_NAMES[d])
        ax.set_title(f"{LONG_NAMES[d]}: SRCC to human {fmt_ci(mr[d]['srcc'], 3)}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xticks(np.arange(len(models)))
        ax.set_xticklabels(models if ax is axes[-1] else [], rotation=30, ha="right", fontsize=7)
    legend_below(fig, axes[0].get_legend_handles_labels()[0], ncol=2)  # one entry per series, not per panel
    fig.suptitle(f"Editing models sorted by human {SHORT_NAMES[order_dim]} MOS ({error_bar_note(report)})", fontsize=9)
    return save_figure(fig, out, "leaderboard")


def _mos_distribution_plot(report: dict, dims: list[str], out: Path) -> str:
    """MOS histograms per dimension: all edits, 2 sources, 3 or more sources (paper figure 2)."""
    from matplotlib.ticker import MaxNLocator

    dist = report["mos_distribution"]
    edges = np.asarray(dist["bin_edges"])
    subsets = [("all", "(a) All"), ("2_sources", "(b) Two sources"), ("3plus_sources", "(c) Three or more sources")]
    ddims = [d for d in dims if d in dist]
    fig = new_figure(10.0, 2.0 * len(ddims) + 0.6)
    axes = fig.subplots(len(ddims), 3, squeeze=False)
    for i, d in enumerate(ddims):
        for j, (key, label) in enumerate(subsets):
            ax = axes[i, j]
            s = dist[d].get(key, {})
            counts = np.asarray(s.get("histogram", np.zeros(len(edges) - 1)))
            ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="#4C72B0", edgecolor="white", lw=0.5)
            if i == 0:
                ax.set_title(f"{label} (n={dist['subsets'].get(key, 0)})", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{SHORT_NAMES[d]} count")
            if i == len(ddims) - 1:
                ax.set_xlabel("MOS")
            ax.set_xlim(0, 100)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 0.5 ticks
    return save_figure(fig, out, "mos_distribution")


# ---------------------------------------------------------------------------------------------------------
# MER-Bench
# ---------------------------------------------------------------------------------------------------------


def mer_bench_plots(report: dict, out_dir) -> dict[str, str]:
    """Accuracy and both taus per group size, accuracy per category; bootstrap CIs as error bars."""
    out = Path(out_dir)
    return {"accuracy_by_size": _accuracy_by_size_plot(report, out),
            "accuracy_by_category": _accuracy_by_category_plot(report, out)}


def _accuracy_by_size_plot(report: dict, out: Path) -> str:
    """Accuracy, tau (ties 0) and tau as released per group size and overall, with the chance accuracy 1/K!."""
    from math import factorial

    acc, meta = report["accuracy"], report["meta"]
    sizes = sorted(acc["by_size"], key=int)
    named = (("Accuracy", acc, "#4C72B0"), ("Kendall τ (tie = 0)", report["tau"], "#DD8452"),
             ("Kendall τ as released (tie = +1)", report.get("tau_as_released"), "#F2C49B"))
    series = [(label, [metric["by_size"][k] for k in sizes] + [metric["overall"]], colour)
              for label, metric, colour in named if metric is not None]
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(sizes) + 1)
    _bars(ax, x, series, 3)
    width = 0.8 / len(series)
    for i, size in enumerate(sizes):  # exact-order accuracy of a random ranking: 1 / K!
        ax.hlines(1.0 / factorial(int(size)), i - 0.4, i - 0.4 + width, colors="#C44E52", linestyles="--", lw=2,
                  label="chance accuracy 1/K!" if i == 0 else None)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{k}-P\n(n={meta['n_by_size'].get(k, '?')})" for k in sizes]
                       + [f"Overall\n(n={meta['n_groups']})"])
    ax.set_ylim(y_floor([m for _, ms, _ in series for m in ms]), 1.05)
    ax.axhline(0, color="black", lw=0.6)
    ax.grid(axis="y", alpha=0.3)
    legend_below(fig, ncol=2)
    fig.suptitle(f"MER-Bench accuracy and Kendall τ by group size ({error_bar_note(report)})", fontsize=9)
    return save_figure(fig, out, "accuracy_by_size")


def _accuracy_by_category_plot(report: dict, out: Path) -> str:
    acc, meta = report["accuracy"], report["meta"]
    cats = mer_categories_in_order(acc["by_category"])
    ms = [acc["by_category"][c] for c in cats] + [acc["overall"]]
    fig = new_figure(5.5, 3.6)
    ax = fig.add_subplot()
    x = np.arange(len(ms))
    ax.bar(x, [plot_value(m) for m in ms], yerr=error_bars(ms), capsize=3,
           color=[CATEGORY_COLOURS.get(c, "grey") for c in cats] + ["#555555"])
    ax.set_xticks(x)
    ax.set_xticklabels([f"{MER_CATEGORY_LABELS.get(c, c)}\n(n={meta['n_by_category'].get(c, '?')})" for c in cats]
                       + [f"Overall\n(n={meta['n_groups']})"])
    ax.set_ylim(0, 1.05)
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylabel("group accuracy")
    ax.set_title(f"MER-Bench accuracy by editing category ({error_bar_note(report)})", fontsize=9)
    return save_figure(fig, out, "accuracy_by_category")


def aggregation_grid_plot(cells: list[dict], summary: dict, out_dir) -> str:
    """Heat map of group accuracy over alpha (rows) and the source-consistency weight w_con (columns), like the
    SpatialReward paper's figure 10; the best cell(s) boxed, the two paper readings marked. Writes ``grid.png``."""
    from matplotlib.patches import Rectangle

    alphas, w_cons = summary["alphas"], summary["w_cons"]
    mat = np.full((len(alphas), len(w_cons)), np.nan)
    for c in cells:
        mat[alphas.index(c["alpha"]), w_cons.index(c["w_con"])] = c["accuracy"]
    fig = new_figure(max(5.5, 0.55 * len(w_cons) + 2.5), max(4.0, 0.4 * len(alphas) + 1.8))
    ax = fig.add_subplot()
    im = ax.imshow(mat, origin="lower", aspect="auto", cmap="viridis")
    lo, hi = im.get_clim()
    _cell_values(ax, mat, lo, hi, ".2f")
    for c in summary["best"]:
        ax.add_patch(Rectangle((w_cons.index(c["w_con"]) - 0.5, alphas.index(c["alpha"]) - 0.5), 1, 1, fill=False,
                               edgecolor="#C44E52", lw=2))
    for key, r in summary["paper_readings"].items():
        col, row = w_cons.index(r["w_con"]), alphas.index(r["alpha"])
        ax.plot(col, row + 0.32, marker="v", color="white", markeredgecolor="black", markersize=6)
        ax.annotate("§3.1" if key == "sec_3_1" else "B.1.3", (col, row - 0.3), ha="center", va="center",
                    fontsize=5.5, color="black" if r["accuracy"] - lo > 0.6 * (hi - lo) else "white")
    ax.set_xticks(np.arange(len(w_cons)), [f"{w:g}" for w in w_cons], fontsize=7)
    ax.set_yticks(np.arange(len(alphas)), [f"{a:g}" for a in alphas], fontsize=7)
    ax.set_xlabel("w_con: weight of source consistency in SC (figure 10's $w_{SC}^{(0)}$); w_if = 1 − w_con",
                  fontsize=8)
    ax.set_ylabel("α: SC exponent", fontsize=8)
    fig.colorbar(im, ax=ax, label="group accuracy")
    if summary.get("held_out"):
        where = (f"searched on held-out {', '.join(summary['searched_on'])} ({summary['n_groups']} groups;\n"
                 f"reported: {', '.join(summary['reported_on'])}); red box: best on the held-out groups")
    else:
        where = (f"on the {summary['n_groups']} reported groups (in-sample):\nno best cell picked; --grid-split "
                 "searches on held-out splits")
    ax.set_title(f"MER-Bench accuracy of the re-aggregated reward, {where}\n"
                 "▼: the paper's two readings at α = 0.8", fontsize=8)
    return save_figure(fig, Path(out_dir), "grid", folder="")


# ---------------------------------------------------------------------------------------------------------
# editing-model leaderboard
# ---------------------------------------------------------------------------------------------------------


def editing_models_plots(report: dict, out_dir) -> dict[str, str]:
    """Mean predicted score per model (bars with CIs) and a model x task heatmap per dimension."""
    out = Path(out_dir)
    meta = report["meta"]
    dims = meta["dimensions"]
    lb = report["leaderboard"]
    order_dim = "overall" if "overall" in dims else dims[-1]
    models = [r["model"] for r in lb[order_dim]]
    fig = new_figure(max(6.5, 0.6 * len(models) + 2), 3.8)
    ax = fig.add_subplot()
    x = np.arange(len(models))
    colours = ["#4C72B0", "#DD8452", "#55A868", "#555555"]
    rows = [{r["model"]: r for r in lb[d]} for d in dims]
    _bars(ax, x, [(SHORT_NAMES[d], [rows[k][m]["all"] for m in models], colours[k % len(colours)])
                  for k, d in enumerate(dims)], 2)
    ax.set_xticks(x)
    ax.set_xticklabels(models, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("mean predicted score (0–100)")
    ax.grid(axis="y", alpha=0.3)
    legend_below(fig, ncol=len(dims))
    fig.suptitle(f"Editing models ranked by predicted {SHORT_NAMES[order_dim]} ({error_bar_note(report)})", fontsize=9)
    paths = {"editing_models": save_figure(fig, out, "editing_models")}
    tasks = meta["tasks"]
    for d, by_model in zip(dims, rows):
        mat = np.array([[plot_value(by_model[m]["tasks"][t]) for t in tasks] for m in models], dtype=float)
        fig = new_figure(max(6.5, 0.5 * len(tasks) + 3), 0.35 * len(models) + 2.2)
        ax = fig.add_subplot()
        # one fixed 0-100 (MOS) colour scale for every dimension: colours compare across heat maps, and a
        # 5-point spread is not stretched over the whole colour map
        im = ax.imshow(np.ma.masked_invalid(mat), aspect="auto", cmap="viridis", vmin=0, vmax=100)
        ax.set_xticks(np.arange(len(tasks)))
        ax.set_xticklabels([title_case(t) for t in tasks], rotation=45, ha="right", fontsize=7)
        ax.set_yticks(np.arange(len(models)))
        ax.set_yticklabels(models, fontsize=7)
        _cell_values(ax, mat, *im.get_clim(), ".0f")
        below, above = np.nanmin(mat) < 0, np.nanmax(mat) > 100  # arrows when predictions leave the 0-100 scale
        fig.colorbar(im, ax=ax, label=f"mean predicted {SHORT_NAMES[d]}",
                     extend={(True, True): "both", (True, False): "min", (False, True): "max"}.get((below, above),
                                                                                                    "neither"))
        ax.set_title(f"{LONG_NAMES[d]}: mean predicted score per editing model and task", fontsize=9)
        paths[f"heatmap_{d}"] = save_figure(fig, out, f"heatmap_{d}")
    return paths
