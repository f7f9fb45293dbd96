"""Several editors compared on GEdit-Bench and ImgEdit-Bench in the SpatialReward paper's Table 3 layout
(``miescore benchmark editors --runs base=DIR tuned=DIR ...``).

Each run is one or two report folders of ``miescore benchmark gedit`` / ``imgedit`` (``NAME=DIR[,DIR]``); the first
run (or ``baseline``) is the base of every Δ. For each run: GEdit-EN SC, PQ and Overall (full set, language ``en``)
and ImgEdit Overall, recomputed from the per-key values the run's ``report.json`` keeps, each with a
percentile-bootstrap CI over keys; each Δ = Overall(run) − Overall(baseline), as the paper's Δ column, with a
bootstrap CI and a two-sided paired sign-flip permutation test over the keys both runs judged (per key the two
runs' values are swapped at random; the statistic is the difference of the unweighted means over categories;
``p = (1 + #{|Δ*| >= |Δ|}) / (1 + permutations)``). Per-category tables follow, then the keys with the largest
gains and losses as source | baseline | run pictures (:mod:`.comparison_grid`; the paper's Fig. 7 / C.2 view). The
paper's own rows (:data:`~modeling_miescore.evaluation.published_results.SPATIALREWARD_TABLE3`) stand above ours.

The runs' reports are checked before anything is computed: a ``report.json`` that is not a report of
``miescore benchmark gedit`` / ``imgedit`` (a list, a ``selection`` without its views), a row without its key,
category or language, a score that is not a number or lies off its judge's scale (GEdit 0-10, ImgEdit 1-5,
MIEScore 0-100, ...), a key listed twice (a row would be paired twice): one line naming the run, the file and
the row. :func:`write_comparison` writes the comparison as one folder, built beside ``--out`` and renamed in
when complete; ``--out`` is apart from every run folder (not one of them, inside one or containing one) and is
new, empty or an earlier comparison, which it replaces.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from ...data.builders.output_folder import AtomicOutputDir
from ...hub.image_io import regular_file_problem
from ...utils.output_paths import check_folder_apart, output_writes
from ...data.errors import BenchmarkInputError
from ..instance_bootstrap import BootstrapSettings
from ..published_results import SPATIALREWARD_TABLE3, SPATIALREWARD_TABLE3_COLUMNS
from ..report import write_report
from ..report_parts import fmt_ci, legend_below, new_figure, notes_section, report_table, save_figure, title_case
from .comparison_grid import draw_case, gain_loss_cases
from .editor_report import NOT_COMPARABLE
from .protocols import EDITOR_BENCHMARKS, check_like_protocols, comparison_protocol
from .scores import MetricNotes, summarize
from .judge_run import REWARD_JUDGES, reward_view

__all__ = ["VIEW_NAMES", "compare_editors", "comparison_markdown", "comparison_plots", "parse_runs", "report_columns",
           "sign_flip_p_value", "table3_columns", "write_comparison"]

MAX_REPORT_BYTES = 1 << 30  # a run's report.json is read whole



def parse_runs(items: Sequence[str]) -> Dict[str, List[Path]]:
    """``["base=DIR", "tuned=DIR1,DIR2"]`` -> ``{name: [report folders]}`` (names unique, in order)."""
    runs: Dict[str, List[Path]] = {}
    for item in items:
        name, sep, folders = item.partition("=")
        if not sep or not name or not folders:
            raise BenchmarkInputError(f"--runs '{item}' is not NAME=DIR[,DIR] (a report folder of 'miescore benchmark "
                                      "gedit' and/or 'imgedit')")
        if name in runs:
            raise BenchmarkInputError(f"--runs names {name!r} twice; give each run once (NAME=GEDIT_DIR,IMGEDIT_DIR)")
        runs[name] = [Path(f).expanduser() for f in folders.split(",") if f]
    return runs


def _read_report(name: str, folder: Path) -> dict:
    path = folder / "report.json"
    problem = regular_file_problem(path, "report.json")
    if problem is None and os.path.getsize(path) > MAX_REPORT_BYTES:
        problem = f"'{path}' is above {MAX_REPORT_BYTES:,} bytes"
    try:
        report = json.loads(path.read_text(encoding="utf-8")) if problem is None else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        problem = str(err)[:200]
    if problem is not None:
        raise BenchmarkInputError(f"--runs {name}: '{folder}' has no readable report.json ({problem}); pass the "
                                  "--out folder of 'miescore benchmark gedit' or 'imgedit'")
    kind = report.get("benchmark") if isinstance(report, dict) else None
    if kind not in EDITOR_BENCHMARKS or not isinstance(report.get("per_row"), list):
        what = f"a {kind!r} report" if isinstance(report, dict) else f"a JSON {type(report).__name__}"
        raise BenchmarkInputError(f"--runs {name}: '{folder}/report.json' is {what}, not a report of 'miescore "
                                  "benchmark gedit' or 'imgedit'")
    expected = report.get("expected_categories") or {}
    if not (_strings(report.get("categories") or []) and isinstance(expected, dict)
            and all(_strings(v) for v in expected.values()) and isinstance(report.get("label"), (str, type(None)))):
        raise BenchmarkInputError(f"--runs {name}: '{folder}/report.json' has categories, expected_categories or a "
                                  "label of the wrong type; the report was edited or damaged: rerun 'miescore "
                                  "benchmark' for this run")
    return report


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _load(runs: Dict[str, List[Path]]) -> Dict[str, Dict[str, tuple]]:
    """``{name: {benchmark: (report, folder)}}`` read from each folder's ``report.json``."""
    loaded: Dict[str, Dict[str, tuple]] = {}
    for name, folders in runs.items():
        loaded[name] = {}
        for folder in folders:
            report = _read_report(name, folder)
            kind = report["benchmark"]
            if kind in loaded[name]:
                raise BenchmarkInputError(f"--runs {name}: two {kind} reports ({loaded[name][kind][1]}, {folder})")
            loaded[name][kind] = (report, folder)
    return loaded


def _row_problem(row, protocol, bounds: Dict[str, tuple], categories: list) -> Optional[str]:
    """Why one row of a report's ``per_row`` cannot be compared, or None (``categories``: the report's, if any)."""
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not an object"
    for key in ("row", "category", "language"):
        if not isinstance(row.get(key), str):
            return f"has no {key} (a string)"
    if categories and row["category"] not in categories:
        return f"has the category {row['category']!r}, which its report's categories do not list"
    if not isinstance(row.get("sources", []), list) or not all(
            isinstance(s, str) and not os.path.isabs(s) and not os.path.normpath(s).startswith("..")
            for s in row.get("sources", [])):
        return "has sources that are not paths inside its report folder"
    if not isinstance(row.get("edited"), (str, type(None))):
        return "has an edited path that is not a string"
    for score in protocol.scores:
        value, (low, high) = row.get(score), bounds[score]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"has {score} = {json.dumps(value)[:40]}, not a finite number"
        if not low <= value <= high:
            return f"has {score} = {value:g}, off the {low:g}-{high:g} scale of its judge"
    return None


def _checked_rows(rows, where: str, protocol, bounds: Dict[str, tuple], categories: list) -> list:
    """``rows`` (a report's ``per_row``) when every row is usable and no key is listed twice (it would be paired
    twice); else one :class:`BenchmarkInputError` naming ``where`` and the row."""
    if not isinstance(rows, list):
        raise BenchmarkInputError(f"{where}: per_row is a JSON {type(rows).__name__}, not a list; rerun the benchmark")
    seen = set()
    for position, row in enumerate(rows, 1):
        problem = _row_problem(row, protocol, bounds, categories)
        if problem is None and row["row"] in seen:
            problem = "lists a key listed before (each key is one row; pairing it twice would count it twice)"
        if problem is not None:
            key = f" ({row['row']!r})" if isinstance(row, dict) and isinstance(row.get("row"), str) else ""
            raise BenchmarkInputError(f"{where}: row {position}{key} {problem}; the report.json was edited or damaged: "
                                      "rerun 'miescore benchmark' for this run")
        seen.add(row["row"])
    return rows


@dataclass
class _Entry:
    """One compared run on one benchmark: its per-key values (``frame``, the comparison language), the protocol
    they follow (the benchmark's, or a reward model's view of it), the report it came from and its folder."""

    frame: object
    benchmark: object
    report: dict
    folder: Path

    @property
    def expected(self):
        return (self.report.get("expected_categories") or {}).get(EDITOR_BENCHMARKS[self.report["benchmark"]]
                                                                   .comparison_language)


def _frame(per_row: list, folder: Path, kind: str):
    import pandas as pd

    frame = pd.DataFrame([{"instruction": "", "edited": None, "sources": [], **row} for row in per_row])
    if frame.empty:
        return frame
    frame = frame[frame["language"] == EDITOR_BENCHMARKS[kind].comparison_language].copy()
    frame["run_dir"] = str(folder)
    return frame


def _source(report: dict, kind: str, by: Optional[str], name: str):
    """``(per_row, selection, protocol, bounds)`` of a report as ``by`` reads it: the MLLM judge's (None) or the
    reward model of that kind (``--by miescore``); ``bounds``: each score's ``(low, high)``."""
    benchmark = EDITOR_BENCHMARKS[kind]
    if by is None:
        if not report.get("results"):
            raise BenchmarkInputError(f"--runs {name}: the {kind} report has no MLLM judge's scores (reward models "
                                      "only); compare them with --by miescore or --by spatialreward")
        return report["per_row"], report.get("selection"), benchmark, {k: benchmark.scale for k in benchmark.scores}
    views = report.get("reward_judges")
    found = [v for v in views.values() if isinstance(v, dict) and v.get("kind") == by] \
        if isinstance(views, dict) else []
    if not found:
        raise BenchmarkInputError(f"--runs {name}: the {kind} report has no {by} judge; run 'miescore benchmark "
                                  f"{kind}' with --judge {by}:CKPT")
    judge = REWARD_JUDGES[by]
    return found[0].get("per_row", []), found[0].get("selection"), reward_view(benchmark, judge), judge.bounds


VIEW_NAMES = {"first": "first sample", "selected": "selected", "oracle": "judge's best of N"}


def _selection_views(selection, where: str) -> Dict[str, list]:
    """``{view: per_row}`` of a report's ``selection`` (a run of ``miescore edit --select`` edits)."""
    views = selection.get("views") if isinstance(selection, dict) else None
    if not (isinstance(selection.get("selector") if isinstance(selection, dict) else None, str)
            and isinstance(views, dict) and all(isinstance(views.get(v), dict) for v in VIEW_NAMES)):
        raise BenchmarkInputError(f"{where}: its selection has no selector or not the views "
                                  f"{', '.join(VIEW_NAMES)} (each with per_row); rerun 'miescore benchmark' for this "
                                  "run")
    return {view: views[view].get("per_row") for view in VIEW_NAMES}


def _entries(loaded: Dict[str, Dict[str, tuple]],
             by: Optional[str]) -> tuple[Dict[str, Dict[str, _Entry]], Dict[str, str]]:
    """``({run name: {benchmark: _Entry}}, {run name: selector})``; a run whose edits were selected by a reward
    (``miescore edit --select``) becomes three: its first sample, the selected one and the judge's own best of N
    (the oracle), and its selector is listed. Every row is checked first (:func:`_checked_rows`)."""
    entries: Dict[str, Dict[str, _Entry]] = {}
    selectors: Dict[str, str] = {}
    for name, kinds in loaded.items():
        for kind, (report, folder) in kinds.items():
            per_row, selection, protocol, bounds = _source(report, kind, by, name)
            where = f"--runs {name}: '{folder / 'report.json'}'"
            if not selection:
                rows = _checked_rows(per_row, where, protocol, bounds, report.get("categories"))
                entries.setdefault(name, {})[kind] = _Entry(_frame(rows, folder, kind), protocol, report, folder)
                continue
            views = _selection_views(selection, where)
            selectors[name] = selection["selector"]
            for view, rows in views.items():
                rows = _checked_rows(rows, f"{where} ({view} view)", protocol, bounds, report.get("categories"))
                entries.setdefault(f"{name}: {VIEW_NAMES[view]}", {})[kind] = _Entry(
                    _frame(rows, folder, kind), protocol, report, folder)
    return entries, selectors


def _macro_diff(codes: np.ndarray, n_codes: int, diffs: np.ndarray) -> np.ndarray:
    """Unweighted mean over categories of the per-category mean of ``diffs`` (rows: resamples / permutations)."""
    indicator = np.zeros((len(codes), n_codes))
    indicator[np.arange(len(codes)), codes] = 1.0
    counts = indicator.sum(axis=0)
    present = counts > 0
    per_category = (np.atleast_2d(diffs) @ indicator)[:, present] / counts[present]
    return per_category.mean(axis=1)


def sign_flip_p_value(codes: np.ndarray, diffs: np.ndarray, permutations: int = 9999, seed: int = 0) -> float:
    """Two-sided paired permutation test of the category-macro mean of per-key differences ``diffs`` (module
    docstring); ``codes``: each key's category index."""
    if len(diffs) == 0:
        return float("nan")
    n_codes = int(codes.max()) + 1
    observed = abs(_macro_diff(codes, n_codes, diffs)[0])
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(permutations, len(diffs)))
    null = np.abs(_macro_diff(codes, n_codes, signs * diffs))
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + permutations))


def _delta(base, run, benchmark, bootstrap: BootstrapSettings) -> dict:
    """Δ of the overall between two per-key frames: the printed difference, and over the keys both judged a
    bootstrap CI and the sign-flip p-value."""
    key = benchmark.overall
    both = base[["row", "category", key]].merge(run[["row", key]], on="row", suffixes=("_base", "_run"))
    order = sorted(set(both["category"]))
    codes = np.array([order.index(c) for c in both["category"]], dtype=int)
    diffs = (both[f"{key}_run"] - both[f"{key}_base"]).to_numpy(float)
    out = {"n_paired": int(len(both))}
    if len(both) == 0:
        return {**out, "delta": {"value": None, "ci": [None, None]}, "p_value": None}

    def paired(idx):
        return float(_macro_diff(codes[idx], len(order), diffs[idx])[0])

    out["delta_paired"] = bootstrap.interval(paired, np.arange(len(both)))
    out["p_value"] = sign_flip_p_value(codes, diffs, seed=bootstrap.seed)
    return out


def compare_editors(runs: Dict[str, List[Path]], out_dir, *, baseline: Optional[str] = None,
                    bootstrap: Optional[BootstrapSettings] = None, grid_size: int = 4, by: Optional[str] = None,
                    allow_protocol_differences: bool = False) -> dict:
    """The comparison report dict (module docstring); pictures of the largest gains and losses go to ``out_dir``
    (an existing folder: :func:`write_comparison` makes it, apart from the runs). ``by``: compare the reward model
    of that kind's scores (``miescore``, ``spatialreward``) instead of the MLLM judge's. The runs' reports' labels
    (``--label``, e.g. random weights) carry over to the comparison. Runs whose protocols differ in anything but
    the editor are refused (every differing setting listed, run by run) unless ``allow_protocol_differences``; then
    every table of the report says so."""
    bootstrap = bootstrap or BootstrapSettings(n=0)
    loaded = _load(runs)
    protocols = {f"{name} {kind}": report.get("protocol") for name, kinds in loaded.items()
                 for kind, (report, _) in kinds.items()}
    allowed = check_like_protocols(protocols, allow_protocol_differences)
    entries, selectors = _entries(loaded, by)
    if len(entries) < 2:
        raise BenchmarkInputError("--runs needs at least two runs (a baseline and one to compare), or one run of "
                                  "'miescore edit --select' edits (its first sample, selected and best of N)")
    baseline = baseline or next(iter(entries))
    if baseline not in entries:
        raise BenchmarkInputError(f"--baseline {baseline!r} is not one of the runs ({', '.join(entries)})")
    with MetricNotes() as notes:
        report = _compare(entries, baseline, bootstrap, grid_size, out_dir)
    labels = sorted({report.get("label") for kinds in loaded.values() for report, _ in kinds.values()} - {None})
    return {**report, "by": by, "selectors": selectors, "label": "; ".join(labels) or None,
            "published": SPATIALREWARD_TABLE3 if by is None else {}, "notes": notes.lines,
            "run": {"created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "inputs": {"runs": {name: [str(Path(f).resolve()) for f in folders]
                                        for name, folders in runs.items()},
                               "baseline": baseline, "by": by, "grid_size": grid_size,
                               "allow_protocol_differences": allow_protocol_differences}},
            "protocol": comparison_protocol(protocols, by=by, bootstrap=bootstrap, allowed=allowed),
            "meta": {"bootstrap": bootstrap.describe("keys")}}


def _replaceable(out: Path) -> bool:
    """Whether ``out`` exists; refuses one that holds something other than an earlier comparison."""
    if not (out.exists() or out.is_symlink()):
        return False
    if not out.is_dir():
        raise BenchmarkInputError(f"--out '{out}' is a file, not a folder; pass a folder")
    report = out / "report.json"
    try:
        earlier = (regular_file_problem(report) is None and os.path.getsize(report) <= MAX_REPORT_BYTES
                   and json.loads(report.read_text(encoding="utf-8")).get("benchmark") == "editors")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, AttributeError):
        earlier = False
    if any(out.iterdir()) and not earlier:
        raise BenchmarkInputError(f"--out '{out}' holds files that are not a comparison of 'miescore benchmark "
                                  "editors'; give a new or empty folder (a rerun replaces only an earlier comparison)")
    return True


def write_comparison(runs: Dict[str, List[Path]], out, *, label: Optional[str] = None, plots: bool = True,
                     **options) -> dict:
    """:func:`compare_editors` (``options``: its keywords), its plots and ``report.json`` / ``.md`` / ``.html``,
    written to ``out`` as one folder: built in a temporary folder beside it and renamed in when complete (an
    earlier comparison there is replaced; a full disk leaves ``out`` as it was and raises ``OutputWriteError``).
    ``out`` must be apart from every run folder. Returns the report."""
    out = Path(out).expanduser()
    for name, folders in runs.items():
        for folder in folders:
            check_folder_apart(out, {f"--runs {name}": folder}, out_label="--out")
    replace = _replaceable(out)
    with output_writes(f"the comparison '{out}'"), AtomicOutputDir(out, overwrite=replace) as folder:
        report = compare_editors(runs, folder, **options)
        report["label"] = label or report.get("label")  # the runs' labels carry over (random weights)
        report["plots"] = comparison_plots(report, folder) if plots else {}
        write_report(folder, report)
    return report


def _compare(entries: Dict[str, Dict[str, _Entry]], baseline: str, bootstrap: BootstrapSettings, grid_size: int,
             out_dir) -> dict:
    """Every cell of the comparison: summaries, Δ with paired CIs and p-values, per-category values, pictures."""
    table: Dict[str, dict] = {}
    per_category: Dict[str, dict] = {}
    cases: Dict[str, dict] = {}
    summaries = {(name, kind): (summarize(e.frame, e.benchmark, bootstrap, e.report.get("categories"), e.expected)
                                if not e.frame.empty else None)
                 for name, kinds in entries.items() for kind, e in kinds.items()}
    for name, kinds in entries.items():
        table[name] = {}
        for kind, entry in kinds.items():
            summary = summaries[name, kind]
            cell = {"summary": summary, "comparable": entry.report.get("comparable"), "folder": str(entry.folder)}
            base = entries[baseline].get(kind)
            base_summary = summaries.get((baseline, kind))
            if name != baseline and base is not None and summary is not None and base_summary is not None:
                cell["delta"] = _printed_delta(summary, base_summary, entry.benchmark.overall)
                cell["delta"].update(_delta(base.frame, entry.frame, entry.benchmark, bootstrap))
                cases.setdefault(kind, {})[name] = _pictures(base.frame, entry.frame, entry.benchmark, (baseline, name),
                                                            kind, grid_size, out_dir)
            table[name][kind] = cell
            if summary is not None:
                per_category.setdefault(kind, {})[name] = {c: v[entry.benchmark.overall]["value"]
                                                           for c, v in summary["by_category"].items()}
    return {"benchmark": "editors", "baseline": baseline, "runs": list(entries), "table3": table,
            "per_category": per_category, "cases": cases,
            "scores": {kind: {"scores": list(e.benchmark.scores), "labels": e.benchmark.labels,
                              "overall": e.benchmark.overall}
                       for kinds in entries.values() for kind, e in kinds.items()}}


def _printed_delta(summary: dict, base_summary: dict, overall: str) -> dict:
    """The printed Δ of the overall (None, and why, when either side's overall is not computable)."""
    run, base = summary[overall]["value"], base_summary[overall]["value"]
    if run is None or base is None:
        why = summary.get("not_computable") or base_summary.get("not_computable") or "no overall"
        return {"value": None, "not_computable": why}
    return {"value": run - base}


def _pictures(base_frame, frame, benchmark, names: tuple, kind: str, grid_size: int, out_dir) -> list:
    picks = gain_loss_cases(base_frame, frame, benchmark.overall, grid_size)
    label = benchmark.labels[benchmark.overall]
    for case in picks:
        rank = sum(c["kind"] == case["kind"] for c in picks[:picks.index(case) + 1])
        case["picture"] = draw_case(case, names, label, out_dir, f"{kind}-{_safe(names[1])}-{case['kind']}-{rank:02d}")
    return picks


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60]


# ------------------------------------------------------------------------------------------------ Markdown


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
    from ..converted_benchmarks import declared_benchmarks, report_columns  # deferred: name clash

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
                "highest (the oracle: the best any selector could do); the Δ of each are paired over the same keys.", ""]
    out += ["## Table 3 layout", "",
            report_table(["Configuration", *(c["header"] for c in columns.values())], _table3_rows(report, columns)), "",
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
        rows = [[title_case(c), *[_num(by_run[n].get(c)) for n in names],
                 *[_diff(by_run[n].get(c), base.get(c)) for n in names if n != report["baseline"]]] for c in cats]
        out += [f"## {benchmark.title}: {overall_label} per {benchmark.category_label.lower()}",
                "", report_table(header, rows), "", *_protocol_caveat(report)]
        plot = report.get("plots", {}).get(f"per_category_{kind}")
        out += [f"![{benchmark.title} per {benchmark.category_label.lower()}]({plot})", ""] if plot else []
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


def _num(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def _diff(x, y) -> str:
    return "—" if x is None or y is None else f"{x - y:+.2f}"


def comparison_plots(report: dict, out_dir) -> Dict[str, str]:
    """Per benchmark, the overall per category, one bar per run (``plots/per_category_<benchmark>.png``)."""
    paths = {}
    for kind, by_run in report["per_category"].items():
        benchmark = EDITOR_BENCHMARKS[kind]
        cats = sorted({c for values in by_run.values() for c in values})
        fig = new_figure(max(6.0, 0.6 * len(cats) + 2.5), 3.6)
        ax = fig.add_subplot()
        x = np.arange(len(cats))
        width = 0.8 / max(1, len(by_run))
        for k, (name, values) in enumerate(by_run.items()):
            ax.bar(x - 0.4 + width * (k + 0.5), [values.get(c, np.nan) for c in cats], width, label=name)
        ax.set_xticks(x)
        ax.set_xticklabels([title_case(c) for c in cats], rotation=35, ha="right", fontsize=7)
        view = report.get("scores", {}).get(kind, {})
        if not report.get("by"):
            ax.set_ylim(*benchmark.scale)  # a reward model's scale is its own
        ax.set_ylabel(view.get("labels", benchmark.labels)[view.get("overall", benchmark.overall)])
        ax.grid(axis="y", alpha=0.3)
        legend_below(fig, ncol=max(1, len(by_run)))
        fig.suptitle(f"{benchmark.title}: {view.get('labels', benchmark.labels)[view.get('overall', benchmark.overall)]}"
                     f" per {benchmark.category_label.lower()} and run (no error bars)", fontsize=9)
        paths[f"per_category_{kind}"] = save_figure(fig, Path(out_dir), f"per_category_{kind}")
    return paths
