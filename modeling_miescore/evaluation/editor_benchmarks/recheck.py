"""``--recheck N`` of ``miescore benchmark gedit`` / ``imgedit``: the judge's drift since the run's judgements were
made. A fixed random sample of N already-judged edits (drawn with ``--seed``, the same N and seed draw the same
edits) is judged again through a call engine with no answer cache, and each new judgement is compared with the
one on disk (``judgements.jsonl``, never changed): per score the mean change (new − old) with a bootstrap CI over
the edits, the largest change, and every edit whose scores changed. An answer that could not be read on the
re-check is flagged and counted, never a number. Run it before comparing with a number judged months ago: zero
drift means the judge still answers as it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np

from ..instance_bootstrap import with_ci
from ..metrics.bootstrap import bootstrap_ci
from ..report_parts import fmt_ci, report_table
from .judge_run import read_records
from ...scoring.jsonl_scoring import record_to_sample

__all__ = ["recheck_judgements", "recheck_line", "recheck_markdown"]

_LISTED = 20  # changed edits shown in report.md (all of them in report.json)


def _draw(records: Dict[str, dict], n: int, seed: int) -> List[str]:
    judged = sorted(key for key, record in records.items() if not record.get("failed"))
    picked = np.random.default_rng(seed).choice(len(judged), size=min(n, len(judged)), replace=False)
    return [judged[i] for i in sorted(picked)]


def _samples(inputs: Path, ids: List[str]):
    lines = read_records(inputs)
    return [record_to_sample(lines[key], inputs.parent).load(where="sample") for key in ids]


def recheck_judgements(benchmark, calls, spec, inputs: Path, output: Path, info: Dict[str, dict], prompts, *,
                       name: str, settings, n: int, bootstrap) -> dict:
    """Re-judge ``n`` judged edits of ``output`` (module docstring); the report's ``recheck`` section."""
    from ...judges.call_engine import CallEngine  # deferred: loads httpcore, httpx

    records = read_records(output)
    ids = _draw(records, n, bootstrap.seed)
    engine = CallEngine(calls.engine(spec).backend, cache=None, usage=calls.usage)  # the answer cache bypassed
    judge = benchmark.judge_class()(engine, prompts, name=name, info=info, settings=settings)
    fresh = judge.score_batch(_samples(inputs, ids)) if ids else []
    changes, changed, flagged = {k: [] for k in benchmark.scores}, [], []
    for key, new in zip(ids, fresh):
        if not isinstance(new, dict) or new.get("failed"):
            flagged.append({"id": key, "issue": str(new) if not isinstance(new, dict) else ", ".join(new["issues"])})
            continue
        deltas = {k: float(new[k]) - float(records[key][k]) for k in benchmark.scores}
        for k, d in deltas.items():
            changes[k].append(d)
        if any(d != 0 for d in deltas.values()):
            changed.append({"id": key, "old": {k: records[key][k] for k in benchmark.scores},
                            "new": {k: new[k] for k in benchmark.scores}})
    return {"requested": n, "rechecked": len(ids), "compared": len(ids) - len(flagged), "seed": bootstrap.seed,
            "drift": {k: _drift(np.array(v, dtype=float), bootstrap) for k, v in changes.items()},
            "changed": changed, "flagged": flagged}


def _drift(values: np.ndarray, bootstrap) -> dict:
    if len(values) == 0:
        return {"mean_change": {"value": None, "ci": [None, None]}, "largest_change": None}

    def mean(idx):
        return float(values[idx].mean())

    idx = np.arange(len(values))
    cell = (bootstrap_ci(mean, idx, n=bootstrap.n, seed=bootstrap.seed, level=bootstrap.level) if bootstrap.n
            else mean(idx))
    largest = values[np.argmax(np.abs(values))]
    return {"mean_change": with_ci(cell), "largest_change": float(largest)}


def recheck_markdown(report: dict, labels: dict) -> List[str]:
    """The report's "Judge drift" section (none without ``--recheck``)."""
    check = report.get("recheck")
    if not check:
        return []
    rows = [[labels.get(k, k), fmt_ci(v["mean_change"], 3),
             "—" if v["largest_change"] is None else f"{v['largest_change']:+.3f}"] for k, v in check["drift"].items()]
    shown = ", ".join(f"`{c['id']}`" for c in check["changed"][:_LISTED])
    more = f" … and {len(check['changed']) - _LISTED} more (report.json)" if len(check["changed"]) > _LISTED else ""
    return [f"## Judge drift (--recheck {check['requested']})", "",
            f"{check['rechecked']} judged edits drawn at random (seed {check['seed']}) were judged again without the "
            f"answer cache; {check['compared']} compared with their judgements on disk, {len(check['flagged'])} "
            f"answers flagged on the re-check, {len(check['changed'])} edits changed.", "",
            report_table(["Score", "Mean change (new − old)", "Largest change"], rows), "",
            *([f"Changed: {shown}{more}", ""] if check["changed"] else ["No judgement changed.", ""])]


def recheck_line(check: dict, labels: dict) -> str:
    """The closing line of a re-check: how many edits changed and each score's mean and largest change."""
    drift = "; ".join(f"{labels.get(k, k)} mean {_signed(v['mean_change']['value'])}, largest "
                      f"{_signed(v['largest_change'])}" for k, v in check["drift"].items())
    return (f"recheck: {check['rechecked']} judged edits judged again without the cache: {len(check['changed'])} "
            f"changed, {len(check['flagged'])} flagged; {drift}")


def _signed(value) -> str:
    return "n/a" if value is None else f"{value:+.3f}"
