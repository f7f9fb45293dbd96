"""PNG plots for the benchmark reports (matplotlib, Agg canvas).

matplotlib is imported inside the functions, and only its object-oriented API is used (``Figure`` +
``FigureCanvasAgg``, never ``pyplot``): importing this module is free, and plotting never switches the
backend of a notebook or GUI session. Every function returns ``{plot name: path relative to out_dir}``; files
go to ``out_dir/plots/`` and are written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..data.schema import LONG_NAMES, MER_CATEGORY_LABELS, MOS_COLUMN_OF, SHORT_NAMES
from ..utils.atomic_files import atomic_write
from .report import fmt_ci, mer_categories_in_order, title_case

__all__ = ["editing_models_plots", "mer_bench_plots", "mie_bench_plots"]

_CAT_COLOURS = {"regional": "#4C72B0", "global": "#DD8452", "reasoning": "#55A868",
                "general": "#4C72B0", "human_basic": "#DD8452", "human_fine": "#55A868"}
_DPI = 130


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, out_dir: Path, name: str) -> str:
    rel = f"plots/{name}.png"
    with atomic_write(out_dir / rel, "wb") as handle:
        fig.savefig(handle, format="png")
    return rel


def _val(m: Any) -> float:
    v = m.get("value") if isinstance(m, dict) else m
    return np.nan if v is None else float(v)


def _err(ms: list) -> tuple[np.ndarray, np.ndarray] | None:
    """Asymmetric error-bar lengths from ``{"value", "ci"}`` metrics; None when no CI is known."""
    vals = np.array([_val(m) for m in ms])
    cis = [(m.get("ci") or [None, None]) if isinstance(m, dict) else [None, None] for m in ms]
    lo = np.array([np.nan if c[0] is None else c[0] for c in cis], dtype=float)
    hi = np.array([np.nan if c[1] is None else c[1] for c in cis], dtype=float)
    if np.isnan(lo).all():
        return None
    return np.nan_to_num(np.clip(vals - lo, 0, None)), np.nan_to_num(np.clip(hi - vals, 0, None))


# ---------------------------------------------------------------------------------------------------------
# MIE-Bench
# ---------------------------------------------------------------------------------------------------------


def mie_bench_plots(frame, report: dict, out_dir) -> dict[str, str]:
    """Scatter (pred vs MOS + logistic curve) per dimension, SRCC per task, leaderboard, MOS distributions.

    ``frame``: the evaluated rows with ``mos_<d>`` and ``pred_<d>`` columns (as given to ``mie_bench_report``).
    """
    out = Path(out_dir)
    dims = report["meta"]["dimensions"]
    paths = _scatter_plots(frame, report, dims, out)
    paths["srcc_per_task"] = _srcc_per_task_plot(report, dims, out)
    if report["model_ranking"].get("available"):
        paths["leaderboard"] = _leaderboard_plot(report, dims, out)
    paths["mos_distribution"] = _mos_distribution_plot(report, dims, out)
    return paths


def _scatter_plots(frame, report: dict, dims: list[str], out: Path) -> dict[str, str]:
    """Predicted vs MOS per dimension, coloured by category, with the 4-parameter logistic fit."""
    from .metrics.correlation import fit_logistic

    paths: dict[str, str] = {}
    cats = frame["category"].astype(str).to_numpy()
    for d in dims:
        pred = frame[f"pred_{d}"].to_numpy(dtype=float)
        mos = frame[MOS_COLUMN_OF[d]].to_numpy(dtype=float)
        ok = np.isfinite(pred) & np.isfinite(mos)
        fig = _figure(5.2, 4.6)
        ax = fig.add_subplot()
        small = ok.sum() < 2000
        for c in dict.fromkeys(cats[ok]):
            sel = ok & (cats == c)
            ax.scatter(pred[sel], mos[sel], s=12 if small else 4, alpha=0.7 if small else 0.35,
                       color=_CAT_COLOURS.get(c), label=title_case(c), rasterized=True, linewidths=0)
        fit = fit_logistic(pred[ok], mos[ok])
        if fit.success:
            xs = np.linspace(pred[ok].min(), pred[ok].max(), 200)
            ax.plot(xs, fit(xs), color="black", lw=1.6, label="4-parameter logistic fit")
        c = report["correlations"][d]
        ax.set_title(f"{LONG_NAMES[d]}: SRCC {fmt_ci(c['srcc'], 3)}\nPLCC (logistic) {fmt_ci(c.get('plcc_logistic'), 3)}",
                     fontsize=9)
        ax.set_xlabel(f"predicted {SHORT_NAMES[d]}")
        ax.set_ylabel(f"MOS {SHORT_NAMES[d]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        paths[f"scatter_{d}"] = _save(fig, out, f"scatter_{d}")
    return paths


def _srcc_per_task_plot(report: dict, dims: list[str], out: Path) -> str:
    """SRCC with MOS per task (bars coloured by category, CIs as error bars), one panel per dimension."""
    from matplotlib.patches import Patch

    pt = report["per_task"]
    tasks = [t["task"] for t in pt["tasks"]]
    tcats = [t["category"] for t in pt["tasks"]]
    fig = _figure(max(7.0, 0.55 * len(tasks) + 2), 2.6 * len(dims) + 0.6)
    axes = fig.subplots(len(dims), 1, squeeze=False)[:, 0]
    for ax, d in zip(axes, dims):
        ms = [pt["srcc"][d]["tasks"].get(t) for t in tasks]
        vals = np.array([_val(m) for m in ms])
        ax.bar(np.arange(len(tasks)), np.nan_to_num(vals), color=[_CAT_COLOURS.get(c, "grey") for c in tcats],
               yerr=_err(ms), capsize=2, error_kw={"lw": 0.8})
        ax.set_ylabel(f"SRCC {SHORT_NAMES[d]}")
        ax.set_ylim(min(0.0, float(np.nanmin(vals)) - 0.1) if np.isfinite(vals).any() else 0.0, 1.0)
        ax.axhline(0, color="black", lw=0.6)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xticks(np.arange(len(tasks)))
        ax.set_xticklabels([title_case(t) for t in tasks] if ax is axes[-1] else [], rotation=45, ha="right", fontsize=7)
    axes[0].legend(handles=[Patch(color=_CAT_COLOURS.get(c, "grey"), label=title_case(c)) for c in dict.fromkeys(tcats)],
                   fontsize=7, ncol=3, loc="lower right")
    axes[0].set_title("SRCC with human MOS per task (bars: bootstrap CI)", fontsize=9)
    return _save(fig, out, "srcc_per_task")


def _leaderboard_plot(report: dict, dims: list[str], out: Path) -> str:
    """Per-model mean human MOS vs mean prediction, one panel per dimension (paper table 4)."""
    mr = report["model_ranking"]
    order_dim = "overall" if "overall" in dims else dims[-1]
    models = [r["model"] for r in mr[order_dim]["table"]]
    fig = _figure(max(7.0, 0.6 * len(models) + 2), 2.6 * len(dims) + 0.6)
    axes = fig.subplots(len(dims), 1, squeeze=False)[:, 0]
    x = np.arange(len(models))
    for ax, d in zip(axes, dims):
        rows = {r["model"]: r for r in mr[d]["table"]}
        hum = [rows[m]["human"] for m in models]
        prd = [rows[m]["pred"] for m in models]
        ax.bar(x - 0.2, [_val(v) for v in hum], 0.4, yerr=_err(hum), capsize=2, label="Human MOS", color="#8C8C8C")
        ax.bar(x + 0.2, [_val(v) for v in prd], 0.4, yerr=_err(prd), capsize=2, label="Predicted", color="#4C72B0")
        ax.set_ylabel(SHORT_NAMES[d])
        ax.set_title(f"{LONG_NAMES[d]}: SRCC to human {fmt_ci(mr[d]['srcc'], 3)}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xticks(x)
        ax.set_xticklabels(models if ax is axes[-1] else [], rotation=30, ha="right", fontsize=7)
    axes[0].legend(fontsize=7)
    return _save(fig, out, "leaderboard")


def _mos_distribution_plot(report: dict, dims: list[str], out: Path) -> str:
    """MOS histograms per dimension: all edits, 2 sources, 3 or more sources (paper figure 2)."""
    dist = report["mos_distribution"]
    edges = np.asarray(dist["bin_edges"])
    subsets = [("all", "(a) All"), ("2_sources", "(b) Two sources"), ("3plus_sources", "(c) Three or more sources")]
    ddims = [d for d in dims if d in dist]
    fig = _figure(10.0, 2.0 * len(ddims) + 0.6)
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
    return _save(fig, out, "mos_distribution")


# ---------------------------------------------------------------------------------------------------------
# MER-Bench
# ---------------------------------------------------------------------------------------------------------


def mer_bench_plots(report: dict, out_dir) -> dict[str, str]:
    """Accuracy (and tau) per group size, accuracy per category; bootstrap CIs as error bars."""
    out = Path(out_dir)
    acc, tau = report["accuracy"], report["tau"]
    paths = {}
    sizes = sorted(acc["by_size"], key=int)
    labels = [f"{k}-P" for k in sizes] + ["Overall"]
    a = [acc["by_size"][k] for k in sizes] + [acc["overall"]]
    t = [tau["by_size"][k] for k in sizes] + [tau["overall"]]
    fig = _figure(6.0, 3.6)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    ax.bar(x - 0.2, [_val(m) for m in a], 0.4, yerr=_err(a), capsize=3, label="Accuracy", color="#4C72B0")
    ax.bar(x + 0.2, [_val(m) for m in t], 0.4, yerr=_err(t), capsize=3, label="Kendall τ", color="#DD8452")
    for k, size in enumerate(sizes):  # chance level of exact-order accuracy: 1 / K!
        ax.hlines(1.0 / float(np.prod(np.arange(1, int(size) + 1))), k - 0.4, k, colors="black", linestyles=":", lw=1)
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    lows = [_val(m) - (e[0][i] if e is not None else 0.0) for ms_, e in ((a, _err(a)), (t, _err(t)))
            for i, m in enumerate(ms_)]
    ax.set_ylim(min(0.0, float(np.nanmin(lows)) - 0.05), 1.05)
    ax.axhline(0, color="black", lw=0.6)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("MER-Bench accuracy and τ by group size (dotted: chance accuracy 1/K!)", fontsize=9)
    paths["accuracy_by_size"] = _save(fig, out, "accuracy_by_size")

    cats = mer_categories_in_order(acc["by_category"])
    ms = [acc["by_category"][c] for c in cats] + [acc["overall"]]
    fig = _figure(5.5, 3.4)
    ax = fig.add_subplot()
    x = np.arange(len(ms))
    ax.bar(x, [_val(m) for m in ms], yerr=_err(ms), capsize=3,
           color=[_CAT_COLOURS.get(c, "grey") for c in cats] + ["#555555"])
    ax.set_xticks(x)
    ax.set_xticklabels([MER_CATEGORY_LABELS.get(c, c) for c in cats] + ["Overall"])
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("MER-Bench accuracy by editing category", fontsize=9)
    paths["accuracy_by_category"] = _save(fig, out, "accuracy_by_category")
    return paths


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
    paths = {}
    fig = _figure(max(6.5, 0.6 * len(models) + 2), 3.8)
    ax = fig.add_subplot()
    x = np.arange(len(models))
    width = 0.8 / len(dims)
    colours = ["#4C72B0", "#DD8452", "#55A868", "#555555"]
    for k, d in enumerate(dims):
        rows = {r["model"]: r for r in lb[d]}
        ms = [rows[m]["all"] for m in models]
        ax.bar(x - 0.4 + width * (k + 0.5), [_val(m) for m in ms], width, yerr=_err(ms), capsize=2,
               label=SHORT_NAMES[d], color=colours[k % len(colours)])
    ax.set_xticks(x)
    ax.set_xticklabels(models, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("mean predicted score (0–100)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=len(dims))
    ax.set_title(f"Editing models ranked by predicted {SHORT_NAMES[order_dim]}", fontsize=9)
    paths["editing_models"] = _save(fig, out, "editing_models")

    tasks = meta["tasks"]
    for d in dims:
        rows = {r["model"]: r for r in lb[d]}
        mat = np.array([[_val(rows[m]["tasks"][t]) for t in tasks] for m in models], dtype=float)
        fig = _figure(max(6.5, 0.5 * len(tasks) + 3), 0.35 * len(models) + 2.2)
        ax = fig.add_subplot()
        im = ax.imshow(np.ma.masked_invalid(mat), aspect="auto", cmap="viridis")
        ax.set_xticks(np.arange(len(tasks)))
        ax.set_xticklabels([title_case(t) for t in tasks], rotation=45, ha="right", fontsize=7)
        ax.set_yticks(np.arange(len(models)))
        ax.set_yticklabels(models, fontsize=7)
        if mat.size <= 400:
            lo, hi = im.get_clim()
            for i in range(mat.shape[0]):
                for j in range(mat.shape[1]):
                    if np.isfinite(mat[i, j]):  # dark text on the bright (yellow) end of viridis
                        bright = (mat[i, j] - lo) > 0.6 * (hi - lo)
                        ax.text(j, i, f"{mat[i, j]:.0f}", ha="center", va="center", fontsize=6,
                                color="black" if bright else "white")
        fig.colorbar(im, ax=ax, label=f"mean predicted {SHORT_NAMES[d]}")
        ax.set_title(f"{LONG_NAMES[d]}: mean predicted score per editing model and task", fontsize=9)
        paths[f"heatmap_{d}"] = _save(fig, out, f"heatmap_{d}")
    return paths
