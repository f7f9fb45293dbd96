"""The report of one editor on GEdit-Bench or ImgEdit-Bench: the report dict (``report.json``), its Markdown
(``report.md`` / ``report.html``, through :func:`modeling_miescore.evaluation.report.write_report`) and its plot,
built from the parts of :mod:`modeling_miescore.evaluation.report_parts`; and the Markdown and plots of a comparison
of editors (:mod:`.editor_comparison`: :func:`comparison_markdown`, :func:`comparison_plots`).

Sections: the run (dataset, edits, judge, prompts, counts); the headline table (GEdit: SC, PQ, O per language for
the full set and the ``Intersection_exist`` subset; ImgEdit: the overall), as in the SpatialReward paper's Table 3;
the per-category table; the reward models' view of the same edits (per category, and their Spearman correlation
with the judge's overall); the missing edits, flagged judgements and edits not judged, each listed. A report made
with our own prompts says so at the top: "own prompts — not comparable with published numbers".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from ...data.errors import BenchmarkInputError
from ..instance_bootstrap import BootstrapSettings
from ..published_results import SPATIALREWARD_TABLE3_COLUMNS
from ..report_parts import (error_bar_note, error_bars, fmt_ci, legend_below, new_figure, notes_section,
                            plot_lines, plot_value, report_table, run_lines, save_figure, title_case)
from .protocols import EDITOR_BENCHMARKS, EditorBenchmark
from .judge_run import REWARD_JUDGES, recheck_markdown, reward_view
from .scores import VIEW_NAMES, benchmark_results, row_records
from ..metrics.inputs import is_constant

__all__ = ["NOT_COMPARABLE", "build_editor_report", "comparison_markdown", "comparison_plots", "editor_markdown",
           "editor_plots", "report_columns", "reward_judge_summary", "table3_columns"]

NOT_COMPARABLE = "own prompts — not comparable with published numbers"
_SUBSET_NAMES = {"full": "Full set", "intersection": "Intersection"}
_LISTED = 50  # entries of a list shown in a report (all of them stay in report.json)


def _srcc_ci(x: np.ndarray, y: np.ndarray, bootstrap: BootstrapSettings, names: tuple[str, str] = ("", "")) -> dict:
    """Spearman correlation of ``x`` and ``y`` with its CI; none (a ``note`` says why) with fewer than 3 keys or
    when one side is constant (``names`` say which: the benchmarks have no MOS)."""
    from ..metrics.correlation import srcc  # deferred: loads scipy

    if len(x) < 3:
        return {"value": None, "ci": [None, None], "n": int(len(x)), "note": "fewer than 3 keys"}
    constant = [name for name, values in zip(names, (x, y)) if is_constant(values)]
    if constant:
        return {"value": None, "ci": [None, None], "n": int(len(x)),
                "note": f"{' and '.join(constant)} {'is' if len(constant) == 1 else 'are'} the same for every key"}

    def fn(idx):
        return srcc(x[idx], y[idx])

    return {**bootstrap.interval(fn, np.arange(len(x))), "n": int(len(x))}


def reward_judge_summary(kind, reward_rows, judge_rows, benchmark: EditorBenchmark,
                         bootstrap: BootstrapSettings, order: list, expected: Optional[dict] = None,
                         sources: Optional[dict] = None) -> dict:
    """The reward model's per-category means (a :func:`~.scores.benchmark_results` with its scores), its per-key
    values (``per_row``, what ``miescore benchmark editors --by KIND`` compares) and, where the MLLM judge ran too,
    the Spearman correlation of its overall with the judge's overall over the rows both judged, overall and per
    category."""
    view = reward_view(benchmark, kind)
    out: Dict[str, Any] = {"kind": kind.name, "scores": list(kind.scores), "labels": kind.labels,
                           "scale": kind.scale,
                           "results": benchmark_results(reward_rows, view, bootstrap, order, expected),
                           "per_row": row_records(reward_rows, sources)}
    if judge_rows is None or judge_rows.empty or reward_rows.empty:
        return out
    both = reward_rows.merge(judge_rows[["row", benchmark.overall]], on="row", suffixes=("", "_judge"))
    judge_col = f"{benchmark.overall}_judge" if benchmark.overall in kind.scores else benchmark.overall
    srcc: Dict[str, Any] = {}
    names = (f"the {kind.name} {kind.labels[kind.overall]}", f"the judge's {benchmark.labels[benchmark.overall]}")
    for language, part in both.groupby("language"):
        srcc[language] = {"overall": _srcc_ci(part[kind.overall].to_numpy(float), part[judge_col].to_numpy(float),
                                              bootstrap, names),
                          "by_category": {c: _srcc_ci(g[kind.overall].to_numpy(float), g[judge_col].to_numpy(float),
                                                      BootstrapSettings(n=0), names)
                                          for c, g in part.groupby("category")}}
    out["srcc_with_judge"] = srcc
    return out


def build_editor_report(benchmark: EditorBenchmark, *, run: dict, samples, rows, missing: List[str],
                        outside_selection: int, prompts, bootstrap: BootstrapSettings, reward: Optional[dict] = None,
                        judge_ran: bool = True, order: Optional[list] = None, sources: Optional[dict] = None,
                        expected: Optional[dict] = None) -> dict:
    """The report dict: ``samples`` / ``rows`` from :mod:`.scores` (``rows``: one value per key), ``missing`` the
    selected rows without edits, ``reward``: ``{judge name: reward_judge_summary(...)}``, ``expected``: the
    categories of the selected rows per language (each needs a usable key for the mean over categories)."""
    flagged = samples[samples["judged"] & samples["failed"]]
    not_judged = samples[~samples["judged"]]
    order = order or sorted(set(samples["category"]) | set(rows["category"]) if len(samples) else [])
    per_row = row_records(rows, sources)
    return {
        "benchmark": benchmark.name, "title": benchmark.title, "run": run,
        "comparable": bool(prompts.comparable) if judge_ran else None,
        "counts": {"rows_selected": int(len(set(samples["row"])) + len(missing)), "edits": int(len(samples)),
                   "missing_edits": len(missing), "outside_selection": int(outside_selection),
                   "judged": int((samples["judged"] & ~samples["failed"]).sum()) if judge_ran else 0,
                   "flagged": int(len(flagged)) if judge_ran else 0,
                   "not_judged": int(len(not_judged)) if judge_ran else 0, "rows_evaluated": int(len(rows))},
        "missing_edits": list(missing),
        "flagged": [{"id": i, "issues": list(x)} for i, x in zip(flagged["input_id"], flagged["issues"])],
        "not_judged": list(not_judged["input_id"]) if judge_ran else [],
        "results": benchmark_results(rows, benchmark, bootstrap, order, expected) if judge_ran else {},
        "categories": order, "expected_categories": expected or {}, "reward_judges": reward or {}, "per_row": per_row,
        "meta": {"bootstrap": bootstrap.describe("rows (keys)")},
    }


# ------------------------------------------------------------------------------------------------ Markdown


def _listing(title: str, items: List[str], empty: str) -> List[str]:
    if not items:
        return [f"**{title}:** {empty}", ""]
    shown = ", ".join(f"`{x}`" for x in items[:_LISTED])
    more = f" … and {len(items) - _LISTED} more (all in report.json)" if len(items) > _LISTED else ""
    return [f"<details><summary>{title}: {len(items)}</summary>", "", shown + more, "", "</details>", ""]


def _headline(report: dict, benchmark: EditorBenchmark) -> List[str]:
    labels = [benchmark.labels[k] for k in benchmark.scores]
    rows, missing = [], []
    for language, subsets in report["results"].items():
        for subset, summary in subsets.items():
            name = _SUBSET_NAMES.get(subset, subset)
            cells = (["n/c"] * len(benchmark.scores) if summary.get("not_computable")
                     else [fmt_ci(summary[k], 2) for k in benchmark.scores])
            rows.append([language.upper(), name, summary["n"], *cells])
            if summary.get("not_computable"):
                missing.append(f"- {language.upper()}, {name.lower()}: not computable: {summary['not_computable']}.")
    return [f"## {benchmark.title} results (SpatialReward paper, Table 3 layout)", "",
            report_table(["Language", "Subset", "Keys", *labels], rows), "", *missing, *([""] if missing else []),
            benchmark.overall_note, ""]


def _per_category(report: dict, benchmark: EditorBenchmark) -> List[str]:
    out = []
    for language, subsets in report["results"].items():
        cats = subsets["full"]["by_category"]
        rows = [[title_case(c), cats[c]["n"], *[fmt_ci(cats[c][k], 2) for k in benchmark.scores]]
                for c in report["categories"] if c in cats]
        out += [f"## Per {benchmark.category_label.lower()} ({language.upper()}, full set)", "",
                report_table([benchmark.category_label, "Keys", *[benchmark.labels[k] for k in benchmark.scores]],
                             rows), ""]
    return out + plot_lines(report, "per_category",
                            f"{benchmark.labels[benchmark.overall]} per {benchmark.category_label.lower()}")


def _reward_section(report: dict, benchmark: EditorBenchmark) -> List[str]:
    if not report["reward_judges"]:
        return []
    out = ["## Reward models as judges of the same edits", ""]
    for name, view in report["reward_judges"].items():
        labels = [view["labels"][k] for k in view["scores"]]
        counts = view.get("counts", {})
        out += [f"**{name}** ({view['scale']}): {counts.get('scored', 0)} edits scored, {counts.get('flagged', 0)} "
                f"flagged (a judgement that could not be parsed; left out), {counts.get('not_scored', 0)} not scored.",
                ""]
        for language, subsets in view["results"].items():
            cats = subsets["full"]["by_category"]
            srcc = view.get("srcc_with_judge", {}).get(language)
            header = [benchmark.category_label, "Keys", *labels] + (["SRCC with judge"] if srcc else [])
            rows = [[title_case(c), cats[c]["n"], *[fmt_ci(cats[c][k], 2, ci=False) for k in view["scores"]]]
                    + ([fmt_ci(srcc["by_category"].get(c), 3, ci=False)] if srcc else [])
                    for c in report["categories"] if c in cats]
            total = subsets["full"]
            rows.append(["**All (mean over categories)**", total["n"], *[fmt_ci(total[k], 2) for k in view["scores"]]]
                        + ([fmt_ci(srcc["overall"], 3)] if srcc else []))
            out += [f"{language.upper()}:", "", report_table(header, rows), ""]
        out += [f"SRCC: Spearman correlation, over the keys both judged, between {name}'s "
                f"{view['labels'][REWARD_JUDGES[view['kind']].overall]} and the judge's "
                f"{benchmark.labels[benchmark.overall]}.", ""]
    return out


def editor_markdown(report: dict) -> str:
    """``report.md`` of an editor benchmark run (module docstring)."""
    benchmark = EDITOR_BENCHMARKS[report["benchmark"]]
    counts = report["counts"]
    out = [f"# {benchmark.title} editor evaluation report", ""]
    if report.get("label"):
        out += [f"> **{report['label']}**", ""]
    if report.get("comparable") is False:
        out += [f"> **{NOT_COMPARABLE.capitalize()}.** The judge used our own wording of the protocol; pass the "
                f"benchmark's own prompt file with --prompts ({benchmark.prompts_expected}) for numbers comparable "
                "with published ones.", ""]
    out += [f"{counts['rows_evaluated']} keys evaluated of {counts['rows_selected']} selected "
            f"({counts['edits']} edited images; {counts['missing_edits']} keys without an edit; "
            f"{counts['flagged']} flagged judgements; {counts['not_judged']} edits not judged).", "", "## Run", ""]
    out += run_lines(report)
    run = report["run"]
    for key, label in (("release", "Release"), ("edits", "Edits"), ("judge", "Judge"),
                       ("judge_endpoint", "Judge endpoint"), ("request", "Requests"), ("prompts", "Prompts"),
                       ("samples", "Samples per key"), ("selection", "Selection")):
        if run.get(key):
            out.append(f"- **{label}:** {run[key]}")
    if run.get("request_differences"):
        out.append("- **Requests differ from the released script:** " + "; ".join(run["request_differences"]))
    elif run.get("request"):
        out.append("- **Requests:** as the released script sends them")
    out.append("")
    if report["results"]:
        out += _headline(report, benchmark) + _per_category(report, benchmark)
    out += _reward_section(report, benchmark)
    out += recheck_markdown(report, benchmark.labels)
    out += ["## Missing and failed", ""]
    out += _listing("Keys without an edit (left out of every mean)", report["missing_edits"], "none")
    out += _listing("Flagged judgements (an answer without every score; left out)",
                    [f"{f['id']} ({', '.join(f['issues'])})" for f in report["flagged"]], "none")
    out += _listing("Edits not judged (the request failed; rerun to retry)", report["not_judged"], "none")
    notes = [f"Judge protocol: {benchmark.title}, {'as released' if report.get('comparable') else NOT_COMPARABLE}; "
             f"published numbers use {benchmark.published_judge}.", benchmark.overall_note]
    if counts["outside_selection"]:
        notes.append(f"{counts['outside_selection']} edits belong to rows outside the selection and were left out.")
    return "\n".join(out + notes_section(report, notes))


# ---------------------------------------------------------------------------------- Markdown of a comparison


def _signed(metric: Optional[dict], digits: int = 2) -> str:
    if not metric or metric.get("value") is None:
        return "—"
    text = f"{metric['value']:+.{digits}f}"
    lo, hi = (metric.get("ci") or [None, None])[:2]
    return text + (f" [{lo:+.{digits}f}, {hi:+.{digits}f}]" if lo is not None and hi is not None else "")


def _delta_cell(cell: dict) -> str:
    delta = cell.get("delta")
    if not delta:
        return "—"
    if delta.get("not_computable"):
        return "n/c"
    paired = delta.get("delta_paired") or {}
    text = _signed({"value": delta["value"], "ci": paired.get("ci")})
    if delta.get("p_value") is not None:
        text += f", p = {delta['p_value']:.3f} (n = {delta['n_paired']})"
    return text


def table3_columns() -> Dict[str, dict]:
    """``column key -> {"kind", "value", "header"}``: the paper's Table 3 columns, then those of registered editor
    benchmarks the paper does not report, each filled by the editor benchmark (``kind``) that declares it
    (``BenchmarkSpec.columns["editors"]``) with one of its scores or ``delta`` (Δ of its overall)."""
    from ..converted_benchmarks import declared_benchmarks, report_columns  # deferred: the name is this module's too

    declared = declared_benchmarks()
    columns = {}
    for key, column in {**{k: None for k in SPATIALREWARD_TABLE3_COLUMNS}, **report_columns("editors")}.items():
        if column is None:
            raise BenchmarkInputError(f"no registered benchmark fills the published Table 3 column {key!r}")
        header = column["header"] or SPATIALREWARD_TABLE3_COLUMNS.get(key) or key
        columns[key] = {"kind": declared[column["benchmark"]].editor.name, "value": column["value"],
                        "header": "Δ" if column["value"] == "delta" else header}
    return columns


def report_columns(report: dict) -> Dict[str, dict]:
    """The comparison table's columns: the paper's Table 3 layout for the MLLM judge's scores; for a reward model's
    (``--by KIND``) each of its scores per benchmark, then Δ of its overall."""
    if not report.get("by"):
        return table3_columns()
    columns = {}
    for kind, view in report["scores"].items():
        title = EDITOR_BENCHMARKS[kind].title
        for score in view["scores"]:
            columns[f"{kind}_{score}"] = {"kind": kind, "value": score, "header": f"{title} {view['labels'][score]}"}
        columns[f"{kind}_delta"] = {"kind": kind, "value": "delta", "header": "Δ"}
    return columns


def _published_cell(row: dict, key: str, value: str) -> str:
    if key not in row:
        return "—"  # a column the paper does not print
    if value == "delta":
        return "-" if row[key] is None else f"+{row[key]:.2f}"
    return "—" if row[key] is None else f"{row[key]:.2f}"


def _table3_rows(report: dict, columns: Dict[str, dict]) -> List[List[str]]:
    blank = [""] * len(columns)
    rows = []
    for group, entries in report["published"].items():
        rows.append([f"*{group}*", *blank])
        for name, r in entries.items():
            rows.append([name, *(_published_cell(r, key, c["value"]) for key, c in columns.items())])
    rows.append(["*This comparison*", *blank])
    for name in report["runs"]:
        cells = report["table3"][name]
        own = any(c.get("comparable") is False for c in cells.values())
        label = f"{name}{' (baseline)' if name == report['baseline'] else ''}{' †' if own else ''}"
        row = [label]
        for column in columns.values():
            cell = cells.get(column["kind"], {})
            summary = cell.get("summary")
            row.append(_delta_cell(cell) if column["value"] == "delta"
                       else "—" if not summary else "n/c" if summary.get("not_computable")
                       else fmt_ci(summary[column["value"]], 2))
        rows.append(row)
    return rows


def _protocol_caveat(report: dict) -> List[str]:
    """The line under every table of a comparison of runs of different protocols (--allow-protocol-differences)."""
    allowed = ((report.get("protocol") or {}).get("comparison") or {}).get("allowed_differences")
    if not allowed:
        return []
    return [f"> **Runs of different protocols** (--allow-protocol-differences): {', '.join(allowed)} differ from the "
            "first run in settings that decide the numbers (listed at the top); the Δ mixes the editor's effect with "
            "theirs.", ""]


def comparison_markdown(report: dict) -> str:
    """``report.md`` of ``miescore benchmark editors`` (module docstring)."""
    own = [n for n in report["runs"] if any(c.get("comparable") is False for c in report["table3"][n].values())]
    columns = report_columns(report)
    out = ["# Editor comparison (SpatialReward paper, Table 3 layout)", ""]
    if report.get("label"):
        out += [f"> **{report['label']}**", ""]
    if own and not report.get("by"):
        out += [f"> **† {NOT_COMPARABLE.capitalize()}:** {', '.join(own)} were judged with our own prompts.", ""]
    if report.get("by"):
        out += [f"> Scores of the **{report['by']}** reward model as the judge (--by {report['by']}), not the "
                "benchmark's MLLM judge: not comparable with published numbers.", ""]
    out += [f"{len(report['runs'])} runs; Δ against **{report['baseline']}**.", ""]
    for name, selector in report.get("selectors", {}).items():
        out += [f"Reward-guided best of N: **{name}: first sample** is one draw, **{name}: selected** the candidate "
                f"{selector} scored highest, **{name}: {VIEW_NAMES['oracle']}** the candidate the judge scored "
                "highest (the oracle: the best any selector could do); the Δ of each are paired over the same keys.",
                ""]
    out += ["## Table 3 layout", "",
            report_table(["Configuration", *(c["header"] for c in columns.values())], _table3_rows(report, columns)),
            "",
            ("The paper's rows: SpatialReward paper, sec. 5.3, Table 3 (GPT-4.1 judge). " if not report.get("by")
             else "") + "Brackets: bootstrap CIs over keys; p: paired sign-flip permutation test over the keys both "
            "runs judged (n).", "", *_protocol_caveat(report)]
    for kind, by_run in report["per_category"].items():
        benchmark = EDITOR_BENCHMARKS[kind]
        overall_label = report.get("scores", {}).get(kind, {}).get("labels", benchmark.labels)[
            report.get("scores", {}).get(kind, {}).get("overall", benchmark.overall)]
        names = list(by_run)
        cats = sorted({c for values in by_run.values() for c in values})
        base = by_run.get(report["baseline"], {})
        header = [benchmark.category_label, *names, *[f"Δ {n}" for n in names if n != report["baseline"]]]
        rows = [[title_case(c), *[fmt_ci(by_run[n].get(c), 2) for n in names],
                 *[_diff(by_run[n].get(c), base.get(c)) for n in names if n != report["baseline"]]] for c in cats]
        out += [f"## {benchmark.title}: {overall_label} per {benchmark.category_label.lower()}",
                "", report_table(header, rows), "", *_protocol_caveat(report)]
        out += plot_lines(report, f"per_category_{kind}", f"{benchmark.title} per {benchmark.category_label.lower()}")
    for kind, by_run in report["cases"].items():
        benchmark = EDITOR_BENCHMARKS[kind]
        for name, picks in by_run.items():
            out += [f"## {benchmark.title}: largest gains and losses of {name} over {report['baseline']}", "",
                    "Source | baseline | compared run (the paper's Fig. 7 / appendix C.2 view).", ""]
            for case in picks:
                out += [f"**{case['kind'].title()}** `{case['row']}` ({title_case(case['category'])}, "
                        f"{case['delta']:+.2f}): {case['instruction']}", "",
                        f"![{case['kind']} {case['row']}]({case['picture']})", ""]
            if not picks:
                out += ["No key changed.", ""]
    notes = ["Δ = Overall(run) − Overall(baseline), as the paper's Δ column."]
    return "\n".join(out + notes_section(report, notes))


def _diff(x, y) -> str:
    return "—" if x is None or y is None else f"{x - y:+.2f}"


# ------------------------------------------------------------------------------------------------ plots


def _category_bars(cats: list, series: list, width_per_category: float):
    """A figure of grouped bars, one group per category of ``cats`` and in it one bar per ``(label, values, yerr)``
    of ``series``, the legend below; returns ``(figure, axes)``."""
    fig = new_figure(max(6.0, width_per_category * len(cats) + 2.5), 3.6)
    ax = fig.add_subplot()
    x = np.arange(len(cats))
    width = 0.8 / max(1, len(series))
    for k, (label, values, err) in enumerate(series):
        ax.bar(x - 0.4 + width * (k + 0.5), values, width, yerr=err, capsize=2, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels([title_case(c) for c in cats], rotation=35, ha="right", fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    legend_below(fig, ncol=max(1, len(series)))
    return fig, ax


def editor_plots(report: dict, out_dir) -> Dict[str, str]:
    """The per-category overall, one bar per category and language, with its CI where there is one
    (``plots/per_category.png``); the title says which bars have one (a category of fewer than 10 keys has none)."""
    benchmark = EDITOR_BENCHMARKS[report["benchmark"]]
    if not report["results"]:
        return {}
    cats = report["categories"]
    series, drawn, missing = [], 0, 0
    for language, subsets in report["results"].items():
        by_cat = subsets["full"]["by_category"]
        ms = [by_cat.get(c, {}).get(benchmark.overall) or {"value": None, "ci": [None, None]} for c in cats]
        err = error_bars(ms)
        with_bar = 0 if err is None else int((~np.isnan(err[0])).sum())
        drawn += with_bar
        missing += sum(m["value"] is not None for m in ms) - with_bar
        series.append((language.upper(), [plot_value(m) for m in ms], err))
    fig, ax = _category_bars(cats, series, 0.55)
    ax.set_ylim(benchmark.scale[0], benchmark.scale[1])
    ax.set_ylabel(f"{benchmark.labels[benchmark.overall]} ({benchmark.scale[0]:g}–{benchmark.scale[1]:g})")
    fig.suptitle(f"{benchmark.title}: {benchmark.labels[benchmark.overall]} per {benchmark.category_label.lower()} "
                 f"({error_bar_note(report, drawn, missing)})", fontsize=9)
    return {"per_category": save_figure(fig, Path(out_dir), "per_category")}


def comparison_plots(report: dict, out_dir) -> Dict[str, str]:
    """Per benchmark, the overall per category, one bar per run (``plots/per_category_<benchmark>.png``)."""
    paths = {}
    for kind, by_run in report["per_category"].items():
        benchmark = EDITOR_BENCHMARKS[kind]
        cats = sorted({c for values in by_run.values() for c in values})
        fig, ax = _category_bars(cats, [(name, [values.get(c, np.nan) for c in cats], None)
                                        for name, values in by_run.items()], 0.6)
        view = report.get("scores", {}).get(kind, {})
        if not report.get("by"):
            ax.set_ylim(*benchmark.scale)  # a reward model's scale is its own
        label = view.get("labels", benchmark.labels)[view.get("overall", benchmark.overall)]
        ax.set_ylabel(label)
        fig.suptitle(f"{benchmark.title}: {label} per {benchmark.category_label.lower()} and run (no error bars)",
                     fontsize=9)
        paths[f"per_category_{kind}"] = save_figure(fig, Path(out_dir), f"per_category_{kind}")
    return paths
