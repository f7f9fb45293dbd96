"""Append-only JSONL ledgers of the MER-Bench construction stages: one record per finished unit, keyed by ``id``.

A record is appended, flushed and fsynced before the stage moves on, so a crash loses at most the unit in
progress; a torn last line (a kill in the middle of a write) is cut off when the ledger is next opened for
writing, and ignored when it is only read. The first record of an id wins: a rerun never duplicates work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable

from ...scoring.jsonl_scoring import read_predictions

__all__ = ["append_records", "read_ledger"]


def read_ledger(path: Path, repair: bool = False) -> Dict[str, Dict[str, Any]]:
    """``{id: record}`` of a ledger, in file order (empty when it does not exist); ``repair`` truncates a torn
    last line in place (only a writer holding the folder's lock may ask for it)."""
    raw = read_predictions(Path(path), repair=repair)[0]
    return {key: json.loads(line) for key, line in raw.items()}


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
