"""Several editors compared on GEdit-Bench and ImgEdit-Bench in the SpatialReward paper's Table 3 layout
(``miescore benchmark editors --runs base=DIR tuned=DIR ...``).

Each Δ = Overall(run) − Overall(baseline), as the paper's Δ column, with a bootstrap CI and a two-sided paired
sign-flip permutation test over the keys both runs judged (per key the two runs' values are swapped at random; the
statistic is the difference of the unweighted means over categories; ``p = (1 + #{|Δ*| >= |Δ|}) / (1 +
permutations)``). The keys with the largest gains and losses are drawn as source | baseline | run pictures (the
paper's Fig. 7 / C.2 view).

The runs' reports are checked before anything is computed (one line naming the run, the file and the row). The
comparison is built beside ``--out`` and renamed in when complete; ``--out`` is apart from every run folder and is
new, empty or an earlier comparison, which it replaces.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from ...data.builders.output_folder import AtomicOutputDir
from ...data.errors import BenchmarkInputError
from ...hub.errors import MIEScoreInputError
from ...hub.image_io import load_image, regular_file_problem
from ...utils.atomic_files import atomic_write
from ...utils.output_paths import check_folder_apart, output_writes
from ..instance_bootstrap import BootstrapSettings
from ..published_results import SPATIALREWARD_TABLE3
from ..report import write_report
from .editor_report import comparison_plots
from .judge_run import REWARD_JUDGES, reward_view
from .protocols import EDITOR_BENCHMARKS, check_like_protocols, comparison_protocol
from .scores import VIEW_NAMES, MetricNotes, summarize

__all__ = ["compare_editors", "draw_case", "gain_loss_cases", "parse_runs", "sign_flip_p_value", "write_comparison"]

MAX_REPORT_BYTES = 1 << 30  # a run's report.json is read whole
PANEL_HEIGHT = 224  # a picture's panels (source | baseline | compared run)
_LABEL = 34


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


def _report_json(folder: Path) -> tuple[object, Optional[str]]:
    """``(folder/report.json read, None)`` or ``(None, why it cannot be read)``; a link, a FIFO or a file above
    :data:`MAX_REPORT_BYTES` is refused unread."""
    path = folder / "report.json"
    problem = regular_file_problem(path, "report.json")
    if problem is None and os.path.getsize(path) > MAX_REPORT_BYTES:
        problem = f"'{path}' is above {MAX_REPORT_BYTES:,} bytes"
    try:
        return (None, problem) if problem else (json.loads(path.read_text(encoding="utf-8")), None)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        return None, str(err)[:200]


def _read_report(name: str, folder: Path) -> dict:
    report, problem = _report_json(folder)
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
    report, _ = _report_json(out)
    earlier = isinstance(report, dict) and report.get("benchmark") == "editors"
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
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60]


def gain_loss_cases(base_rows, run_rows, overall: str, k: int) -> List[Dict]:
    """The ``k`` largest gains and the ``k`` largest losses of ``run_rows`` over ``base_rows`` (per-row frames with
    ``row``, ``category``, ``instruction``, ``edited``, ``sources``, ``run_dir`` and the ``overall`` score), as dicts
    ``{"kind": "gain"|"loss", "row", "category", "instruction", "base", "run", "delta", "source", "base_edited",
    "run_edited"}``."""
    both = base_rows.merge(run_rows, on="row", suffixes=("_base", "_run"))
    if both.empty or k <= 0:
        return []
    both["delta"] = both[f"{overall}_run"] - both[f"{overall}_base"]
    gains = both[both["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(k)
    losses = both[both["delta"] < 0].sort_values("delta", kind="stable").head(k)
    cases = []
    for kind, part in (("gain", gains), ("loss", losses)):
        for _, r in part.iterrows():
            sources = r["sources_base"] or []
            cases.append({"kind": kind, "row": r["row"], "category": r["category_base"],
                          "instruction": r["instruction_base"], "base": float(r[f"{overall}_base"]),
                          "run": float(r[f"{overall}_run"]), "delta": float(r["delta"]),
                          "source": str(Path(r["run_dir_base"]) / sources[0]) if sources else None,
                          "base_edited": r["edited_base"], "run_edited": r["edited_run"]})
    return cases


def _panel(path, label: str):
    """One labelled panel; the image is read as every image of the package is (regular files only, a size and a
    pixel bound: a report's path to a FIFO or a huge file cannot hang or exhaust the comparison)."""
    from PIL import Image, ImageDraw

    try:
        image = load_image(path)
    except (MIEScoreInputError, OSError, ValueError, TypeError):
        image = Image.new("RGB", (PANEL_HEIGHT, PANEL_HEIGHT), (235, 235, 235))
        label += " (image not found)"
    width = max(1, round(image.width * PANEL_HEIGHT / max(1, image.height)))
    image = image.resize((min(width, 3 * PANEL_HEIGHT), PANEL_HEIGHT))
    panel = Image.new("RGB", (image.width, PANEL_HEIGHT + _LABEL), "white")
    panel.paste(image, (0, _LABEL))
    ImageDraw.Draw(panel).text((4, 4), label, fill=(20, 20, 20))
    return panel


def draw_case(case: Dict, names: tuple[str, str], score_label: str, out_dir, stem: str) -> str:
    """One PNG ``grid/<stem>.png`` (source | baseline | compared run); returns its path relative to ``out_dir``."""
    from PIL import Image

    base_name, run_name = names
    panels = [_panel(case["source"], "source"),
              _panel(case["base_edited"], f"{base_name}: {score_label} {case['base']:.2f}"),
              _panel(case["run_edited"], f"{run_name}: {score_label} {case['run']:.2f} ({case['delta']:+.2f})")]
    gap = 8
    canvas = Image.new("RGB", (sum(p.width for p in panels) + gap * (len(panels) - 1), panels[0].height), "white")
    x = 0
    for panel in panels:
        canvas.paste(panel, (x, 0))
        x += panel.width + gap
    rel = f"grid/{stem}.png"
    with atomic_write(Path(out_dir) / rel, "wb") as handle:
        canvas.save(handle, format="PNG")
    return rel
