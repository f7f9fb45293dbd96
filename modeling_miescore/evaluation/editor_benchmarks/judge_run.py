"""Running judges over an editor's outputs, resumably: the judges' input file, the MLLM judge, our reward models as
judges (:data:`REWARD_JUDGES`), the checks that keep a resumed run honest, and ``--recheck N``.

A rerun of the same command sends only what has no answer yet. A judgements file made by another judge, with other
prompts or other request settings is never extended, and one whose record of an edit was made for another edited
image (its ``edited_sha256`` differs) is refused: pass another ``--out``. A SpatialReward judgement that could not
be parsed is flagged (``failed``), never given ``config.failure_reward``.

``--recheck N``: the judge's drift since the run's judgements were made. A fixed random sample of N judged edits
(``--seed``) is judged again with no answer cache and compared with the judgements on disk (never changed). Run it
before comparing with a number judged months ago: zero drift means the judge still answers as it did.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from ...data.errors import EXAMPLES
from ...hub.errors import MIEScoreInputError
from ...hub.processing_miescore import EditSample
from ...scoring.jsonl_scoring import BatchReport, read_done_ids, read_predictions, record_to_sample, score_jsonl
from ...scoring.loading import load_scorer, load_spatialreward, read_checkpoint_config
from ...utils.atomic_files import write_text_atomic
from ..protocol import file_sha256
from ..report_parts import fmt_ci, report_table
from .judges import prepare_edited

__all__ = ["REWARD_JUDGES", "RewardJudgeKind", "check_resumable", "file_sha256", "parse_reward_judge",
           "read_records", "recheck_judgements", "recheck_line", "recheck_markdown", "reward_judge_name",
           "reward_view", "run_mllm_judge", "run_reward_judge", "write_judge_inputs"]


def write_judge_inputs(folder: Path, edits, rows, sources: Dict[str, list]) -> tuple[Path, Dict[str, dict]]:
    """``folder/judge_inputs.jsonl`` for ``edits`` (:class:`~.editing_rows.ResolvedEdits`) and ``{input id:
    {"category", "edited_sha256"}}`` for the judges."""
    lines, info = [], {}
    for ref in edits.edits:
        meta = rows.loc[ref.row]
        lines.append(json.dumps({"id": ref.input_id, "row": ref.row, "sample": ref.sample, "sources": sources[ref.row],
                                 "edited": str(ref.path), "instruction": meta["instruction"]}))
        info[ref.input_id] = {"category": meta["category"], "edited_sha256": file_sha256(ref.path)}
    return write_text_atomic(folder / "judge_inputs.jsonl", "\n".join(lines) + "\n"), info


def read_records(path: Path) -> Dict[str, dict]:
    """``{id: record}`` of a judgements / reward file (missing file: empty); an incomplete last line is ignored."""
    return {key: json.loads(raw) for key, raw in read_predictions(Path(path), repair=False)[0].items()}


def check_resumable(path: Path, expected: Dict[str, object], info: Dict[str, dict]) -> None:
    """Refuse to extend ``path`` when a record disagrees with ``expected`` (e.g. ``{"judge": ..., "prompts": ...}``)
    or was made for another edited image than ``info`` names."""
    other, changed = set(), []
    for key, record in read_records(path).items():
        for field, value in expected.items():
            if record.get(field) != value:
                other.add(f"{field} {record.get(field)!r}")
        sha = record.get("edited_sha256")
        if key in info and sha is not None and sha != info[key]["edited_sha256"]:
            changed.append(key)
    if other:
        raise MIEScoreInputError(f"'{path}' holds records of {', '.join(sorted(other))}, not "
                                 f"{', '.join(f'{k} {v!r}' for k, v in expected.items())}; pass another --out")
    if changed:
        raise MIEScoreInputError(f"'{path}' holds judgements of other edited images for {len(changed)} edits, e.g. "
                                 f"{', '.join(sorted(changed)[:EXAMPLES])}; pass another --out for these edits")


def run_mllm_judge(benchmark, calls, spec, inputs: Path, output: Path, info: Dict[str, dict], prompts, *, name: str,
                   settings, progress: bool):
    """Judge every edit of ``inputs`` not yet in ``output`` with the benchmark's MLLM judge: ``(report, judge)``."""
    check_resumable(output, {"judge": name, "prompts": prompts.label, "request": settings.label()}, info)
    if set(info) <= set(read_records(output)):  # a finished run: report again without starting the judge model
        return BatchReport(skipped_existing=len(info)), None
    engine = calls.engine(spec)
    judge = benchmark.judge_class()(engine, prompts, name=name, info=info, settings=settings)
    batch = engine.backend.batch_size
    report = score_jsonl(judge.score_batch, inputs, output, batch_size=batch, on_error="skip", progress=progress,
                         chunk_size=4 * max(batch, engine.backend.max_concurrency))
    return report, judge


@dataclass(frozen=True)
class RewardJudgeKind:
    """A reward model usable as a judge: ``scores`` it writes (with ``labels``), its ``scale`` text, the
    ``overall`` score compared with the benchmark's and each score's ``bounds`` (``(low, high)``: a value outside
    is not one the model writes; SpatialReward's SC and PQ top is the checkpoint's ``score_range``, 25 in the
    paper, so only their floor is fixed)."""

    name: str
    scores: tuple[str, ...]
    labels: dict
    scale: str
    overall: str
    bounds: dict


REWARD_JUDGES: Dict[str, RewardJudgeKind] = {k.name: k for k in (
    RewardJudgeKind("miescore", ("visual_quality", "instruction_following", "attribute_preservation", "overall"),
                    {"visual_quality": "VQ", "instruction_following": "IF", "attribute_preservation": "AP",
                     "overall": "Overall"}, "0-100 (MOS scale)", "overall",
                    {k: (0.0, 100.0) for k in ("visual_quality", "instruction_following", "attribute_preservation",
                                               "overall")}),
    RewardJudgeKind("spatialreward", ("sc", "pq", "reward"), {"sc": "SC", "pq": "PQ", "reward": "Reward"},
                    "SC, PQ 0-25; reward 0-1", "reward", {"sc": (0.0, math.inf), "pq": (0.0, math.inf),
                                                          "reward": (0.0, 1.0)}),
)}


def reward_view(benchmark, kind: RewardJudgeKind):
    """The benchmark's protocol with the reward model's scores in place of the judge's (same categories, subsets
    and languages; no rounding): what the aggregation of :mod:`.scores` takes for a reward model."""
    return dataclasses.replace(benchmark, scores=kind.scores, overall=kind.overall, labels=kind.labels, round_to=None)


def parse_reward_judge(text: str) -> tuple[RewardJudgeKind, str]:
    """``"miescore:CKPT"`` -> ``(kind, CKPT)``; a one-line error for anything else."""
    kind, sep, ckpt = text.partition(":")
    if not sep or not ckpt or kind not in REWARD_JUDGES:
        raise MIEScoreInputError(f"--judge '{text}' is not KIND:CHECKPOINT with KIND one of "
                                 f"{', '.join(REWARD_JUDGES)} (e.g. miescore:/ckpt/miescore-8b)")
    return REWARD_JUDGES[kind], ckpt


def _resized(samples, resize: bool) -> List[Any]:
    return [EditSample(sources=s.sources, edited=prepare_edited(s, resize), instruction=s.instruction, id=s.id)
            for s in samples]


def _scorer(kind: RewardJudgeKind, model, name: str, resize: bool, info: Dict[str, dict]):
    def miescore(samples, batch_size):
        results = model.score_batch(_resized(samples, resize), batch_size=batch_size)
        return [{**{k: float(r[k]) for k in kind.scores}, "failed": False, "judge": name,
                 "edited_sha256": info.get(s.id, {}).get("edited_sha256")} for s, r in zip(samples, results)]

    def spatialreward(samples, batch_size):
        results = model.evaluate_edits(_resized(samples, resize), batch_size=batch_size)
        return [{"sc": None if r.failed else r.sc, "pq": None if r.failed else r.pq,
                 "reward": None if r.failed else float(r.reward), "failed": bool(r.failed),
                 "issues": list(r.failure_reasons), "judge": name,
                 "edited_sha256": info.get(s.id, {}).get("edited_sha256")} for s, r in zip(samples, results)]

    return {"miescore": miescore, "spatialreward": spatialreward}[kind.name]


def _load(kind: RewardJudgeKind, ckpt: str, device: str, dtype: str):
    model_type = read_checkpoint_config(ckpt).get("model_type")  # a ModelLoadError is a one-line input error
    wanted = {"miescore": ("miescore",), "spatialreward": ("spatialreward", "qwen3_vl")}[kind.name]
    if model_type not in wanted:
        raise MIEScoreInputError(f"--judge {kind.name}:{ckpt} is a {model_type!r} checkpoint, not a {kind.name} one")
    load = load_scorer if kind.name == "miescore" else load_spatialreward
    return load(ckpt, device=device, dtype=dtype)


def reward_judge_name(kind: RewardJudgeKind, ckpt: str) -> str:
    """The judge's name in its records and in the report: ``<kind>:<checkpoint's absolute path or Hub id>``."""
    ref = Path(ckpt).expanduser()
    return f"{kind.name}:{ref.resolve() if ref.exists() else ckpt}"


def run_reward_judge(kind: RewardJudgeKind, ckpt: str, inputs: Path, output: Path, info: Dict[str, dict], *,
                     resize: bool, device: str = "auto", dtype: str = "auto", batch_size: int = 4,
                     progress: bool = True):
    """Score every edit of ``inputs`` not yet in ``output`` with the checkpoint; returns the ``BatchReport``."""
    name = reward_judge_name(kind, ckpt)
    check_resumable(output, {"judge": name}, info)
    done, _ = read_done_ids(output, repair=False)
    if set(info) <= done:  # a finished run: report again without loading the model
        return BatchReport(skipped_existing=len(info)), name
    model = _load(kind, ckpt, device, dtype)
    report = score_jsonl(_scorer(kind, model, name, resize, info), inputs, output, batch_size=batch_size,
                         on_error="skip", progress=progress)
    return report, name


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

    largest = values[np.argmax(np.abs(values))]
    return {"mean_change": bootstrap.interval(mean, np.arange(len(values))), "largest_change": float(largest)}


def recheck_markdown(report: dict, labels: dict) -> List[str]:
    """The report's "Judge drift" section (none without ``--recheck``)."""
    check = report.get("recheck")
    if not check:
        return []
    rows = [[labels.get(k, k), fmt_ci(v["mean_change"], 3),
             "—" if v["largest_change"] is None else f"{v['largest_change']:+.3f}"]
            for k, v in check["drift"].items()]
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
