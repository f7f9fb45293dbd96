"""Reading the models' answers: the evaluator's three scores (eq. 5, :func:`parse_evaluator_output`) and the
optimiser's candidate edits (eq. 7, :func:`parse_optimizer_output`). Both are strict: JSON only (found with
:func:`~modeling_miescore.hub.spatialreward_relaxed_json.extract_json`, the final score object), never clamped,
guessed or taken from prose; every rejection carries an error code."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ...hub.spatialreward_relaxed_json import extract_first_json, extract_json, is_unclosed, strip_reasoning_and_fences
from .edits import Edit, EditBounds, SkillEditError, apply_edits

__all__ = ["Candidate", "EvaluatorParse", "parse_edits", "parse_evaluator_output", "parse_optimizer_output"]

_SCORE_ALIASES = {
    "visual_quality": ("visual_quality", "visual quality", "vq"),
    "instruction_following": ("instruction_following", "instruction following", "if"),
    "attribute_preservation": ("attribute_preservation", "attribute preservation", "ap"),
}


@dataclass
class EvaluatorParse:
    """Scores parsed from one evaluator answer: ``scores`` (dimension -> float on 0..score_max) or None with
    ``error`` (``empty_output``, ``no_json_object``, ``missing_key``, ``score_invalid``, ``score_out_of_range``)."""

    scores: Optional[Dict[str, float]]
    error: Optional[str] = None
    detail: str = ""


def _lower_keys(obj: Mapping) -> Dict[str, Any]:
    return {k.strip().lower(): v for k, v in obj.items() if isinstance(k, str)}


def _score_dict(value: Any) -> Optional[Dict[str, Any]]:
    """The mapping that holds the scores: the object itself or its ``"scores"`` member (key-anchored)."""
    if not isinstance(value, dict):
        return None
    keys = _lower_keys(value)
    names = {a for aliases in _SCORE_ALIASES.values() for a in aliases}
    if names & keys.keys():
        return keys
    inner = keys.get("scores") if "scores" in keys else keys.get("score")
    if isinstance(inner, dict) and names & _lower_keys(inner).keys():
        return _lower_keys(inner)
    return None


def parse_evaluator_output(text: str, score_max: float = 5.0) -> EvaluatorParse:
    """Parse ``{"visual_quality": x, "instruction_following": y, "attribute_preservation": z}`` from an answer.

    The final balanced JSON object that has at least one score key (also under a ``"scores"`` member; keys
    case-insensitive, short aliases ``vq``/``if``/``ap`` accepted) is the answer (several that disagree, or a
    key written twice with different values, are ``ambiguous_json``); ``<think>`` blocks and code
    fences are ignored. All three scores must be finite numbers (numeric strings accepted) within
    ``[0, score_max]`` (5 for the default skill's 0-5 rubric; 100 for a 0-100 prompt); otherwise the answer
    is a failure with an ``error`` code: values are never clamped, guessed or taken from prose.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        return EvaluatorParse(None, "empty_output", "the answer is empty")
    found = extract_json(text, lambda v: _score_dict(v) is not None)
    if found.final is None:
        return EvaluatorParse(None, "no_json_object", "no JSON object with a score key")
    if any(_score_dict(v) != _score_dict(found.final) for v in found.values) or found.duplicates[-1]:
        # several score objects that disagree (one may be quoted from the instruction), or a key written twice
        return EvaluatorParse(None, "ambiguous_json", "the answer holds conflicting score objects or keys")
    obj = found.final
    scores_obj = _score_dict(obj)
    out: Dict[str, float] = {}
    for dim, aliases in _SCORE_ALIASES.items():
        raw = next((scores_obj[a] for a in aliases if a in scores_obj), None)
        if raw is None:
            return EvaluatorParse(None, "missing_key", f"no {dim!r} in the JSON object")
        if isinstance(raw, bool):
            return EvaluatorParse(None, "score_invalid", f"{dim} is a boolean")
        if isinstance(raw, str):
            try:
                raw = float(raw.strip())
            except ValueError:
                return EvaluatorParse(None, "score_invalid", f"{dim} is the string {raw[:40]!r}")
        if not isinstance(raw, (int, float)) or not math.isfinite(float(raw)):
            return EvaluatorParse(None, "score_invalid", f"{dim} is not a finite number")
        value = float(raw)
        if not 0.0 <= value <= score_max:
            return EvaluatorParse(None, "score_out_of_range", f"{dim}={value:g} is outside [0, {score_max:g}]")
        out[dim] = value
    return EvaluatorParse(out)


@dataclass
class Candidate:
    """One proposed skill revision: its edits, the resulting skill (None if rejected) and why it was rejected."""

    index: int
    edits: List[Dict[str, Any]]
    rationale: str = ""
    skill: Optional[str] = None
    error: Optional[str] = None
    error_message: str = ""
    val: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"index": self.index, "rationale": self.rationale, "edits": self.edits,
                "status": "rejected" if self.error else "evaluated" if self.val else "valid",
                "error": self.error, "error_message": self.error_message, "skill": self.skill, "val": self.val}


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise SkillEditError("wrong_schema", f"{what} is a boolean, expected a line number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    raise SkillEditError("wrong_schema", f"{what} is {value!r}, expected an integer line number")


def parse_edits(raw_edits: Any) -> List[Edit]:
    """Validate the schema of one candidate's ``edits`` list (line ranges are checked by :func:`apply_edits`)."""
    if not isinstance(raw_edits, list):
        raise SkillEditError("wrong_schema", f"'edits' is a {type(raw_edits).__name__}, expected a list")
    edits = []
    for i, e in enumerate(raw_edits, start=1):
        if not isinstance(e, dict):
            raise SkillEditError("wrong_schema", f"edit {i} is a {type(e).__name__}, expected an object")
        op = e.get("op", e.get("operation"))
        if not isinstance(op, str) or op.strip().lower() not in ("add", "delete", "replace"):
            raise SkillEditError("wrong_schema", f"edit {i} has op {op!r}; expected add, delete or replace")
        op = op.strip().lower()
        key = "after" if op == "add" and "after" in e else "line"
        if key not in e:
            raise SkillEditError("wrong_schema", f"edit {i} ({op}) has no {'after' if op == 'add' else 'line'} number")
        line = _as_int(e[key], f"edit {i} {key}")
        text = e.get("text", "")
        if op != "delete" and not isinstance(text, str):
            raise SkillEditError("wrong_schema", f"edit {i} ({op}) text is a {type(text).__name__}, expected a string")
        edits.append(Edit(op, line, text if op != "delete" else ""))
    return edits


def _no_usable_json(text: str) -> Dict[str, str]:
    """Why an answer holds no candidates JSON: cut off mid-JSON, no JSON at all, or JSON of another shape."""
    if is_unclosed(strip_reasoning_and_fences(text)):
        return {"code": "invalid_json", "message": "the JSON is not closed (answer cut off? raise "
                                                   "optimizer_max_new_tokens)"}
    if extract_first_json(text, lambda v: isinstance(v, (dict, list)), openers="{[") is None:
        return {"code": "invalid_json", "message": "no parsable JSON object or list in the answer"}
    return {"code": "wrong_schema", "message": "JSON found but it has no 'candidates' or 'edits'"}


def _raw_candidates(value: Any) -> Any:
    """The list of raw candidates in a parsed answer (``{"candidates": [...]}``, one ``{"edits": [...]}``
    object, a list of candidates, or a bare list of edits = one candidate)."""
    if isinstance(value, dict):
        return value["candidates"] if "candidates" in value else [value]
    is_edit_list = bool(value) and all(isinstance(e, dict) and "op" in e for e in value)
    return [value] if is_edit_list else value


def _candidate(index: int, raw: Any, skill: str, bounds: EditBounds, seen: Dict[str, int]) -> Candidate:
    """One raw candidate -> :class:`Candidate` with its new skill, or its rejection (``seen``: skill -> index of
    the earlier candidates, to reject duplicates)."""
    rationale = ""
    raw_edits: Any = raw
    if isinstance(raw, dict):
        rationale = str(raw.get("rationale", ""))[:1000]
        raw_edits = raw.get("edits")
    cand = Candidate(index=index, edits=[], rationale=rationale)
    try:
        edits = parse_edits(raw_edits)
        cand.edits = [e.to_dict() for e in edits]
        new = apply_edits(skill, edits, bounds)
        if new in seen:
            raise SkillEditError("duplicate_candidate", f"same skill as candidate {seen[new]}")
        seen[new] = index
        cand.skill = new
    except SkillEditError as err:
        if not cand.edits and isinstance(raw_edits, list):
            # keep what was proposed for the history, unless it is huge
            cand.edits = raw_edits if len(json.dumps(raw_edits, default=str)) < 20000 else []
        cand.error, cand.error_message = err.code, err.message
    return cand


def parse_optimizer_output(text: str, skill: str, k: int,
                           bounds: EditBounds) -> Tuple[List[Candidate], List[Dict[str, str]]]:
    """Turn an optimiser answer into candidates.

    Accepted: the first balanced JSON value that is ``{"candidates": [...]}`` or a list of candidates; a
    candidate is ``{"edits": [...], "rationale": "..."}`` or a bare list of edits; a single
    ``{"edits": [...]}`` object is one candidate. Returns ``(candidates, errors)``: each candidate carries
    its new skill or its rejection (``error`` code, message); ``errors`` lists whole-answer problems
    (``invalid_json``, ``wrong_schema``, ``no_candidates``, ``too_many_candidates``). Never raises for a str
    answer.
    """
    text = text or ""

    def looks_right(v: Any) -> bool:
        if isinstance(v, list):  # a list of candidates or of edits; "[1]" in prose is neither
            return bool(v) and all(isinstance(e, (dict, list)) for e in v)
        return isinstance(v, dict) and ("candidates" in v or "edits" in v)

    value = extract_first_json(text, looks_right, openers="{[")
    if value is None:
        return [], [_no_usable_json(text)]
    raw_candidates = _raw_candidates(value)
    if not isinstance(raw_candidates, list):
        return [], [{"code": "wrong_schema", "message": "'candidates' is not a list"}]
    if not raw_candidates:
        return [], [{"code": "no_candidates", "message": "the answer proposes no candidate"}]
    errors: List[Dict[str, str]] = []
    if len(raw_candidates) > k:
        errors.append({"code": "too_many_candidates",
                       "message": f"{len(raw_candidates)} candidates returned, {k} asked; kept the first {k}"})
        raw_candidates = raw_candidates[:k]
    seen: Dict[str, int] = {}
    return [_candidate(index, raw, skill, bounds, seen) for index, raw in enumerate(raw_candidates)], errors
