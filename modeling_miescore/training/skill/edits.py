"""Skills as numbered lines and the bounded line edits the optimiser proposes (MIEScore paper, eq. 7).

A skill is the rubric text at the start of every evaluator prompt. The optimiser sees it with 1-based line
numbers (:func:`number_lines`) and answers with edits (:class:`Edit`: add / delete / replace one line);
:func:`apply_edits` applies one candidate's edits within :class:`EditBounds` or rejects them with a
:class:`SkillEditError` whose ``code`` is a key of :data:`EDIT_ERROR_CODES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

__all__ = ["EDIT_ERROR_CODES", "Edit", "EditBounds", "SkillEditError", "apply_edits", "number_lines", "skill_lines",
           "skill_text"]


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
        raise SkillEditError("line_too_long", f"edit {index} ({edit.op}) text has {len(edit.text)} characters, more "
                                              f"than max_line_chars={bounds.max_line_chars}")


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
        raise SkillEditError("too_many_edits",
                             f"{len(edits)} edits, more than max_edits_per_candidate={bounds.max_edits}")
    changed: Dict[int, Edit] = {}
    inserts: Dict[int, List[str]] = {}
    for index, edit in enumerate(edits, start=1):
        if edit.op == "add":
            if not 0 <= edit.line <= n:
                raise SkillEditError("line_out_of_range",
                                     f"edit {index} adds after line {edit.line}; the skill has lines 1..{n} (0 = top)")
            _check_text(edit, index, bounds)
            inserts.setdefault(edit.line, []).append(edit.text.strip())
        elif edit.op in ("delete", "replace"):
            if not 1 <= edit.line <= n:
                raise SkillEditError("line_out_of_range",
                                     f"edit {index} {edit.op}s line {edit.line}; the skill has lines 1..{n}")
            if edit.line in changed:
                raise SkillEditError("conflicting_edits", f"edit {index} ({edit.op}) and an earlier "
                                                          f"{changed[edit.line].op} both target line {edit.line}")
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
        raise SkillEditError("skill_too_long", f"the edited skill has {len(new)} characters, more than "
                                               f"max_skill_chars={bounds.max_skill_chars}")
    if new == skill_text(lines):
        raise SkillEditError("no_change", "the edits leave the skill unchanged")
    return new

