"""The parts every benchmark report is built from, in one place: its Markdown (tables, the header with the run and
the CI sentence, notes, plot links, counts, CI formatting, subsets) and its figures (a matplotlib figure on the Agg
canvas, saving, values and error bars of ``{"value", "ci"}`` metrics, the error-bar note, the legend below the
axes).

A metric is a number or ``{"value", "ci": [low, high]}``; a report's bootstrap settings are in
``report["meta"]["bootstrap"]``.

Figures: matplotlib is imported inside the functions and only its object-oriented API is used (``Figure`` +
``FigureCanvasAgg``, never ``pyplot``), so importing this module is free and plotting never switches the backend of
a notebook or GUI session. Reading rules every plot keeps: legends sit outside the axes; error bars are drawn only
where a CI exists (never a zero-width bar that looks like certainty) and the title says what they are; an
undefined value is marked "n/a", not drawn as 0; y-limits include the CI ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..data.schema import MER_CATEGORIES
from ..utils.atomic_files import atomic_write
from ..utils.markdown_table import markdown_table
from ..utils.numbers import finite_float
from .metrics.bootstrap import MIN_RESAMPLING_UNITS

__all__ = [
    "CATEGORY_COLOURS", "SOURCE_SUBSETS", "alignment_lines", "ci_level", "ci_sentence", "ci_state", "counts_phrase",
    "error_bar_note", "error_bars", "fmt_ci", "has_ci", "legend_below", "logistic_status", "mer_categories_in_order",
    "metric_value",
    "new_figure", "notes_section", "plot_lines", "plot_value", "report_header", "report_table", "run_lines",
    "save_figure", "title_case", "y_floor",
]

# The MIE-Bench subsets by number of sources (paper figure 2), keyed as the report dicts key them.
SOURCE_SUBSETS = {"all": "All", "2_sources": "2 sources", "3plus_sources": "≥3 sources"}
# One colour per editing category (MIE-Bench's regional / global / reasoning, MER-Bench's three categories).
CATEGORY_COLOURS = {"regional": "#4C72B0", "global": "#DD8452", "reasoning": "#55A868",
                    "general": "#4C72B0", "human_basic": "#DD8452", "human_fine": "#55A868"}
FIGURE_DPI = 130


# ------------------------------------------------------------------------------------------------ values and CIs


def metric_value(metric: Any) -> float | None:
    """The finite value of a metric (a number, or a ``{"value", "ci"}`` dict), else None."""
    return finite_float(metric.get("value") if isinstance(metric, dict) else metric)


def fmt_ci(metric: Any, digits: int = 4, ci: bool = True) -> str:
    """``0.8239 [0.8012, 0.8451]`` (or ``—`` when undefined); the bracket is left out when there is no CI."""
    value = metric_value(metric)
    if value is None:
        return "—"
    text = f"{value:.{digits}f}"
    if ci and isinstance(metric, dict):
        lo, hi = (metric.get("ci") or [None, None])[:2]
        if lo is not None and hi is not None:
            text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return text


def logistic_status(c: dict) -> str:
    """The logistic fit's status of one dimension's correlations (``metrics.logistic_fit.FIT_STATUSES``)."""
    lg = c.get("logistic") or {}
    return lg.get("status") or ("fitted" if lg.get("success", True) else "failed")



def ci_state(report: dict) -> tuple[str, dict]:
    """What a report's bootstrap gave, and its settings (``meta.bootstrap``): ``"off"`` (``--bootstrap 0``),
    ``"omitted"`` (asked for but left out, e.g. too few instances: ``settings["omitted"]`` says why) or ``"on"``."""
    settings = report.get("meta", {}).get("bootstrap", {})
    return ("off" if not settings.get("n") else "omitted" if settings.get("omitted") else "on"), settings


def ci_level(report: dict) -> str:
    """What the brackets of a report are: the interval's level, resamples, unit and seed, or why there are none."""
    state, b = ci_state(report)
    if state != "on":
        return ("no bootstrap (point estimates only)" if state == "off"
                else f"none: {b['omitted']} (point estimates only)")
    minimum = (f"; a metric over fewer than {b['min_units']} {b.get('unit', 'resampling units')} has none"
               if b.get("min_units") else "")
    return (f"{100 * b.get('level', 0.95):.0f}% percentile-bootstrap confidence intervals "
            f"({b['n']} resamples of {b.get('resampling', 'rows')}; seed {b.get('seed', 0)}{minimum})")


def ci_sentence(report: dict) -> str:
    """The sentence under a report's title that says what its brackets are."""
    state, b = ci_state(report)
    if state == "off":
        return "No confidence intervals (--bootstrap 0): point estimates only."
    if state == "omitted":
        return f"**No confidence intervals: {b['omitted']}.** The numbers are point estimates only."
    return f"Numbers in brackets are {ci_level(report)}."


# ------------------------------------------------------------------------------------------------ Markdown


def report_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A report table: by default the first column (labels) left-aligned, the others (numbers) right-aligned."""
    return markdown_table(header, rows, align or ("l" + "r" * (len(header) - 1)))


def title_case(name: str) -> str:
    """``"object_composition"`` -> ``"Object Composition"`` (task and category labels)."""
    return name.replace("_", " ").title()


def mer_categories_in_order(by_category) -> list[str]:
    """MER-Bench categories present in ``by_category``: the paper's (table 2) first, in its order, then the rest."""
    return [c for c in MER_CATEGORIES if c in by_category] + sorted(set(by_category) - set(MER_CATEGORIES))


def counts_phrase(meta: dict, *parts: str) -> str:
    """``"24 edits, 2 instances, 12 editing models"`` from a report's meta, for a table's heading."""
    names = {"items": "edits", "instances": "instances", "editing_models": "editing models", "tasks": "tasks",
             "groups": "groups", "samples": "samples"}
    return ", ".join(f"{meta[f'n_{p}']:,} {names[p]}" for p in parts if meta.get(f"n_{p}") is not None)


def run_lines(report: dict) -> list[str]:
    """The Run section's lines: dataset, split, predictions, model and package version, where the run has them."""
    run = report.get("run", {})
    labels = {"dataset": "Dataset", "split": "Split", "predictions": "Predictions", "model": "Model",
              "miescore_version": "miescore"}
    return [f"- **{label}:** `{run[key]}`" for key, label in labels.items() if run.get(key)]


def alignment_lines(report: dict, what: str = "ids") -> list[str]:
    """How the predictions matched the split: matched, missing (left out) and extra (ignored) ids."""
    al = report.get("alignment")
    if not al:
        return []
    lines = [f"- **Matched {what}:** {al['n_matched']} of {al['n_dataset']} in the split "
             f"({al['n_predictions']} predictions)"]
    for key, label in (("missing", "Without prediction (left out)"),
                       ("extra", "Predictions not in the split (ignored)")):
        if al.get(f"n_{key}"):
            examples = ", ".join(f"`{x}`" for x in al.get(f"{key}_examples", []))
            lines.append(f"- **{label}:** {al[f'n_{key}']}, e.g. {examples}")
    return lines


def report_header(report: dict, title: str, intro: str, what: str = "ids") -> list[str]:
    """Title, one-paragraph summary (with the CI sentence) and the Run section."""
    return ([f"# {title}", "", intro + ci_sentence(report), "", "## Run", ""]
            + run_lines(report) + alignment_lines(report, what) + [""])


def plot_lines(report: dict, name: str, caption: str) -> list[str]:
    """The Markdown image of the report's plot ``name`` (``report["plots"]``), or nothing when it was not drawn."""
    path = report.get("plots", {}).get(name)
    return [f"![{caption}]({path})", ""] if path else []


def notes_section(report: dict, extra: Sequence[str] = ()) -> list[str]:
    """The Notes section: ``extra`` lines, what the brackets are, and the report's warnings."""
    lines = ["## Notes", ""]
    lines += [f"- {x}" for x in extra]
    lines.append(f"- Brackets: {ci_level(report)}.")
    lines += [f"- Warning: {n}" for n in report.get("notes", [])]
    return lines + [""]


# ------------------------------------------------------------------------------------------------ figures


def new_figure(width: float, height: float, dpi: int = FIGURE_DPI):
    """A matplotlib ``Figure`` on the Agg canvas (constrained layout), ``width`` x ``height`` inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, out_dir: Path, name: str, folder: str = "plots") -> str:
    """Write ``fig`` as ``out_dir/folder/name.png`` (atomically); returns the path relative to ``out_dir``."""
    rel = f"{folder}/{name}.png" if folder else f"{name}.png"
    with atomic_write(Path(out_dir) / rel, "wb") as handle:
        fig.savefig(handle, format="png")
    return rel


def plot_value(metric: Any) -> float:
    """A metric's value for plotting: NaN when undefined."""
    value = metric.get("value") if isinstance(metric, dict) else metric
    return np.nan if value is None else float(value)


def has_ci(metric: Any) -> bool:
    return isinstance(metric, dict) and None not in (metric.get("ci") or [None, None])[:2]


def error_bars(metrics: list) -> np.ndarray | None:
    """Asymmetric error-bar lengths ``(2, n)`` from ``{"value", "ci"}`` metrics; NaN (no bar drawn, not a
    zero-width one that looks like certainty) where a metric has no CI; None when none has one."""
    values = np.array([plot_value(m) for m in metrics])
    cis = np.array([(m["ci"][:2] if has_ci(m) else [np.nan, np.nan]) for m in metrics], dtype=float).reshape(-1, 2)
    if np.isnan(cis).all():
        return None
    return np.vstack([np.clip(values - cis[:, 0], 0, None), np.clip(cis[:, 1] - values, 0, None)])


def y_floor(metrics: list) -> float:
    """The lower y-limit for ``metrics``: 0, or just below the lowest value or CI bound when that is negative."""
    lows = [plot_value(m) for m in metrics] + [m["ci"][0] for m in metrics if has_ci(m)]
    finite = [x for x in lows if np.isfinite(x)]
    return min(0.0, min(finite) - 0.05) if finite else 0.0


def error_bar_note(report: dict, drawn: int | None = None, missing: int = 0) -> str:
    """What the error bars are, from the report's bootstrap settings (for a figure's title); with ``drawn`` (the
    bars the figure drew an interval on) and ``missing`` (its bars without one), what the figure shows: a title
    never promises intervals that no bar carries (too few resampling units per bar)."""
    state, b = ci_state(report)
    if state == "on" and drawn == 0:
        return f"no error bars: every bar has fewer than {MIN_RESAMPLING_UNITS} resampling units"
    note = {"off": "no error bars (--bootstrap 0)", "omitted": f"no error bars: {b.get('omitted')}",
            "on": f"error bars: {100 * b.get('level', 0.95):.0f}% bootstrap CI"}[state]
    if state == "on" and missing:
        note += f"; none on {missing} bar(s) of fewer than {MIN_RESAMPLING_UNITS} units"
    return note


def legend_below(fig, handles=None, ncol: int = 4) -> None:
    """One legend for the figure, below the axes (the title is above them): it never covers a bar or a point."""
    kwargs = {"handles": handles} if handles is not None else {}
    fig.legend(**kwargs, loc="outside lower center", ncol=ncol, fontsize=7, frameon=False)
