"""Append-only JSONL ledgers of the MER-Bench construction stages: one record per finished unit, keyed by ``id``.

A record is appended, flushed and fsynced before the stage moves on, so a crash loses at most the unit in
progress; a torn last line (a kill in the middle of a write) is cut off when the ledger is next opened for
writing, and ignored when it is only read. The first record of an id wins: a rerun never duplicates work.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Tuple

from ...scoring.jsonl_scoring import complete_lines

__all__ = ["append_records", "read_ledger"]

# (file, line number, line) of the damaged lines already reported: a long-running app re-reads its ledgers on
# every click, and each damaged line is reported once, not on every read.
_REPORTED: set = set()


def _report(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def read_ledger(path: Path, repair: bool = False, required: Tuple[str, ...] = (),
                report: Callable[[str], None] = _report) -> Dict[str, Dict[str, Any]]:
    """``{id: record}`` of a ledger, in file order (empty when it does not exist); ``repair`` truncates a torn
    last line in place (only a writer holding the folder's lock may ask for it).

    A damaged line (not JSON, not an object, no ``id`` or a missing ``required`` key) is skipped, so the rest of
    the ledger keeps working, and reported once through ``report`` with its line number."""
    path = Path(path)
    data, _ = complete_lines(path, repair)
    records: Dict[str, Dict[str, Any]] = {}
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            problem = None if isinstance(record, dict) else "not a JSON object"
        except (UnicodeDecodeError, ValueError, RecursionError) as err:
            record, problem = None, f"not JSON ({type(err).__name__})"
        if problem is None:
            missing = [key for key in ("id", *required) if key not in record]
            problem = f"no {', '.join(map(repr, missing))}" if missing else None
        if problem is not None:
            if (str(path), number, raw) not in _REPORTED:
                _REPORTED.add((str(path), number, raw))
                report(f"{path}: line {number} is damaged ({problem}); skipped (fix or remove the line)")
            continue
        records.setdefault(str(record["id"]), record)
    return records


def append_records(path: Path, records: Iterable[Dict[str, Any]]) -> int:
    """Append ``records`` (each with an ``id``) as JSON lines, then flush and fsync; returns how many."""
    lines = [json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n" for record in records]
    if not lines:
        return 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(lines))
        handle.flush()
        os.fsync(handle.fileno())
    return len(lines)
