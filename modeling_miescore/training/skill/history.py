"""The skill-optimisation history file (JSONL): one ``"start"`` record, then one ``"iteration"`` record per
completed iteration. Reading it (a line cut off by a crash is dropped), rewriting it atomically, and checking
that a run may continue it (same data, initial skill and result-changing settings)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from ...hub.errors import MIEScoreInputError
from ...utils.atomic_files import atomic_write
from .config import RESUME_KEYS, SkillOptConfig
from .evaluation import EvalRecord

logger = logging.getLogger(__name__)

__all__ = ["SkillHistoryError", "read_history", "records_dicts", "resume_history", "run_fingerprint",
           "write_history"]


class SkillHistoryError(MIEScoreInputError):
    """The history file cannot be resumed (corrupt, or written by a run with other settings)."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _ids_sha(ids: Iterable[str]) -> str:
    return _sha("\n".join(ids))


def run_fingerprint(config: SkillOptConfig, initial_skill: str, train_ids: Sequence[str],
                    val_ids: Sequence[str]) -> Dict[str, Any]:
    """What a run's results depend on: the result-changing settings, the initial skill and the sample ids."""
    return {"settings": {k: getattr(config, k) for k in RESUME_KEYS}, "initial_skill_sha": _sha(initial_skill),
            "train_ids_sha": _ids_sha(train_ids), "val_ids_sha": _ids_sha(val_ids)}


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


def write_history(path: Path, records: Sequence[Dict[str, Any]]) -> None:
    """Rewrite the whole file atomically (a crash leaves the previous complete file, never half a record)."""
    with atomic_write(path) as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")


def resume_history(path: Path, fingerprint: Dict[str, Any]) -> Optional[List[Dict[str, Any]]]:
    """The start record and the completed iteration records of ``path``, or None when there is no history yet.

    Raises :class:`SkillHistoryError` when the file does not begin with a start record, was written by a run
    with another fingerprint (:func:`run_fingerprint`; the differing keys are named) or has its iteration
    records out of order."""
    history = read_history(path)
    if not history:
        return None
    start = history[0]
    if start.get("type") != "start":
        raise SkillHistoryError(f"history file '{path}' does not begin with a start record")
    old = start.get("fingerprint", {})
    diff = [k for k in ("initial_skill_sha", "train_ids_sha", "val_ids_sha") if old.get(k) != fingerprint[k]]
    diff += [f"settings.{k}" for k in RESUME_KEYS if old.get("settings", {}).get(k) != fingerprint["settings"][k]]
    if diff:
        raise SkillHistoryError(
            f"history file '{path}' was written by a run with different {', '.join(diff)}; "
            "rerun with the original settings to resume, or pass a new history path to start over")
    iterations = [r for r in history if r.get("type") == "iteration"]
    for expected, record in enumerate(iterations):
        if record.get("iteration") != expected:
            raise SkillHistoryError(f"history file '{path}': iteration records are out of order "
                                    f"(found {record.get('iteration')} where {expected} was expected)")
    if iterations:
        logger.info("resuming skill optimisation after iteration %d from %s", len(iterations) - 1, path)
    return [start, *iterations]


def records_dicts(records: Sequence[EvalRecord]) -> List[Dict[str, Any]]:
    """Evaluator records as history entries (id, prediction, error; not the raw answer)."""
    return [{"id": r.id, "pred": None if r.pred is None else list(r.pred), "error": r.error} for r in records]
