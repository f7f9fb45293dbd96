"""The on-disk answer cache of the call engine (:mod:`modeling_miescore.judges.call_engine`).

One SQLite file (write-ahead log) maps a request key to the model's answer and its token usage. Every answer is
committed as soon as it arrives, so a run killed at any point (even ``kill -9``) keeps every answer it received.
Only answers are stored, as received: a failed request is not (a rerun tries it again), while an answer a judge or
stage could not use gives the same flagged outcome on every rerun (``--no-cache`` or another ``--cache`` file asks
again). Shared safely by the threads of one process (one connection behind a lock) and by several processes
(SQLite's file locking; writers wait up to 60 s for each other).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, Optional

from ..hub.errors import MIEScoreInputError
from ..utils.closing import ClosesOnExit
from ..utils.text_hygiene import valid_text
from .chat_client import ChatCompletion

__all__ = ["CallCache", "CallCacheError"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    stage TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    finish_reason TEXT,
    created REAL NOT NULL
)
"""
_BATCH = 500  # keys per SELECT ... IN (...) (SQLite allows at least 999 variables)


class CallCacheError(MIEScoreInputError):
    """The cache file cannot be used (not an SQLite file, not writable, another schema)."""


def _count(value) -> Optional[int]:
    """A token count SQLite can store (a signed 64-bit integer), else None."""
    return value if isinstance(value, int) and 0 <= value < 2 ** 63 else None


class CallCache(ClosesOnExit):
    """Answers of model calls keyed by request key, in the SQLite file ``path`` (created if missing)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.is_dir():
            raise CallCacheError(f"cache '{self.path}' is a directory; pass a file path such as "
                                 f"'{self.path / 'calls.sqlite'}'")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # with WAL: a killed process loses no commit
            self._db.execute(_SCHEMA)
            self._db.execute("SELECT key, model, stage, text, prompt_tokens, completion_tokens, finish_reason "
                             "FROM answers LIMIT 1").fetchall()
        except sqlite3.DatabaseError as err:
            raise CallCacheError(f"cache '{self.path}' is not a usable call cache ({err}); move the file away "
                                 "or pass another cache path") from None

    def __repr__(self) -> str:
        return f"CallCache('{self.path}')"

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get_many(self, keys: Iterable[str]) -> Dict[str, ChatCompletion]:
        """The stored answers of those ``keys`` that have one."""
        keys = list(dict.fromkeys(keys))
        found: Dict[str, ChatCompletion] = {}
        with self._lock:
            for start in range(0, len(keys), _BATCH):
                chunk = keys[start:start + _BATCH]
                rows = self._db.execute(
                    "SELECT key, text, prompt_tokens, completion_tokens, finish_reason FROM answers WHERE key IN "
                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
                for key, text, prompt_tokens, completion_tokens, finish_reason in rows:
                    found[key] = ChatCompletion(text, prompt_tokens, completion_tokens, finish_reason, attempts=0)
        return found

    def get(self, key: str) -> Optional[ChatCompletion]:
        return self.get_many([key]).get(key)

    def put(self, key: str, model: str, stage: str, answer: ChatCompletion) -> None:
        """Store (or replace) one answer; committed before this returns."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, valid_text(model), valid_text(stage), valid_text(answer.text), _count(answer.prompt_tokens),
                 _count(answer.completion_tokens),
                 valid_text(answer.finish_reason) if answer.finish_reason is not None else None, time.time()))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def totals(self) -> Dict[str, Dict[str, int]]:
        """Per model and stage: stored answers and their prompt/completion tokens (what they cost when sent)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT model, stage, COUNT(*), COALESCE(SUM(prompt_tokens), 0), "
                "COALESCE(SUM(completion_tokens), 0) FROM answers GROUP BY model, stage ORDER BY model, stage"
            ).fetchall()
        out: Dict[str, Dict[str, int]] = {}
        for model, stage, count, prompt_tokens, completion_tokens in rows:
            out[f"{model} / {stage}"] = {"answers": count, "prompt_tokens": prompt_tokens,
                                         "completion_tokens": completion_tokens}
        return out
