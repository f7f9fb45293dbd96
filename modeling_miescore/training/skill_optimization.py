"""Skill optimisation: the first training stage of MIEScore (paper, section "Skill Optimization", eqs. 5-8).

A *skill* is the textual evaluation rubric placed at the start of every prompt (``config.skill`` of a
MIEScore checkpoint; default :data:`modeling_miescore.skill_miescore.DEFAULT_SKILL`). Skill optimisation
refines it with a frozen generative evaluator and an optimiser model:

* eq. 5, ``y_hat = f(S, x)``: :class:`SkillEvaluator` prompts a generative multimodal model with the skill,
  the source images, the instruction and the edited image, and parses the three scores from its answer
  (:func:`parse_evaluator_output`). An unparsable answer is a recorded failure, never a made-up score.
* eq. 6, failure trajectories: :func:`select_failures` ranks the training rollouts by
  ``|| pred / score_max - mos / 100 ||_2`` over (VQ, IF, AP) and keeps the largest deviations.
* eq. 7, ``S_k = O(S, E; e_k)``: :class:`SkillOptimizer` shows the optimiser model the numbered skill and
  the failures and asks for ``K`` candidates, each a short list of *bounded* edits (add / delete / replace
  of numbered lines, :class:`EditBounds`), returned as JSON. Anything malformed is rejected with a logged
  reason (:class:`SkillEditError` codes) and the loop carries on.
* eq. 8, selection: every valid candidate is scored on the validation set by the mean over the three
  dimensions of SRCC(pred, MOS) (:func:`validation_srcc`); the best one replaces the current skill only if
  it beats it.

:func:`optimize_skill` runs the loop and appends one JSON line per iteration to a history file; running it
again with the same history continues after the last completed iteration (same results when the backends
are deterministic, e.g. greedy decoding or a seeded fake).

Backends (:class:`GenerativeBackend`: prompts of text and PIL images in, texts out) are
:class:`TransformersBackend` (a local Qwen3-VL ``AutoModelForImageTextToText`` + processor, greedy) and
:class:`OpenAIBackend` (any OpenAI-compatible chat server through :class:`~modeling_miescore.judges.chat_client.ChatClient`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from ..data.schema import DIMENSIONS, MOS_COLUMNS, MOS_SCALE
from ..image_io import MIEScoreInputError

logger = logging.getLogger(__name__)

__all__ = [
    "DIMENSIONS",
    "EDIT_ERROR_CODES",
    "EditBounds",
    "Edit",
    "Candidate",
    "EvalRecord",
    "EvaluatorParse",
    "Generation",
    "GenerativeBackend",
    "OpenAIBackend",
    "SkillEditError",
    "SkillEvaluator",
    "SkillHistoryError",
    "SkillOptConfig",
    "SkillOptResult",
    "SkillOptimizer",
    "SkillSample",
    "TransformersBackend",
    "apply_edits",
    "build_evaluator_prompt",
    "build_optimizer_prompt",
    "deviation",
    "extract_first_json",
    "number_lines",
    "optimize_skill",
    "parse_edits",
    "parse_evaluator_output",
    "parse_optimizer_output",
    "read_history",
    "select_failures",
    "select_successes",
    "skill_lines",
    "skill_text",
    "to_skill_sample",
    "validation_srcc",
]


Part = Any  # a prompt part: ``str`` or ``PIL.Image.Image``


# ----------------------------------------------------------------------------------------------------------
# Skills as numbered lines and bounded edits (eq. 7)
# ----------------------------------------------------------------------------------------------------------

EDIT_ERROR_CODES: Dict[str, str] = {
    "invalid_json": "the optimiser answer holds no parsable JSON object or list",
    "wrong_schema": "the JSON does not have the documented candidates/edits structure",
    "too_many_edits": "a candidate has more edits than max_edits_per_candidate",
    "no_edits": "a candidate has no edit",
    "line_out_of_range": "an edit refers to a line number that does not exist",
    "conflicting_edits": "two delete/replace edits target the same line",
    "empty_text": "an add/replace edit has empty text (use delete to remove a line)",
    "multi_line_text": "an add/replace edit text spans several lines (one edit = one line)",
    "line_too_long": "an add/replace edit text is longer than max_line_chars",
    "empty_skill": "the edited skill would be empty",
    "skill_too_long": "the edited skill would be longer than max_skill_chars",
    "no_change": "the edits leave the skill unchanged",
    "duplicate_candidate": "the candidate skill equals an earlier candidate of the same iteration",
    "no_candidates": "the optimiser answer holds an empty candidate list",
    "too_many_candidates": "the optimiser returned more candidates than asked; the extra ones were dropped",
    "backend_error": "the optimiser backend failed (HTTP error, exception); no candidate this iteration",
}


class SkillEditError(ValueError):
    """An optimiser proposal was rejected. ``code`` is a key of :data:`EDIT_ERROR_CODES`."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SkillHistoryError(MIEScoreInputError):
    """The history file cannot be resumed (corrupt, or written by a run with other settings)."""


@dataclass(frozen=True)
class EditBounds:
    """Bounds on one candidate's edits (eq. 7: "bounded skill edits").

    ``max_edits``: edits per candidate; ``max_line_chars``: characters of one added/replacing line;
    ``max_skill_chars``: characters of the whole edited skill.
    """

    max_edits: int = 4
    max_line_chars: int = 500
    max_skill_chars: int = 8000

    def __post_init__(self):
        if self.max_edits < 1 or self.max_line_chars < 1 or self.max_skill_chars < 1:
            raise ValueError(f"EditBounds values must be >= 1, got {self}")


@dataclass(frozen=True)
class Edit:
    """One line edit. ``op``: ``"add"`` (insert ``text`` after line ``line``; 0 = at the top), ``"delete"``
    (remove line ``line``) or ``"replace"`` (line ``line`` becomes ``text``). Line numbers are 1-based and
    refer to the skill the edits are applied to (all edits of a candidate use the same numbering)."""

    op: str
    line: int
    text: str = ""

    def to_dict(self) -> Dict[str, Any]:
        if self.op == "add":
            return {"op": "add", "after": self.line, "text": self.text}
        if self.op == "delete":
            return {"op": "delete", "line": self.line}
        return {"op": "replace", "line": self.line, "text": self.text}


def skill_lines(text: str) -> List[str]:
    """Split a skill into its lines (blank lines are kept so that ``skill_text(skill_lines(s)) == s`` for a
    skill ending with one newline; CRLF becomes LF)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


def skill_text(lines: Sequence[str]) -> str:
    """Join lines into a skill text ending with a newline."""
    return "\n".join(lines) + "\n"


def number_lines(text: str) -> str:
    """The skill with 1-based line numbers (``"  3| text"``), as shown to the optimiser."""
    lines = skill_lines(text)
    width = len(str(len(lines)))
    return "\n".join(f"{i + 1:>{width}}| {line}" for i, line in enumerate(lines))


def _check_text(edit: Edit, index: int, bounds: EditBounds) -> None:
    if "\n" in edit.text or "\r" in edit.text:
        raise SkillEditError("multi_line_text",
                             f"edit {index} ({edit.op}) text has a line break; give one line per edit")
    if not edit.text.strip():
        raise SkillEditError("empty_text", f"edit {index} ({edit.op} line {edit.line}) has empty text")
    if len(edit.text) > bounds.max_line_chars:
        raise SkillEditError(
            "line_too_long",
            f"edit {index} ({edit.op}) text has {len(edit.text)} characters, more than max_line_chars="
            f"{bounds.max_line_chars}",
        )


def apply_edits(skill: str, edits: Sequence[Edit], bounds: EditBounds = EditBounds()) -> str:
    """Apply ``edits`` (all numbered against ``skill``) and return the new skill text.

    Several adds after the same line keep their given order. Raises :class:`SkillEditError` for: no edits,
    more than ``bounds.max_edits``, a line number out of range (add: 0..n; delete/replace: 1..n), two
    deletes/replaces of one line, empty / multi-line / over-long text, an empty or over-long result, and
    an unchanged skill.
    """
    lines = skill_lines(skill)
    n = len(lines)
    if not edits:
        raise SkillEditError("no_edits", "the candidate has no edit")
    if len(edits) > bounds.max_edits:
        raise SkillEditError(
            "too_many_edits", f"{len(edits)} edits, more than max_edits_per_candidate={bounds.max_edits}"
        )
    changed: Dict[int, Edit] = {}
    inserts: Dict[int, List[str]] = {}
    for index, edit in enumerate(edits, start=1):
        if edit.op == "add":
            if not 0 <= edit.line <= n:
                raise SkillEditError(
                    "line_out_of_range",
                    f"edit {index} adds after line {edit.line}; the skill has lines 1..{n} (0 = top)"
                )
            _check_text(edit, index, bounds)
            inserts.setdefault(edit.line, []).append(edit.text.strip())
        elif edit.op in ("delete", "replace"):
            if not 1 <= edit.line <= n:
                raise SkillEditError(
                    "line_out_of_range", f"edit {index} {edit.op}s line {edit.line}; the skill has lines 1..{n}"
                )
            if edit.line in changed:
                raise SkillEditError(
                    "conflicting_edits",
                    f"edit {index} ({edit.op}) and an earlier {changed[edit.line].op} both target line {edit.line}"
                )
            if edit.op == "replace":
                _check_text(edit, index, bounds)
            changed[edit.line] = edit
        else:
            raise SkillEditError("wrong_schema", f"edit {index} has unknown op {edit.op!r} (add, delete or replace)")
    out: List[str] = list(inserts.get(0, []))
    for number, line in enumerate(lines, start=1):
        edit = changed.get(number)
        if edit is None:
            out.append(line)
        elif edit.op == "replace":
            out.append(edit.text.strip())
        out.extend(inserts.get(number, []))
    new = skill_text(out)
    if not new.strip():
        raise SkillEditError("empty_skill", "the edits delete every non-blank line")
    if len(new) > bounds.max_skill_chars:
        raise SkillEditError(
            "skill_too_long",
            f"the edited skill has {len(new)} characters, more than max_skill_chars={bounds.max_skill_chars}"
        )
    if new == skill_text(lines):
        raise SkillEditError("no_change", "the edits leave the skill unchanged")
    return new


# ----------------------------------------------------------------------------------------------------------
# Finding JSON in model answers
# ----------------------------------------------------------------------------------------------------------

_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE_RE = re.compile(r"```[A-Za-z0-9_+\-]*")
MAX_ANSWER_CHARS = 200_000  # longer answers are degenerate; only their beginning is scanned (bounds run time)


def _clean_answer(text: str) -> str:
    text = text[:MAX_ANSWER_CHARS]
    text = _THINK_RE.sub(" ", text)
    close = text.lower().rfind("</think>")
    if close >= 0:  # the opening tag was in the prompt (thinking models): drop the thinking prefix
        text = text[close + len("</think>"):]
    opened = text.lower().find("<think>")
    if opened >= 0:  # cut off while thinking: thinking text is never parsed
        text = text[:opened]
    return _FENCE_RE.sub(" ", text)


_JSON_SPECIAL_RE = re.compile(r'[{}\[\]"\\]')


def _balanced_spans(text: str) -> List[Tuple[int, int]]:
    """All balanced ``{...}`` / ``[...]`` spans (any nesting level) as ``(start, end)``, sorted by start.

    One pass: brackets inside JSON strings are skipped (quotes count only inside a bracket, so apostrophes
    and quotes in prose before the JSON do not matter); a mismatched closer abandons the open brackets."""
    spans: List[Tuple[int, int]] = []
    stack: List[Tuple[str, int]] = []
    in_str = False
    i = 0
    search = _JSON_SPECIAL_RE.search
    while True:
        m = search(text, i)
        if m is None:
            break
        p = m.start()
        c = text[p]
        i = p + 1
        if in_str:
            if c == "\\":
                i = p + 2
            elif c == '"':
                in_str = False
        elif c in "{[":
            stack.append(("}" if c == "{" else "]", p))
        elif c in "}]":
            if stack and stack[-1][0] == c:
                spans.append((stack.pop()[1], p + 1))
            else:
                stack.clear()  # not JSON: start over
        elif c == '"' and stack:
            in_str = True
    spans.sort()
    return spans


def _is_unclosed(text: str) -> bool:
    """True when the first ``{``/``[`` of ``text`` never closes (an answer cut off mid-JSON)."""
    first = re.search(r"[{\[]", text)
    if first is None:
        return False
    return not any(s == first.start() for s, _ in _balanced_spans(text))


def extract_first_json(text: str, accept: Callable[[Any], bool], openers: str = "{", max_tries: int = 64) -> Any:
    """The first balanced JSON value (starting with a character of ``openers``) that ``json.loads`` accepts
    and for which ``accept(value)`` is true; None if there is none. Strict JSON only (no repairs): a model
    that cannot write JSON should fail visibly rather than be guessed at. At most ``max_tries`` candidate
    spans are decoded, so degenerate answers cost linear time."""
    text = _clean_answer(text)
    tries = 0
    for start, end in _balanced_spans(text):
        if text[start] not in openers:
            continue
        if tries >= max_tries:
            break
        tries += 1
        try:
            value = json.loads(text[start:end])
        except ValueError:
            continue
        if accept(value):
            return value
    return None


# ----------------------------------------------------------------------------------------------------------
# Evaluator answers (eq. 5)
# ----------------------------------------------------------------------------------------------------------

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

    The first balanced JSON object that has at least one score key (also under a ``"scores"`` member; keys
    case-insensitive, short aliases ``vq``/``if``/``ap`` accepted) is the answer; ``<think>`` blocks and code
    fences are ignored. All three scores must be finite numbers (numeric strings accepted) within
    ``[0, score_max]`` (5 for the default skill's 0-5 rubric; 100 for a 0-100 prompt); otherwise the answer
    is a failure with an ``error`` code: values are never clamped, guessed or taken from prose.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        return EvaluatorParse(None, "empty_output", "the answer is empty")
    obj = extract_first_json(text, lambda v: _score_dict(v) is not None)
    if obj is None:
        return EvaluatorParse(None, "no_json_object", "no JSON object with a score key")
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


# ----------------------------------------------------------------------------------------------------------
# Samples
# ----------------------------------------------------------------------------------------------------------


@dataclass
class SkillSample:
    """One edit with human scores. ``mos``: (VQ, IF, AP) on 0-100 (MIE-Bench MOS)."""

    id: str
    sources: List[Any]
    edited: Any
    instruction: str
    mos: Tuple[float, float, float]


def to_skill_sample(row: Any, index: int = 0) -> SkillSample:
    """A :class:`SkillSample` from a MIE-Bench row (``id, instruction, source_images, edited_image, mos_vq,
    mos_if, mos_ap``), a dict with ``sources``/``edited`` instead of the image columns, or a SkillSample."""
    if isinstance(row, SkillSample):
        return row
    if not isinstance(row, Mapping):
        raise MIEScoreInputError(f"sample {index} is a {type(row).__name__}; expected a MIE-Bench row (dict)")
    sources = row.get("source_images", row.get("sources"))
    edited = row.get("edited_image", row.get("edited"))
    missing = [k for k, v in (("source_images", sources), ("edited_image", edited),
                              ("instruction", row.get("instruction"))) if v is None]
    missing += [k for k in MOS_COLUMNS if row.get(k) is None]
    if missing:
        raise MIEScoreInputError(f"sample {index} (id {row.get('id')!r}) lacks {', '.join(missing)}; "
                                 "skill optimisation needs MIE-Bench rows with images and mos_vq/mos_if/mos_ap")
    if not isinstance(sources, (list, tuple)):
        sources = [sources]
    try:
        mos = tuple(float(row[k]) for k in MOS_COLUMNS)
    except (TypeError, ValueError):
        raise MIEScoreInputError(f"sample {index} (id {row.get('id')!r}) has a non-numeric MOS") from None
    if not all(math.isfinite(m) for m in mos):
        raise MIEScoreInputError(f"sample {index} (id {row.get('id')!r}) has a NaN/infinite MOS")
    return SkillSample(id=str(row.get("id", index)), sources=list(sources), edited=edited,
                       instruction=str(row["instruction"]), mos=mos)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------------------------

# Appended after the skill, outside the part the optimiser edits, so that no skill edit can break the
# answer format the parser expects.
EVALUATOR_ANSWER_FORMAT = (
    "Answer with one JSON object and nothing else, each score a number from 0 to {score_max:g}:\n"
    '{{"visual_quality": <score>, "instruction_following": <score>, "attribute_preservation": <score>}}'
)


def build_evaluator_prompt(skill: str, sample: SkillSample, score_max: float = 5.0) -> List[Part]:
    """Prompt parts (strings and images, in order) for eq. 5: skill, labelled sources, instruction, the
    edited image last (same order and labels as MIEScore's default prompt template), then the answer format."""
    parts: List[Part] = [skill.rstrip("\n") + "\n\n"]
    for k, image in enumerate(sample.sources):
        parts.append(f"Source image {k + 1}:")
        parts.append(image)
        parts.append("\n")
    parts.append(f"Editing instruction: {sample.instruction}\n\nEdited image:")
    parts.append(sample.edited)
    parts.append("\n" + EVALUATOR_ANSWER_FORMAT.format(score_max=score_max))
    return parts


# The optimiser's task (paper eq. 7 and SkillOpt-style reflection): look at the failures, propose K
# alternative bounded edits. The schema is spelled out because the answer is parsed strictly.
OPTIMIZER_INSTRUCTIONS = """You improve an evaluation skill: the rubric that a multimodal evaluator reads before scoring multi-source image edits on visual quality, instruction following and attribute preservation. The goal is that the evaluator's scores rank edits like human raters do (Spearman correlation with human mean opinion scores).

Current skill, with line numbers:
{numbered_skill}

On training samples, the evaluator with this skill gave these answers; these are the cases that deviate most from the human scores (evaluator scores on 0-{score_max:g}, human scores converted to the same scale):
{failures}
{successes}
Reflect on what in the skill made the evaluator disagree with the humans (missing criteria, wrong emphasis, unclear score bands, confusion between dimensions), then propose {k} different candidate revisions of the skill. Each candidate is a small set of line edits:
- {{"op": "add", "after": N, "text": "..."}} inserts one new line after line N (0 = at the top);
- {{"op": "delete", "line": N}} removes line N;
- {{"op": "replace", "line": N, "text": "..."}} rewrites line N.
Rules: line numbers refer to the numbering above (all edits of one candidate use it); at most {max_edits} edits per candidate; each text is one line of at most {max_line_chars} characters; the whole skill stays under {max_skill_chars} characters; do not change the answer format (it is fixed outside the skill).

Answer with one JSON object and nothing else:
{{"candidates": [{{"rationale": "<one sentence>", "edits": [<edit>, ...]}}, ...]}}"""


def _fmt_scores(values: Optional[Sequence[float]]) -> str:
    if values is None:
        return "none"
    return "VQ {:.2f}, IF {:.2f}, AP {:.2f}".format(*values)


def _case_lines(cases: Sequence[Mapping[str, Any]], score_max: float, max_raw_chars: int) -> List[str]:
    lines = []
    for i, f in enumerate(cases, start=1):
        human = [m / MOS_SCALE * score_max for m in f["mos"]]
        head = f"{i}. [{f['id']}] {f['num_sources']} source image(s); instruction: {f['instruction']}"
        if f.get("pred") is None:
            raw = " ".join(str(f.get("raw") or "").split())[:max_raw_chars]
            lines.append(f"{head}\n   evaluator answer could not be parsed ({f.get('error')}): {raw!r}\n"
                         f"   human: {_fmt_scores(human)}")
        else:
            lines.append(f"{head}\n   evaluator: {_fmt_scores(f['pred'])}; human: {_fmt_scores(human)}; "
                         f"deviation {f['deviation']:.3f}")
    return lines


def build_optimizer_prompt(skill: str, failures: Sequence[Mapping[str, Any]], k: int, bounds: EditBounds,
                           score_max: float = 5.0, max_raw_chars: int = 300,
                           successes: Sequence[Mapping[str, Any]] = ()) -> str:
    """Text prompt for eq. 7 from the numbered skill, the failure records of :func:`select_failures` and,
    for contrast, the best-agreeing rollouts (``successes``, same record format)."""
    lines = _case_lines(failures, score_max, max_raw_chars)
    good = _case_lines(successes, score_max, max_raw_chars)
    successes_text = ("For contrast, cases where the evaluator agreed best with the humans:\n" + "\n".join(good) + "\n"
                      if good else "")
    return OPTIMIZER_INSTRUCTIONS.format(
        numbered_skill=number_lines(skill), failures="\n".join(lines) or "(no failure recorded)", k=k,
        successes=successes_text,
        score_max=score_max, max_edits=bounds.max_edits, max_line_chars=bounds.max_line_chars,
        max_skill_chars=bounds.max_skill_chars,
    )


# ----------------------------------------------------------------------------------------------------------
# Optimiser answers (eq. 7)
# ----------------------------------------------------------------------------------------------------------


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


def parse_optimizer_output(text: str, skill: str, k: int,
                           bounds: EditBounds) -> Tuple[List[Candidate], List[Dict[str, str]]]:
    """Turn an optimiser answer into candidates.

    Accepted: the first balanced JSON value that is ``{"candidates": [...]}`` or a list of candidates; a
    candidate is ``{"edits": [...], "rationale": "..."}`` or a bare list of edits; a single
    ``{"edits": [...]}`` object is one candidate. Returns ``(candidates, errors)``: each candidate carries
    its new skill or its rejection (``error`` code, message); ``errors`` lists whole-answer problems
    (``invalid_json``, ``wrong_schema``, ``too_many_candidates``). Never raises for a str answer.
    """
    errors: List[Dict[str, str]] = []

    def looks_right(v: Any) -> bool:
        if isinstance(v, list):  # a list of candidates or of edits; "[1]" in prose is neither
            return bool(v) and all(isinstance(e, (dict, list)) for e in v)
        return isinstance(v, dict) and ("candidates" in v or "edits" in v)

    value = extract_first_json(text or "", looks_right, openers="{[")
    if value is None:
        any_json = extract_first_json(text or "", lambda v: isinstance(v, (dict, list)), openers="{[")
        if _is_unclosed(_clean_answer(text or "")):
            errors.append({"code": "invalid_json", "message": "the JSON is not closed (answer cut off? raise "
                                                              "optimizer_max_new_tokens)"})
        elif any_json is None:
            errors.append({"code": "invalid_json", "message": "no parsable JSON object or list in the answer"})
        else:
            errors.append({"code": "wrong_schema", "message": "JSON found but it has no 'candidates' or 'edits'"})
        return [], errors
    if isinstance(value, dict) and "candidates" in value:
        raw_candidates = value["candidates"]
    elif isinstance(value, dict):
        raw_candidates = [value]
    else:
        # a list of candidates, or a bare list of edits (one candidate)
        is_edit_list = bool(value) and all(isinstance(e, dict) and "op" in e for e in value)
        raw_candidates = [value] if is_edit_list else value
    if not isinstance(raw_candidates, list):
        errors.append({"code": "wrong_schema", "message": "'candidates' is not a list"})
        return [], errors
    if not raw_candidates:
        errors.append({"code": "no_candidates", "message": "the answer proposes no candidate"})
        return [], errors
    if len(raw_candidates) > k:
        errors.append({"code": "too_many_candidates",
                       "message": f"{len(raw_candidates)} candidates returned, {k} asked; kept the first {k}"})
        raw_candidates = raw_candidates[:k]
    candidates: List[Candidate] = []
    seen: Dict[str, int] = {}
    for index, raw in enumerate(raw_candidates):
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
        candidates.append(cand)
    return candidates, errors


# ----------------------------------------------------------------------------------------------------------
# Backends
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Generation:
    """A backend's answer to one prompt: ``text``, or ``error`` (a one-line reason) when generation failed."""

    text: Optional[str]
    error: Optional[str] = None


class GenerativeBackend(Protocol):
    """Anything that turns prompts (lists of ``str`` and ``PIL.Image`` parts) into answers, one per prompt,
    in order. It must not raise for a failed prompt: it returns ``Generation(None, error)`` instead."""

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        ...


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


class TransformersBackend:
    """A local generative VLM (Qwen3-VL and other ``AutoModelForImageTextToText`` models) with greedy decoding.

    Args:
        model: checkpoint folder or Hub id, or an already loaded model (then pass ``processor``).
        processor: the model's processor (loaded from ``model`` when it is a path).
        device, dtype: see :func:`modeling_miescore.scoring.loading.resolve_device` / ``resolve_dtype``.
        batch_size: prompts per ``generate`` call (left padding).
        max_pixels, min_pixels: pixel budget per image passed to the image processor (None: its default).
    """

    def __init__(self, model: Any, processor: Any = None, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 1, max_pixels: Optional[int] = 1_048_576, min_pixels: Optional[int] = None):
        import torch  # noqa: F401  (fail early if torch is missing)

        from ..scoring.loading import ModelLoadError, resolve_device, resolve_dtype

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.max_pixels, self.min_pixels = max_pixels, min_pixels
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForImageTextToText, AutoProcessor

            self.device = resolve_device(device)
            torch_dtype = resolve_dtype(dtype, self.device)
            try:
                processor = processor or AutoProcessor.from_pretrained(os.fspath(model))
                model = AutoModelForImageTextToText.from_pretrained(os.fspath(model), dtype=torch_dtype)
            except (OSError, ValueError) as err:
                raise ModelLoadError(f"could not load generative model '{model}': {err}") from None
            model = model.to(self.device)
        else:
            if processor is None:
                raise ValueError("pass the processor together with an already loaded model")
            self.device = str(next(model.parameters()).device)
        self.model = model.eval()
        self.processor = processor

    def _messages(self, parts: Sequence[Part]) -> Tuple[List[dict], List[Any]]:
        content, images = [], []
        for part in parts:
            if isinstance(part, str):
                if content and content[-1]["type"] == "text":
                    content[-1]["text"] += part
                else:
                    content.append({"type": "text", "text": part})
            else:
                content.append({"type": "image"})
                images.append(part)
        return [{"role": "user", "content": content}], images

    def _size_kwargs(self) -> dict:
        if self.max_pixels is None and self.min_pixels is None:
            return {}
        image_processor = getattr(self.processor, "image_processor", None)
        size = dict(getattr(image_processor, "size", None) or {})
        if self.max_pixels is not None:
            size["longest_edge"] = int(self.max_pixels)
        if self.min_pixels is not None:
            size["shortest_edge"] = int(self.min_pixels)
        if "shortest_edge" in size and "longest_edge" in size and size["shortest_edge"] > size["longest_edge"]:
            size["shortest_edge"] = size["longest_edge"]
        return {"size": size}

    def _generate_batch(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[str]:
        import torch

        texts, images = [], []
        for parts in prompts:
            messages, imgs = self._messages(parts)
            texts.append(self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            images.extend(imgs)
        batch = self.processor(text=texts, images=images or None, padding=True, padding_side="left",
                               return_tensors="pt", **(self._size_kwargs() if images else {}))
        batch = batch.to(self.device)
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        with torch.inference_mode():
            out = self.model.generate(**batch, max_new_tokens=int(max_new_tokens), do_sample=False,
                                      pad_token_id=tokenizer.pad_token_id)
        new_tokens = out[:, batch["input_ids"].shape[1]:]
        return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        results: List[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start:start + self.batch_size]
            try:
                results.extend(Generation(t) for t in self._generate_batch(chunk, max_new_tokens))
            except (RuntimeError, ValueError, TypeError, IndexError) as err:
                # e.g. CUDA OOM or an image the processor rejects: record it, keep the loop alive
                logger.warning("generation failed for %d prompt(s): %s", len(chunk), _one_line(err))
                results.extend(Generation(None, _one_line(err)) for _ in chunk)
        return results


class OpenAIBackend:
    """Any OpenAI-compatible chat server (vLLM, SGLang, OpenAI, ...), through :class:`ChatClient`.

    The API key is read from the environment variable ``api_key_env`` (never passed as an argument).
    ``num_workers`` requests run concurrently (answers keep the prompt order). ``temperature`` 0 = greedy.
    ``image_format``/``max_pixels`` control how images are encoded in the request.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 2, num_workers: int = 4, temperature: float = 0.0, image_format: str = "PNG",
                 max_pixels: Optional[int] = 1_048_576, client: Any = None):
        from ..judges.chat_client import ChatClient

        self.client = client or ChatClient(base_url, model, api_key_env=api_key_env, timeout=timeout,
                                           max_retries=max_retries)
        self.num_workers = max(1, int(num_workers))
        self.temperature = float(temperature)
        self.image_format = image_format
        self.max_pixels = max_pixels

    def _one(self, parts: Sequence[Part], max_new_tokens: int) -> Generation:
        from ..judges.chat_client import ChatError, user_message

        try:
            message = user_message(list(parts), image_format=self.image_format, max_pixels=self.max_pixels)
            return Generation(self.client.chat([message], temperature=self.temperature, max_tokens=int(max_new_tokens)))
        except ChatError as err:
            return Generation(None, f"ChatError[{err.kind}]: {' '.join(str(err).split())[:300]}")
        except (TypeError, ValueError, OSError) as err:
            return Generation(None, _one_line(err))

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        if self.num_workers == 1 or len(prompts) <= 1:
            return [self._one(p, max_new_tokens) for p in prompts]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(self.num_workers, len(prompts))) as pool:
            return list(pool.map(lambda p: self._one(p, max_new_tokens), prompts))

    def close(self) -> None:
        self.client.close()


# ----------------------------------------------------------------------------------------------------------
# Evaluator (eq. 5) and optimiser (eq. 7)
# ----------------------------------------------------------------------------------------------------------


@dataclass
class EvalRecord:
    """One rollout: ``pred`` (VQ, IF, AP on 0..score_max) or None with ``error``; ``raw`` is the answer
    (truncated to ``SkillEvaluator.keep_raw_chars``)."""

    id: str
    pred: Optional[Tuple[float, float, float]]
    mos: Tuple[float, float, float]
    error: Optional[str] = None
    raw: Optional[str] = None


class SkillEvaluator:
    """``f(S, x)`` of eq. 5: prompts ``backend`` with the skill and parses the three scores.

    ``score_max``: the scale the answer format asks for (5 matches the default skill's 0-5 bands; use 100
    with a 0-100 rubric). ``batch_size``: prompts per backend call (progress granularity).
    """

    def __init__(self, backend: GenerativeBackend, score_max: float = 5.0, max_new_tokens: int = 256,
                 batch_size: int = 8, keep_raw_chars: int = 2000):
        if not score_max > 0:
            raise ValueError(f"score_max must be > 0, got {score_max}")
        self.backend = backend
        self.score_max = float(score_max)
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = max(1, int(batch_size))
        self.keep_raw_chars = int(keep_raw_chars)

    def evaluate(self, skill: str, samples: Sequence[SkillSample], progress: bool = False,
                 desc: str = "rollout") -> List[EvalRecord]:
        records: List[EvalRecord] = []
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(samples), desc=desc, leave=False)
        for start in range(0, len(samples), self.batch_size):
            chunk = samples[start:start + self.batch_size]
            prompts = [build_evaluator_prompt(skill, s, self.score_max) for s in chunk]
            gens = self.backend.generate(prompts, self.max_new_tokens)
            if len(gens) != len(chunk):
                raise RuntimeError(f"backend returned {len(gens)} answers for {len(chunk)} prompts")
            for sample, gen in zip(chunk, gens):
                if gen.text is None:
                    records.append(EvalRecord(sample.id, None, sample.mos, f"backend_error: {gen.error}", None))
                    continue
                parsed = parse_evaluator_output(gen.text, self.score_max)
                pred = None if parsed.scores is None else tuple(parsed.scores[d] for d in DIMENSIONS)
                records.append(EvalRecord(sample.id, pred, sample.mos, parsed.error, gen.text[: self.keep_raw_chars]))
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return records


class SkillOptimizer:
    """``O`` of eq. 7: asks ``backend`` (text only) for ``k`` candidates of bounded edits."""

    def __init__(self, backend: GenerativeBackend, k: int = 4, bounds: EditBounds = EditBounds(),
                 max_new_tokens: int = 2048, score_max: float = 5.0):
        if k < 1:
            raise ValueError(f"k (num_candidates) must be >= 1, got {k}")
        self.backend, self.k, self.bounds = backend, int(k), bounds
        self.max_new_tokens, self.score_max = int(max_new_tokens), float(score_max)

    def propose(self, skill: str, failures: Sequence[Mapping[str, Any]],
                successes: Sequence[Mapping[str, Any]] = ()) -> Tuple[List[Candidate], List[Dict[str, str]], str]:
        """Returns ``(candidates, errors, raw_answer)``; backend failures become an error, never an exception."""
        prompt = build_optimizer_prompt(skill, failures, self.k, self.bounds, self.score_max, successes=successes)
        gen = self.backend.generate([[prompt]], self.max_new_tokens)[0]
        if gen.text is None:
            return [], [{"code": "backend_error", "message": str(gen.error)}], ""
        candidates, errors = parse_optimizer_output(gen.text, skill, self.k, self.bounds)
        return candidates, errors, gen.text


# ----------------------------------------------------------------------------------------------------------
# Failures (eq. 6) and the selection objective (eq. 8)
# ----------------------------------------------------------------------------------------------------------


def deviation(pred: Sequence[float], mos: Sequence[float], score_max: float = 5.0) -> float:
    """``|| pred / score_max - mos / 100 ||_2`` over (VQ, IF, AP): eq. 6's distance on a common 0-1 scale."""
    p = np.asarray(pred, dtype=np.float64) / score_max
    y = np.asarray(mos, dtype=np.float64) / MOS_SCALE
    return float(np.linalg.norm(p - y))


def select_failures(records: Sequence[EvalRecord], samples: Mapping[str, SkillSample], num_failures: int = 8,
                    num_unparsed: int = 2, score_max: float = 5.0, min_deviation: float = 0.0) -> List[Dict[str, Any]]:
    """Eq. 6: the ``num_failures`` scored rollouts with the largest deviation (above ``min_deviation``),
    then up to ``num_unparsed`` rollouts whose answer could not be parsed (they tell the optimiser that the
    skill confuses the evaluator). Ties break by sample id, so the choice is deterministic."""
    scored = [(deviation(r.pred, r.mos, score_max), r) for r in records if r.pred is not None]
    scored = [t for t in scored if t[0] > min_deviation]
    scored.sort(key=lambda t: (-t[0], t[1].id))
    out = []
    for dev, r in scored[:num_failures]:
        s = samples[r.id]
        out.append({"id": r.id, "instruction": s.instruction, "num_sources": len(s.sources), "pred": list(r.pred),
                    "mos": list(r.mos), "deviation": dev, "error": None, "raw": None})
    unparsed = sorted((r for r in records if r.pred is None), key=lambda r: r.id)[:num_unparsed]
    for r in unparsed:
        s = samples[r.id]
        out.append({"id": r.id, "instruction": s.instruction, "num_sources": len(s.sources), "pred": None,
                    "mos": list(r.mos), "deviation": None, "error": r.error, "raw": (r.raw or "")[:500]})
    return out


def select_successes(records: Sequence[EvalRecord], samples: Mapping[str, SkillSample], num_successes: int = 2,
                     score_max: float = 5.0, exclude: Iterable[str] = ()) -> List[Dict[str, Any]]:
    """The ``num_successes`` scored rollouts with the smallest deviation (the paper's optimiser reflects on
    "successful and failed evaluations"), not among ``exclude``; same record format as :func:`select_failures`."""
    skip = set(exclude)
    scored = sorted(((deviation(r.pred, r.mos, score_max), r)
                     for r in records if r.pred is not None and r.id not in skip), key=lambda t: (t[0], t[1].id))
    return [{"id": r.id, "instruction": samples[r.id].instruction, "num_sources": len(samples[r.id].sources),
             "pred": list(r.pred), "mos": list(r.mos), "deviation": dev, "error": None, "raw": None}
            for dev, r in scored[:num_successes]]


def validation_srcc(records: Sequence[EvalRecord], min_coverage: float = 0.5) -> Dict[str, Any]:
    """Eq. 8's objective on one set of rollouts: mean over (VQ, IF, AP) of SRCC(pred, MOS).

    Computed on the answers that parsed (failures are never scored). ``objective`` is None when fewer than
    ``max(3, ceil(min_coverage * n))`` answers parsed, so a skill that breaks the evaluator cannot win on a
    lucky subset. A dimension whose predictions are constant has no ranking information: its SRCC is
    reported as None and counts as 0 in the mean.
    """
    from ..evaluation.metrics.correlation import srcc

    n = len(records)
    ok = [r for r in records if r.pred is not None]
    out: Dict[str, Any] = {"n": n, "n_parsed": len(ok), "coverage": (len(ok) / n) if n else 0.0,
                           "srcc": {d: None for d in DIMENSIONS}, "objective": None}
    if len(ok) < max(3, math.ceil(min_coverage * n)):
        return out
    pred = np.asarray([r.pred for r in ok], dtype=np.float64)
    mos = np.asarray([r.mos for r in ok], dtype=np.float64)
    values = []
    for j, dim in enumerate(DIMENSIONS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = srcc(pred[:, j], mos[:, j])
        if math.isnan(value):
            values.append(0.0)
        else:
            out["srcc"][dim] = value
            values.append(value)
    out["objective"] = float(np.mean(values))
    return out


# ----------------------------------------------------------------------------------------------------------
# The loop and its history
# ----------------------------------------------------------------------------------------------------------


@dataclass
class SkillOptConfig:
    """Settings of :func:`optimize_skill` (all of them are recorded in the history).

    ``num_iterations``: iterations in total (a resumed run continues up to this number).
    ``num_candidates``: K of eq. 7. ``train_samples_per_iteration``: rollout subset drawn from the training
    set each iteration (seeded by ``seed`` and the iteration, so a resumed run draws the same subset).
    ``num_failures`` / ``num_unparsed_failures``: failure cases shown to the optimiser (eq. 6);
    ``num_successes``: best-agreeing cases shown for contrast.
    ``min_val_coverage``: fraction of validation answers that must parse for a skill to be eligible.
    ``min_improvement``: a candidate must beat the current skill's objective by more than this.
    ``max_edits_per_candidate``, ``max_line_chars``, ``max_skill_chars``: :class:`EditBounds`.
    """

    num_iterations: int = 5
    num_candidates: int = 4
    train_samples_per_iteration: int = 64
    num_failures: int = 8
    num_unparsed_failures: int = 2
    num_successes: int = 2
    min_val_coverage: float = 0.5
    min_improvement: float = 0.0
    max_edits_per_candidate: int = 4
    max_line_chars: int = 500
    max_skill_chars: int = 8000
    score_max: float = 5.0
    seed: int = 0

    def bounds(self) -> EditBounds:
        return EditBounds(self.max_edits_per_candidate, self.max_line_chars, self.max_skill_chars)

    def validate(self) -> None:
        problems = []
        for name in ("num_iterations", "num_candidates", "train_samples_per_iteration"):
            if getattr(self, name) < (0 if name == "num_iterations" else 1):
                problems.append(f"{name}={getattr(self, name)}")
        if not 0.0 <= self.min_val_coverage <= 1.0:
            problems.append(f"min_val_coverage={self.min_val_coverage} (must be in [0, 1])")
        if self.num_failures < 0 or self.num_unparsed_failures < 0 or self.num_successes < 0:
            problems.append("num_failures / num_unparsed_failures / num_successes must be >= 0")
        for name in ("max_edits_per_candidate", "max_line_chars", "max_skill_chars"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} (must be >= 1)")
        if not self.score_max > 0:
            problems.append(f"score_max={self.score_max} (must be > 0)")
        if problems:
            raise MIEScoreInputError("invalid skill optimisation settings: " + "; ".join(problems))


# Settings that change what a resumed iteration would compute; a history written with other values
# cannot be continued.
_RESUME_KEYS = ("num_candidates", "train_samples_per_iteration", "num_failures", "num_unparsed_failures",
                "num_successes",
                "min_val_coverage", "min_improvement", "max_edits_per_candidate", "max_line_chars",
                "max_skill_chars", "score_max", "seed")


@dataclass
class SkillOptResult:
    """Final skill, its validation result, the initial skill's, and every iteration record."""

    skill: str
    val: Dict[str, Any]
    initial_val: Dict[str, Any]
    iterations: List[Dict[str, Any]] = field(default_factory=list)
    history_path: Optional[str] = None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _ids_sha(ids: Iterable[str]) -> str:
    return _sha("\n".join(ids))


def read_history(path: Union[str, os.PathLike]) -> List[Dict[str, Any]]:
    """The records of a history file. A last line cut off by a crash is dropped (with a warning); any other
    unreadable line raises :class:`SkillHistoryError` naming it."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "type" not in record:
                raise ValueError("not a history record")
        except ValueError as err:
            if number == len(lines):
                logger.warning("history %s: dropping the incomplete last line %d (%s)", path, number, err)
                break
            raise SkillHistoryError(f"history file '{path}' line {number} is not a valid record ({err}); "
                                    "fix or delete the file, or pass a new history path") from None
        records.append(record)
    return records


def _write_history(path: Path, records: Sequence[Dict[str, Any]]) -> None:
    """Rewrite the whole file atomically (a crash leaves the previous complete file, never half a record)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class _Samples:
    """Samples decoded on access: a MIE-Bench split held as decoded images would not fit in memory, and only
    the rollout subset and the validation batches are needed at any time.

    A ``datasets.Dataset`` is checked through its light columns (ids, MOS) without decoding images; other
    sequences (lists of rows / SkillSample) are converted and checked at once."""

    def __init__(self, rows: Any, name: str):
        columns = getattr(rows, "column_names", None)
        if columns is not None and hasattr(rows, "select_columns"):
            missing = [c for c in ("instruction", "source_images", "edited_image", *MOS_COLUMNS) if c not in columns]
            if missing:
                raise MIEScoreInputError(f"the {name} split lacks the column(s) {', '.join(missing)}; "
                                         "skill optimisation needs MIE-Bench rows")
            light = rows.select_columns([c for c in ("id", *MOS_COLUMNS) if c in columns]).to_dict()
            self.ids = [str(x) for x in light["id"]] if "id" in light else [str(i) for i in range(len(rows))]
            for key in MOS_COLUMNS:
                bad = [i for i, v in enumerate(light[key]) if v is None or not math.isfinite(float(v))]
                if bad:
                    raise MIEScoreInputError(f"the {name} split has a missing or NaN {key} in row {bad[0]} "
                                             f"(id {self.ids[bad[0]]!r}) and {len(bad) - 1} more")
            self.rows = rows
            self.decoded = False
        else:
            self.rows = [to_skill_sample(rows[i], i) for i in range(len(rows))]
            self.ids = [s.id for s in self.rows]
            self.decoded = True
        seen = set()
        for sample_id in self.ids:
            if sample_id in seen:
                raise MIEScoreInputError(f"the {name} split has the id {sample_id!r} twice; sample ids must be unique")
            seen.add(sample_id)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self.decoded:
            return self.rows[index]
        sample = to_skill_sample(self.rows[index], index)
        sample.id = self.ids[index]
        return sample


def _records_dicts(records: Sequence[EvalRecord], keep_raw: bool = False) -> List[Dict[str, Any]]:
    return [{"id": r.id, "pred": None if r.pred is None else list(r.pred), "error": r.error,
             **({"raw": r.raw} if keep_raw else {})} for r in records]


def optimize_skill(train: Any, val: Any, evaluator: SkillEvaluator, optimizer: SkillOptimizer, *,
                   initial_skill: Optional[str] = None, config: SkillOptConfig = SkillOptConfig(),
                   history_path: Union[str, os.PathLike], progress: bool = True) -> SkillOptResult:
    """Run (or continue) skill optimisation (eqs. 5-8) and return the best skill found.

    ``train`` / ``val``: sequences of MIE-Bench rows, dicts or :class:`SkillSample` (a ``datasets.Dataset``
    works; its rows are decoded only when evaluated). ``initial_skill``: S^(0) (default: the MIEScore default skill).
    ``evaluator.score_max`` and ``optimizer.k``/``bounds`` must agree with ``config``.

    History (JSONL, rewritten atomically after every iteration): a ``"start"`` record (settings, initial
    skill, its validation result) and one ``"iteration"`` record per completed iteration with the skill
    before and after, the rollout summary and the failures (eq. 6), the optimiser's raw answer and errors,
    every candidate (edits, resulting skill or rejection reason, validation result), the chosen candidate
    index (None: the current skill was kept). Rerunning with the same ``history_path`` resumes after the
    last completed iteration; settings that would change the results must be the same (else
    :class:`SkillHistoryError`).
    """
    from ..skill_miescore import DEFAULT_SKILL

    config.validate()
    if evaluator.score_max != config.score_max:
        raise ValueError(f"evaluator.score_max={evaluator.score_max} but config.score_max={config.score_max}")
    if optimizer.k != config.num_candidates or optimizer.bounds != config.bounds():
        raise ValueError("optimizer.k / optimizer.bounds differ from config.num_candidates / its edit bounds")
    skill = initial_skill if initial_skill is not None else DEFAULT_SKILL
    if not skill.strip():
        raise MIEScoreInputError("the initial skill is empty; pass a non-empty rubric text")
    train_samples = _Samples(train, "train")
    val_samples = _Samples(val, "validation")
    if not train_samples or len(val_samples) < 3:
        raise MIEScoreInputError(f"need training samples and at least 3 validation samples, got "
                                 f"{len(train_samples)} and {len(val_samples)}")
    path = Path(history_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(config, k) for k in _RESUME_KEYS}
    fingerprint = {"settings": settings, "initial_skill_sha": _sha(skill),
                   "train_ids_sha": _ids_sha(train_samples.ids), "val_ids_sha": _ids_sha(val_samples.ids)}
    history = read_history(path)

    if history:
        start = history[0]
        if start.get("type") != "start":
            raise SkillHistoryError(f"history file '{path}' does not begin with a start record")
        old = start.get("fingerprint", {})
        diff = [k for k in ("initial_skill_sha", "train_ids_sha", "val_ids_sha") if old.get(k) != fingerprint[k]]
        diff += [f"settings.{k}" for k in _RESUME_KEYS if old.get("settings", {}).get(k) != settings[k]]
        if diff:
            raise SkillHistoryError(
                f"history file '{path}' was written by a run with different {', '.join(diff)}; "
                "rerun with the original settings to resume, or pass a new history path to start over")
        iterations = [r for r in history if r.get("type") == "iteration"]
        for expected, record in enumerate(iterations):
            if record.get("iteration") != expected:
                raise SkillHistoryError(f"history file '{path}': iteration records are out of order "
                                        f"(found {record.get('iteration')} where {expected} was expected)")
        initial_val = start["val"]
        current, current_val = (iterations[-1]["skill"], iterations[-1]["val"]) if iterations else (skill, initial_val)
        if iterations:
            logger.info("resuming skill optimisation after iteration %d from %s", len(iterations) - 1, path)
        history = [start, *iterations]
    else:
        initial_records = evaluator.evaluate(skill, val_samples, progress, desc="validation (initial skill)")
        initial_val = validation_srcc(initial_records, config.min_val_coverage)
        # num_iterations is left out: extending a finished run must not change its start record
        recorded = {k: v for k, v in asdict(config).items() if k != "num_iterations"}
        start = {"type": "start", "fingerprint": fingerprint, "config": recorded, "initial_skill": skill,
                 "val": initial_val, "val_records": _records_dicts(initial_records)}
        history = [start]
        _write_history(path, history)
        iterations = []
        current, current_val = skill, initial_val
        logger.info("initial skill: validation objective %s", initial_val["objective"])

    for t in range(len(iterations), config.num_iterations):
        # eq. 5-6: rollouts with the current skill on a seeded training subset, then the failures
        rng = random.Random(f"{config.seed}:{t}")
        m = min(config.train_samples_per_iteration, len(train_samples))
        subset = [train_samples[i] for i in sorted(rng.sample(range(len(train_samples)), m))]
        subset_by_id = {s.id: s for s in subset}
        rollouts = evaluator.evaluate(current, subset, progress, desc=f"iteration {t}: rollouts")
        train_summary = validation_srcc(rollouts, 0.0)
        failures = select_failures(rollouts, subset_by_id, config.num_failures, config.num_unparsed_failures,
                                   config.score_max)
        successes = select_successes(rollouts, subset_by_id, config.num_successes, config.score_max,
                                     exclude=[f["id"] for f in failures])
        # eq. 7: K bounded candidates
        candidates, opt_errors, raw = optimizer.propose(current, failures, successes)
        for c in candidates:
            if c.error:
                logger.info("iteration %d: candidate %d rejected (%s: %s)", t, c.index, c.error, c.error_message)
        for e in opt_errors:
            logger.info("iteration %d: optimiser answer problem (%s: %s)", t, e["code"], e["message"])
        # eq. 8: validation SRCC of every valid candidate; keep the current skill unless one beats it
        # A skill whose validation answers mostly fail to parse has objective None: any eligible candidate
        # beats it. Ties between candidates go to the earlier one.
        threshold = current_val["objective"]
        best_index, best_objective = None, None
        for c in candidates:
            if c.skill is None:
                continue
            val_records = evaluator.evaluate(c.skill, val_samples, progress, desc=f"iteration {t}: candidate {c.index}")
            c.val = validation_srcc(val_records, config.min_val_coverage)
            obj = c.val["objective"]
            if obj is None or (threshold is not None and obj <= threshold + config.min_improvement):
                continue
            if best_objective is None or obj > best_objective:
                best_index, best_objective = c.index, obj
        before = current
        if best_index is not None:
            chosen = next(c for c in candidates if c.index == best_index)
            current, current_val = chosen.skill, chosen.val
        record = {
            "type": "iteration", "iteration": t, "skill_before": before, "skill": current, "val": current_val,
            "chosen": best_index, "train": {"n": len(subset), "n_parsed": train_summary["n_parsed"],
                                            "srcc": train_summary["srcc"], "objective": train_summary["objective"]},
            "failures": failures, "successes": successes, "rollouts": _records_dicts(rollouts),
            "optimizer_raw": raw, "optimizer_errors": opt_errors,
            "candidates": [c.to_dict() for c in candidates],
            "rollout_errors": sorted({r.error.split(":")[0] for r in rollouts if r.error}),
        }
        history.append(record)
        iterations.append(record)
        _write_history(path, history)
        logger.info("iteration %d: %s (validation objective %s)", t,
                    "kept the current skill" if best_index is None else f"chose candidate {best_index}",
                    current_val["objective"])
    return SkillOptResult(skill=current, val=current_val, initial_val=initial_val, iterations=iterations,
                          history_path=str(path))
