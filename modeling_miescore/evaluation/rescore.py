"""``miescore benchmark rescore REPORT_DIR``: every aggregate of a report (an editor-benchmark run or a comparison)
recomputed from what is on disk, without calling a judge, through the code that made the report, and each number
compared with the report's bit for bit. The protocol's fingerprint is checked against its settings too (a report
edited by hand no longer matches). Nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from ..data.errors import BenchmarkInputError
from .instance_bootstrap import BootstrapSettings
from .protocol import fingerprint, flatten
from .report import as_json
from .editor_benchmarks.judge_run import parse_reward_judge, read_records
from .editor_benchmarks.protocols import dataset_sha256, editor_benchmark

__all__ = ["COMPARED", "compare_numbers", "rescore_report"]

# the report sections rescore recomputes, per report kind (editor runs: every other kind of editor benchmark)
COMPARED = {"editors": ("table3", "per_category", "cases", "selectors", "runs", "baseline"),
            "run": ("results", "per_row", "counts", "reward_judges", "selection", "flagged", "not_judged",
                    "missing_edits", "categories", "expected_categories")}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def compare_numbers(stored: dict, recomputed: dict, sections) -> tuple[int, list[str]]:
    """``(numbers checked, ["path: report X, recomputed Y"])`` over the numbers of ``sections`` of two reports (as
    JSON holds them): equal bit for bit means the same type (an int is not a float) and the same value; a number
    on one side only (absent or null on the other) is a mismatch too. Text (paths, names) is not compared."""
    old = flatten({k: stored.get(k) for k in sections}, lists=True)
    new = flatten(as_json({k: recomputed.get(k) for k in sections}), lists=True)
    paths = sorted(p for p in set(old) | set(new) if _is_number(old.get(p)) or _is_number(new.get(p)))
    mismatches = [f"{path}: report {old.get(path, 'absent')!r}, recomputed {new.get(path, 'absent')!r}"
                  for path in paths if not (type(old.get(path)) is type(new.get(path)) and old[path] == new[path])]
    return len(paths), mismatches


def _read(folder: Path) -> dict:
    try:
        report = json.loads((folder / "report.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise BenchmarkInputError(f"'{folder}' has no readable report.json ({type(err).__name__}); pass the --out "
                                  "folder of 'miescore benchmark gedit', 'imgedit' or 'editors'") from None
    if not isinstance(report, dict) or not isinstance(report.get("protocol"), dict) or \
            not isinstance((report.get("run") or {}).get("inputs"), dict):
        raise BenchmarkInputError(f"'{folder}/report.json' records no protocol and inputs (a report of another "
                                  "command or of an earlier version); rescore reads reports of 'miescore benchmark "
                                  "gedit', 'imgedit' and 'editors'")
    return report


def _bootstrap(report: dict) -> BootstrapSettings:
    meta = (report.get("meta") or {}).get("bootstrap") or {}
    return BootstrapSettings(n=int(meta.get("n", 0)), seed=int(meta.get("seed", 0)),
                             level=float(meta.get("level", 0.95)), progress=False)


def _rescore_run(folder: Path, report: dict) -> dict:
    # deferred: loads httpx
    from .editor_benchmarks.editor_run import EditorRunOptions, RunContext, aggregate_run, load_prompts

    protocol, inputs = report["protocol"], report["run"]["inputs"]
    benchmark = dataclasses.replace(editor_benchmark(report["benchmark"]),
                                    round_to=protocol["aggregation"]["rounding"])
    if dataset_sha256(inputs["dataset"]) != protocol["dataset"]["data_sha256"]:
        raise BenchmarkInputError(f"the dataset '{inputs['dataset']}' is not the one the report was made from (its "
                                  "data files hash differently, or it is gone); rescore needs the same dataset")
    context = RunContext.open(benchmark, inputs["dataset"], inputs["edits"], inputs["languages"] or None,
                              inputs["categories"] or None, [parse_reward_judge(t) for t in inputs["reward_judges"]])
    context.sources = {r["row"]: r["sources"]
                       for r in read_records(folder / "inputs" / "judge_inputs.jsonl").values()}
    judge_ran = report.get("comparable") is not None
    prompts = load_prompts(benchmark, inputs["prompts"], context.selected["category"]) if judge_ran else None
    options = EditorRunOptions(prompts_path=inputs["prompts"], best_of_n=inputs["best_of_n"],
                               bootstrap=_bootstrap(report), progress=False, plots=False)
    return aggregate_run(benchmark, context, folder, options, report["run"]["judge"] if judge_ran else None, None,
                         prompts)


def _rescore_comparison(report: dict) -> dict:
    from .editor_benchmarks.editor_comparison import compare_editors  # deferred: loads httpcore, httpx

    inputs = report["run"]["inputs"]
    runs = {name: [Path(f) for f in folders] for name, folders in inputs["runs"].items()}
    with tempfile.TemporaryDirectory(prefix="miescore-rescore-") as scratch:
        return compare_editors(runs, Path(scratch), baseline=inputs["baseline"], bootstrap=_bootstrap(report),
                               grid_size=inputs["grid_size"], by=inputs["by"],
                               allow_protocol_differences=inputs["allow_protocol_differences"])


def rescore_report(folder) -> tuple[int, list[str]]:
    """Recompute the report in ``folder`` (module docstring): ``(numbers checked, mismatches)``."""
    folder = Path(folder).expanduser()
    report = _read(folder)
    protocol = report["protocol"]
    mismatches = [] if fingerprint(protocol) == protocol.get("fingerprint") else [
        f"protocol.fingerprint: report {protocol.get('fingerprint')!r}, recomputed from its settings "
        f"{fingerprint(protocol)!r}"]
    if report.get("benchmark") == "editors":
        recomputed, sections = _rescore_comparison(report), COMPARED["editors"]
    else:
        recomputed, sections = _rescore_run(folder, report), COMPARED["run"]
    checked, differ = compare_numbers(report, recomputed, sections)
    return checked, mismatches + differ
