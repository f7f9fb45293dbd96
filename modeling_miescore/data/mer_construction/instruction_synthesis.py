"""MER-Bench instruction synthesis (SpatialReward paper sec. 4.2, prompts D.3): one multi-edit instruction per
planned source image, asked of a vision-language model (paper: Qwen-3-VL-235B-A22B-Instruct) through the call
engine (:mod:`modeling_miescore.judges.call_engine`: concurrency, retries, answer cache, usage log).

Output folder (the construction project, shared with the later stages)::

    instructions.jsonl        the ledger: one line per finished job, ``status`` ``ok`` (the instruction, its
                              regions) or ``rejected`` (``reason``: not_editable, refusal, malformed,
                              ambiguous, wrong_num_edits, bad_regions, control_token); appended and fsynced
                              per chunk
    synthesis_report.json     counts by status and reason, the category ratio against 2:1:1, subtask coverage
                              (15) and the operation counts (2-5) of the accepted instructions: whether the
                              accepted instructions keep the paper's composition (sec. 4.2)

The answer is the writer's **final** JSON object with ``is_editable``
(:func:`~modeling_miescore.hub.spatialreward_relaxed_json.final_json_object`); several that disagree, or a key written twice with different values, are ``ambiguous``.
An instruction, region description or reason holding a chat-control token (``<|im_end|>``, ``<|image_pad|>``,
...) or a control character (NUL, ...) is ``control_token``: it would become a real control token when a model
is trained or evaluated on it (:mod:`modeling_miescore.utils.text_hygiene`).

A request that failed for good (HTTP error after retries, timeout, unreadable body) leaves its job out of the
ledger: the next run asks again and finds every answer it already received in the answer cache, so a killed
run loses at most the requests in flight.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tqdm.auto import tqdm

from ...hub.errors import MIEScoreInputError
from ...hub.image_io import load_image
from ...judges.call_engine import CallEngine, ChatRequest
from ...hub.spatialreward_relaxed_json import final_json_object
from ...utils.text_hygiene import training_text_problem
from ...utils.atomic_files import write_text_atomic
from ...utils.output_lock import exclusive_output
from ..schema import MER_CATEGORIES
from ..spatialreward_pipeline.prompts import fill
from .instruction_plan import MAX_EDITS, MIN_EDITS, InstructionJob
from .instruction_prompts import MER_SUBTASKS, PROMPT_OF_CATEGORY, subtask_hint
from .ledger import append_records, read_ledger

__all__ = ["INSTRUCTIONS", "RATIO", "RATIO_TOLERANCE", "SynthesisRun", "build_synthesis_report",
           "format_synthesis_report", "parse_instruction", "synthesis_request", "synthesize_instructions"]

INSTRUCTIONS = "instructions.jsonl"
REPORT = "synthesis_report.json"


@dataclass
class SynthesisRun:
    """What one run did: jobs finished now, finished before, left unfinished by failed requests, the report."""

    finished: int = 0
    already_done: int = 0
    unfinished: int = 0
    report: Dict[str, Any] = field(default_factory=dict)


def synthesis_request(job: InstructionJob, image, max_tokens: int = 1024, temperature: float = 0.0,
                      hint: bool = True) -> ChatRequest:
    """The image, then the D.3.1 (general) or D.3.2 (human) prompt with ``{num_edits}`` filled and, with
    ``hint``, the subtask line."""
    text = fill(PROMPT_OF_CATEGORY[job.category], num_edits=job.num_edits)
    if hint:
        text += subtask_hint(job.category, job.subtask)
    domain = "general" if job.category == "general" else "human"
    return ChatRequest([image, text], max_tokens=max_tokens, temperature=temperature,
                       stage=f"mer-synthesis-{domain}")


def _check_regions(regions: Any, num_edits: int) -> Optional[Tuple[str, str]]:
    if not isinstance(regions, list) or len(regions) != num_edits:
        count = len(regions) if isinstance(regions, list) else "no list of"
        return "wrong_num_edits", f"{count} edit_regions for {num_edits} edits"
    for region in regions:
        box = region.get("bbox") if isinstance(region, dict) else None
        ok = (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)
              and all(0 <= v <= 1000 for v in box) and box[0] < box[2] and box[1] < box[3])
        if not ok or not str(region.get("description", "")).strip():
            return "bad_regions", f"region {region!r} needs a description and a bbox [x1, y1, x2, y2] in 0-1000"
    return None


_ANSWER_KEYS = ("is_editable", "edit_instruction", "num_edits", "edit_regions", "reason")


def _control_token(fields: Dict[str, Any]) -> Optional[str]:
    texts = [("edit_instruction", fields["instruction"]), ("reason", fields["reason"]),
             *((f"edit_regions[{i}].description", r.get("description")) for i, r in enumerate(fields["edit_regions"]))]
    for name, value in texts:
        problem = training_text_problem(value)
        if problem:
            return f"{name} {problem}"
    return None


def parse_instruction(text: str, num_edits: int) -> Tuple[Dict[str, Any], Optional[Tuple[str, str]]]:
    """``(fields, None)`` for a usable answer, ``({}, (reason, detail))`` for a rejected one."""
    answer, issues = final_json_object(text or "", _ANSWER_KEYS,
                                       accept=lambda v: isinstance(v, dict) and "is_editable" in v)
    if answer is None or issues:
        if issues:
            return {}, ("ambiguous", f"{', '.join(issues)} in: {(text or '')[:120]!r}")
        return {}, ("malformed", f"no JSON object with is_editable in: {(text or '')[:120]!r}")
    if answer.get("is_editable") is not True:
        return {}, ("not_editable", str(answer.get("reason", "")))
    instruction = answer.get("edit_instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        return {}, ("malformed", "edit_instruction is missing or empty")
    if answer.get("num_edits") != num_edits:
        return {}, ("wrong_num_edits", f"num_edits {answer.get('num_edits')!r}, asked for {num_edits}")
    problem = _check_regions(answer.get("edit_regions"), num_edits)
    if problem is not None:
        return {}, problem
    fields = {"instruction": " ".join(instruction.split()), "edit_regions": answer["edit_regions"],
              "reason": str(answer.get("reason", ""))}
    token = _control_token(fields)
    if token is not None:
        return {}, ("control_token", token)
    return fields, None


def _outcome(job: InstructionJob, result, model: str) -> Optional[Dict[str, Any]]:
    """The ledger record of a job's answer; None when the request failed for good (retried next run)."""
    record = {"id": job.id, **job.as_dict(), "model": model}
    if not result.ok:
        if result.error_kind != "refusal":
            return None
        return {**record, "status": "rejected", "reason": "refusal", "detail": result.error}
    fields, problem = parse_instruction(result.text, job.num_edits)
    if problem is not None:
        return {**record, "status": "rejected", "reason": problem[0], "detail": " ".join(problem[1].split())[:300]}
    return {**record, "status": "ok", **fields}


def _chunk_records(chunk: Sequence[InstructionJob], engine: CallEngine, options: Dict[str, Any]) -> List:
    requests, live = [], []
    records: List[Optional[Dict[str, Any]]] = []
    for job in chunk:
        try:
            image = load_image(job.image)
        except (MIEScoreInputError, OSError, ValueError) as err:
            records.append({"id": job.id, **job.as_dict(), "model": engine.backend.model, "status": "rejected",
                            "reason": "unreadable_image", "detail": str(err)[:300]})
            continue
        live.append(job)
        requests.append(synthesis_request(job, image, **options))
    for job, result in zip(live, engine.run(requests)):
        records.append(_outcome(job, result, engine.backend.model))
    return records


RATIO = {"general": 0.5, "human_basic": 0.25, "human_fine": 0.25}  # sec. 4.2: 2:1:1
RATIO_TOLERANCE = 0.05  # each category's share of the accepted instructions may be off by 5 points


def _checks(accepted: List[Dict[str, Any]], per_category: Counter, per_subtask: Counter, edits: Counter) -> Dict:
    n = len(accepted)
    shares = {c: (per_category[c] / n if n else 0.0) for c in MER_CATEGORIES}
    all_subtasks = [(c, s) for c in MER_SUBTASKS for s in MER_SUBTASKS[c]]
    missing = [f"{c}/{s}" for c, s in all_subtasks if per_subtask[f"{c}/{s}"] == 0]
    return {
        "ratio_2_1_1": {"ok": n > 0 and all(abs(shares[c] - RATIO[c]) <= RATIO_TOLERANCE for c in MER_CATEGORIES),
                        "shares": {c: round(v, 4) for c, v in shares.items()}, "target": RATIO,
                        "tolerance": RATIO_TOLERANCE},
        "subtasks": {"ok": not missing, "covered": len(all_subtasks) - len(missing), "expected": len(all_subtasks),
                     "missing": missing},
        "num_edits": {"ok": n > 0 and set(edits) <= set(range(MIN_EDITS, MAX_EDITS + 1)),
                      "range": [MIN_EDITS, MAX_EDITS]},
    }


def build_synthesis_report(records: Sequence[Dict[str, Any]], planned: int) -> Dict[str, Any]:
    """Counts over the ledger ``records`` of this plan (``planned`` jobs in all)."""
    accepted = [r for r in records if r["status"] == "ok"]
    rejected = Counter(r["reason"] for r in records if r["status"] == "rejected")
    per_category = Counter(r["category"] for r in accepted)
    per_subtask = Counter(f"{r['category']}/{r['subtask']}" for r in accepted)
    edits = Counter(r["num_edits"] for r in accepted)
    return {
        "planned": planned, "finished": len(records), "pending": planned - len(records),
        "accepted": len(accepted), "rejected": dict(sorted(rejected.items())),
        "per_category": {c: per_category[c] for c in MER_CATEGORIES},
        "per_subtask": dict(sorted(per_subtask.items())),
        "num_edits": {str(k): edits[k] for k in sorted(edits)},
        "checks": _checks(accepted, per_category, per_subtask, edits),
    }


def format_synthesis_report(report: Dict[str, Any]) -> str:
    """A few lines for the terminal."""
    checks = report["checks"]
    ratio, subtasks = checks["ratio_2_1_1"], checks["subtasks"]
    shares = ", ".join(f"{c} {v:.0%}" for c, v in ratio["shares"].items())
    lines = [
        f"instructions: {report['accepted']} accepted, {sum(report['rejected'].values())} rejected "
        f"{report['rejected'] or ''}, {report['pending']} pending of {report['planned']} planned",
        f"2:1:1 ratio {'ok' if ratio['ok'] else 'OFF'}: {shares} (target 50/25/25 +- 5 points)",
        f"subtasks {'ok' if subtasks['ok'] else 'MISSING'}: {subtasks['covered']} of {subtasks['expected']}"
        + (f" (missing: {', '.join(subtasks['missing'])})" if subtasks["missing"] else ""),
        f"operations per instruction: {report['num_edits']} "
        f"({'ok' if checks['num_edits']['ok'] else 'OUT OF RANGE'}, paper: 2-5)",
    ]
    return "\n".join(lines)


def synthesize_instructions(jobs: Sequence[InstructionJob], out_dir, engine: CallEngine, *, max_tokens: int = 1024,
                            temperature: float = 0.0, hint: bool = True, chunk_size: int = 32,
                            progress: bool = True) -> SynthesisRun:
    """Ask for every planned job not yet in ``out_dir``'s ledger; write the report (module docstring)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ledger = out_dir / INSTRUCTIONS
    options = {"max_tokens": max_tokens, "temperature": temperature, "hint": hint}
    run = SynthesisRun()
    with exclusive_output(ledger, "construction folder"):
        done = read_ledger(ledger, repair=True)
        todo = [job for job in jobs if job.id not in done]
        run.already_done = len(jobs) - len(todo)
        size = max(1, int(chunk_size))
        with tqdm(total=len(jobs), initial=run.already_done, desc="mer-synthesis", unit="image", file=sys.stderr,
                  disable=not progress) as bar:
            for start in range(0, len(todo), size):
                records = _chunk_records(todo[start:start + size], engine, options)
                run.finished += append_records(ledger, [r for r in records if r is not None])
                run.unfinished += sum(r is None for r in records)
                bar.update(len(records))
        ids = {job.id for job in jobs}
        run.report = build_synthesis_report([r for k, r in read_ledger(ledger).items() if k in ids], len(jobs))
        write_text_atomic(out_dir / REPORT, json.dumps(run.report, indent=2) + "\n")
    if progress:
        print(format_synthesis_report(run.report), file=sys.stderr)
    return run
