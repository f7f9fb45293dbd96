"""Write benchmark reports: ``report.json`` (every number with its CI), ``report.md`` (tables laid out like
the papers' tables, ready to paste) and ``report.html`` (the same page with its plots embedded).

Input: the dicts of :mod:`.mie_bench_report`, :mod:`.mer_bench_report` and :mod:`.editing_models_report`,
optionally with ``report["plots"] = {name: relative PNG path}`` and ``report["run"]`` (dataset, split,
predictions / model). Metrics are ``{"value", "ci": [low, high]}``. Files are written atomically
(:mod:`modeling_miescore.utils.atomic_files`): a crash never leaves half a report. The MIE-Bench Markdown is in
:mod:`.mie_bench_markdown`; the MER-Bench and editing-model Markdown and the shared formatting are here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..data.schema import LONG_NAMES, MER_CATEGORIES, MER_CATEGORY_LABELS, SHORT_NAMES
from ..utils.atomic_files import write_text_atomic
from ..utils.markdown_table import markdown_table
from ..utils.numbers import finite_float

__all__ = [
    "editing_models_markdown",
    "ci_omitted",
    "ci_state",
    "fmt_ci",
    "mer_bench_markdown",
    "mer_categories_in_order",
    "render_markdown",
    "title_case",
    "write_benchmarks_report",
    "write_json",
    "write_report",
]

_SUBSETS = {"all": "All", "2_sources": "2 sources", "3plus_sources": "≥3 sources"}


# ---------------------------------------------------------------------------------------------------------
# writers
# ---------------------------------------------------------------------------------------------------------


# The files a report writes into its folder (an input file must be none of them: it would be overwritten).
REPORT_FILES = ("report.json", "report.md", "report.html")

def _clean(obj: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python, so the JSON is strict (no NaN tokens)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path, data: dict) -> Path:
    """Write ``data`` as strict JSON (NaN/inf as null), atomically."""
    return write_text_atomic(path, json.dumps(_clean(data), indent=2, allow_nan=False) + "\n")


def write_benchmarks_report(out_dir, kind: str, results: list[dict], *, row_name: str, run: dict | None,
                            published: dict, markdown: Callable[[dict], str]) -> tuple[Path, Path]:
    """``report.json`` + ``report.md`` (rendered by ``markdown``) of a run over several benchmarks: ``results``
    (one dict per benchmark, each benchmark at most once) keyed by their ``"benchmark"`` next to the
    ``published`` rows they are compared with."""
    from .errors import BenchmarkInputError

    by_name = {}
    for result in results:
        if result["benchmark"] in by_name:
            raise BenchmarkInputError(f"{result['benchmark']} was given twice; pass each benchmark once")
        by_name[result["benchmark"]] = result
    report = {"benchmark": kind, "row_name": row_name, "results": by_name, "published": published, "run": run or {}}
    out = Path(out_dir)
    return write_json(out / "report.json", report), write_text_atomic(out / "report.md", markdown(report))


def write_report(out_dir, report: dict) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``out_dir``; returns the JSON and Markdown
    paths (the HTML page is ``out_dir/report.html``: the Markdown with its plots embedded, :mod:`.report_html`).

    Markdown and HTML are rendered before any file is written, so a report that cannot be rendered (or whose
    plots are missing) leaves all three files as they were.
    """
    from .report_html import render_html

    out = Path(out_dir)
    markdown = render_markdown(report)
    page = render_html(markdown, out)
    paths = write_json(out / "report.json", report), write_text_atomic(out / "report.md", markdown)
    write_text_atomic(out / "report.html", page)
    return paths


def render_markdown(report: dict) -> str:
    """The Markdown of a report dict, by its ``benchmark`` kind (mie-bench, mer-bench, editing-models; an editor
    benchmark's protocol name (gedit, imgedit) or editors: :mod:`.editor_benchmarks`)."""
    kind = report.get("benchmark")
    if kind == "mie-bench":
        from .mie_bench_markdown import mie_bench_markdown

        return mie_bench_markdown(report)
    if kind == "mer-bench":
        return mer_bench_markdown(report)
    if kind == "editing-models":
        return editing_models_markdown(report)
    from .editor_benchmarks import EDITOR_BENCHMARKS, editor_benchmark_markdown

    if kind in EDITOR_BENCHMARKS or kind == "editors":  # the editor benchmarks (SpatialReward paper, Table 3)
        return editor_benchmark_markdown(report)
    raise ValueError(f"unknown report kind {kind!r}")


# ---------------------------------------------------------------------------------------------------------
# formatting
# ---------------------------------------------------------------------------------------------------------


def _v(x: Any) -> float | None:
    """The finite value of a metric (a number, or a ``{"value", "ci"}`` dict), else None."""
    return finite_float(x.get("value") if isinstance(x, dict) else x)


def fmt_ci(metric: Any, digits: int = 4, ci: bool = True) -> str:
    """``0.8239 [0.8012, 0.8451]`` (or ``—`` when undefined); the bracket is left out when there is no CI."""
    value = _v(metric)
    if value is None:
        return "—"
    text = f"{value:.{digits}f}"
    if ci and isinstance(metric, dict):
        lo, hi = (metric.get("ci") or [None, None])[:2]
        if lo is not None and hi is not None:
            text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return text


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A report table: by default the first column (labels) left-aligned, the others (numbers) right-aligned."""
    return markdown_table(header, rows, align or ("l" + "r" * (len(header) - 1)))


def title_case(name: str) -> str:
    """``"object_composition"`` -> ``"Object Composition"`` (task and category labels)."""
    return name.replace("_", " ").title()


def ci_state(report: dict) -> tuple[str, dict]:
    """What a report's bootstrap gave, and its settings (``meta.bootstrap``): ``"off"`` (``--bootstrap 0``),
    ``"omitted"`` (asked for but left out, e.g. too few instances: ``settings["omitted"]`` says why) or ``"on"``."""
    settings = report.get("meta", {}).get("bootstrap", {})
    return ("off" if not settings.get("n") else "omitted" if settings.get("omitted") else "on"), settings


def _level(report: dict) -> str:
    state, b = ci_state(report)
    if state != "on":
        return ("no bootstrap (point estimates only)" if state == "off"
                else f"none: {b['omitted']} (point estimates only)")
    minimum = (f"; a metric over fewer than {b['min_units']} {b.get('unit', 'resampling units')} has none"
               if b.get("min_units") else "")
    return (f"{100 * b.get('level', 0.95):.0f}% percentile-bootstrap confidence intervals "
            f"({b['n']} resamples of {b.get('resampling', 'rows')}; seed {b.get('seed', 0)}{minimum})")


def ci_omitted(report: dict) -> str | None:
    """Why a report has no confidence intervals although a bootstrap was asked for (too few instances)."""
    return report.get("meta", {}).get("bootstrap", {}).get("omitted")


def _ci_sentence(report: dict) -> str:
    state, b = ci_state(report)
    if state == "off":
        return "No confidence intervals (--bootstrap 0): point estimates only."
    if state == "omitted":
        return f"**No confidence intervals: {b['omitted']}.** The numbers are point estimates only."
    return f"Numbers in brackets are {_level(report)}."


def _counts(meta: dict, *parts: str) -> str:
    """``"24 edits, 2 instances, 12 editing models"`` from a report's meta, for a table's heading."""
    names = {"items": "edits", "instances": "instances", "editing_models": "editing models", "tasks": "tasks",
             "groups": "groups", "samples": "samples"}
    return ", ".join(f"{meta[f'n_{p}']:,} {names[p]}" for p in parts if meta.get(f"n_{p}") is not None)


def _run_lines(report: dict) -> list[str]:
    run = report.get("run", {})
    lines = []
    for key, label in (("dataset", "Dataset"), ("split", "Split"), ("predictions", "Predictions"), ("model", "Model"),
                       ("miescore_version", "miescore")):
        if run.get(key):
            lines.append(f"- **{label}:** `{run[key]}`")
    return lines


def _alignment_lines(report: dict, what: str = "ids") -> list[str]:
    al = report.get("alignment")
    if not al:
        return []
    lines = [f"- **Matched {what}:** {al['n_matched']} of {al['n_dataset']} in the split "
             f"({al['n_predictions']} predictions)"]
    if al.get("n_missing"):
        lines.append(f"- **Without prediction (left out):** {al['n_missing']}, e.g. "
                     + ", ".join(f"`{x}`" for x in al.get("missing_examples", [])))
    if al.get("n_extra"):
        lines.append(f"- **Predictions not in the split (ignored):** {al['n_extra']}, e.g. "
                     + ", ".join(f"`{x}`" for x in al.get("extra_examples", [])))
    return lines


def mer_categories_in_order(by_category) -> list[str]:
    """MER-Bench categories present in ``by_category``: the paper's (table 2) first, in its order, then the rest."""
    return [c for c in MER_CATEGORIES if c in by_category] + sorted(set(by_category) - set(MER_CATEGORIES))


def _header(report: dict, title: str, intro: str, what: str = "ids") -> list[str]:
    """Title, one-paragraph summary (with the CI sentence) and the Run section."""
    return ([f"# {title}", "", intro + _ci_sentence(report), "", "## Run", ""]
            + _run_lines(report) + _alignment_lines(report, what) + [""])


def _plot(report: dict, name: str, caption: str) -> list[str]:
    path = report.get("plots", {}).get(name)
    return [f"![{caption}]({path})", ""] if path else []


def _notes(report: dict, extra: Sequence[str] = ()) -> list[str]:
    lines = ["## Notes", ""]
    lines += [f"- {x}" for x in extra]
    lines.append(f"- Brackets: {_level(report)}.")
    lines += [f"- Warning: {n}" for n in report.get("notes", [])]
    return lines + [""]


# ---------------------------------------------------------------------------------------------------------
# MER-Bench report
# ---------------------------------------------------------------------------------------------------------


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
    out = _header(report, "MER-Bench evaluation report", intro, what="pair ids")

    counts = _counts(meta, "groups", "samples")
    out += [f"## Accuracy by group size (paper table 1, MER-Bench columns): {counts}", ""]
    header = [f"{k}-P" for k in sizes] + ["Overall", "τ", "τ (as released)"]
    row = [fmt_ci(acc["by_size"][k], 3) for k in sizes] + [fmt_ci(acc["overall"], 3), fmt_ci(tau["overall"], 3),
                                                            fmt_ci(tau_rel["overall"], 3)]
    nrow = [meta["n_by_size"].get(k, "") for k in sizes] + [meta["n_groups"]] * 3
    out += [_table(["", *header], [["Accuracy", *row], ["Groups", *nrow]]), "",
            "τ scores a predicted tie 0; τ (as released) scores it +1 as the authors' script does, and is the "
            "one to compare with the paper's table 1.", ""]
    out += _plot(report, "accuracy_by_size", "Accuracy by group size")

    out += [f"## Accuracy by editing category (paper table 2): {counts}", ""]
    header = labels + ["Overall"]
    row = [fmt_ci(acc["by_category"][c], 3) for c in cats] + [fmt_ci(acc["overall"], 3)]
    nrow = [meta["n_by_category"].get(c, "") for c in cats] + [meta["n_groups"]]
    out += [_table(["", *header], [["Accuracy", *row], ["Groups", *nrow]]), ""]
    out += _plot(report, "accuracy_by_category", "Accuracy by category")

    out += [f"## Kendall τ by group size and category: {counts}", ""]
    rows = [[name] + [fmt_ci(t["by_size"][k], 3) for k in sizes] + [fmt_ci(t["by_category"].get(c), 3) for c in cats]
            for name, t in (("τ", tau), ("τ (as released)", tau_rel))]
    out += [_table(["", *[f"{k}-P" for k in sizes], *labels], rows), ""]

    out += [f"## Accuracy by group size and category: {counts}", ""]
    rows = []
    for k in sizes:
        cells = report["accuracy_by_size_and_category"].get(k, {})
        rows.append([f"{k}-P"] + [fmt_ci(cells.get(c), 3, ci=False) for c in cats])
    out += [_table(["Size", *labels], rows), ""]
    out += _mer_grid_lines(report)

    defs = meta["definitions"]
    extra = [f"Accuracy: {defs['accuracy']}.", f"τ: {defs['tau']}.", f"τ (as released): {defs['tau_as_released']}.",
             f"Groups with tied predicted scores (counted wrong): {meta['groups_with_tied_scores']}; "
             f"groups with a missing (null) score (counted wrong): {meta['groups_with_missing_scores']}."]
    return "\n".join(out + _notes(report, extra))


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
    out += [_table(header, rows), ""]
    if len(best) > 5:
        out += [f"{len(best) - 5} more cells reach the best accuracy (see `{grid['file']}`).", ""]
    return out + _plot(report, "aggregation_grid", "Accuracy over the aggregation-weight grid")


# ---------------------------------------------------------------------------------------------------------
# editing-model leaderboard (tables 8-11)
# ---------------------------------------------------------------------------------------------------------


def editing_models_markdown(report: dict) -> str:
    meta = report["meta"]
    dims = meta["dimensions"]
    lb = report["leaderboard"]
    order_dim = "overall" if "overall" in dims else dims[-1]
    out = _header(report, "Editing-model leaderboard (predicted scores)",
                  f"{meta['n_editing_models']} editing models ranked by the evaluator's mean predicted score over "
                  f"{meta['n_items']} edits ({meta['n_instances']} instances, {len(meta['tasks'])} tasks). ")

    counts = _counts(meta, "editing_models", "items", "instances", "tasks")
    out += [f"## Leaderboard: {counts}", ""]
    by_dim = {d: {r["model"]: r for r in lb[d]} for d in dims}
    rows = []
    for r in lb[order_dim]:
        rows.append([r["rank"], r["model"], r["n_items"]] + [fmt_ci(by_dim[d][r["model"]]["all"], 2) for d in dims])
    out += [_table(["Rank", "Model", "n (edits)", *[SHORT_NAMES[d] for d in dims]], rows,
                   "rl" + "r" * (len(dims) + 1)), ""]
    out += [f"Ranked by mean predicted {SHORT_NAMES[order_dim]}.", ""]
    out += _plot(report, "editing_models", "Mean predicted score per editing model")

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
            out += [f"**{label} editing**", "", _table(["Model/Task", *[title_case(t) for t in tasks]], rows), ""]
        rows = [[r["model"]] + [fmt_ci(r["categories"][c], 2) for c in cats] + [fmt_ci(r["all"], 2)] for r in lb[d]]
        out += ["**By category**", "", _table(["Model", *[title_case(c) for c in cats], "All"], rows), ""]
        out += _plot(report, f"heatmap_{d}", f"Mean predicted {SHORT_NAMES[d]} per model and task")

    extra = ["Scores are the evaluator's predictions on the 0–100 MOS scale, not human ratings; a model's score is "
             "the mean over its edits (per task: over its edits of that task)."]
    return "\n".join(out + _notes(report, extra))
