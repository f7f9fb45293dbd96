"""Rate limiting for the reward server's logs: a flood of identical errors (EMFILE on ``accept()``, a client
hammering a broken request) must not fill the disk with tracebacks.

:class:`RepeatedMessageFilter` lets the first ``burst`` records of one kind through per ``interval_s``, turns
the next one into a single summary line (no traceback) and drops the rest; the first record of the kind in a
later interval says how many were dropped. A kind is the logger, the level, the first line of the message
template and the exception type. :func:`install_log_rate_limit` puts one filter on the loggers the server
writes to (asyncio's own, uvicorn's and ours).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, Iterable

__all__ = ["RepeatedMessageFilter", "install_log_rate_limit", "SERVER_LOGGERS"]

# asyncio logs accept() failures (EMFILE) through the loop's exception handler; uvicorn logs protocol errors.
SERVER_LOGGERS = ("asyncio", "uvicorn.error", "miescore.server")


@dataclasses.dataclass
class _Window:
    start: float
    seen: int = 0
    dropped: int = 0


class RepeatedMessageFilter(logging.Filter):
    """Pass at most ``burst`` records of a kind per ``interval_s``, then one summary, then nothing until the
    interval ends (``clock`` is injectable for tests)."""

    def __init__(self, burst: int = 5, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 max_kinds: int = 1024):
        super().__init__()
        if burst < 1 or interval_s <= 0:
            raise ValueError("burst must be >= 1 and interval_s > 0")
        self.burst, self.interval_s, self.clock, self.max_kinds = burst, interval_s, clock, max_kinds
        self._windows: dict[tuple, _Window] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _kind(record: logging.LogRecord) -> tuple:
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        return record.name, record.levelno, str(record.msg).split("\n", 1)[0][:200], exc_type

    def filter(self, record: logging.LogRecord) -> bool:
        key, now = self._kind(record), self.clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - window.start >= self.interval_s:
                if window is None and len(self._windows) >= self.max_kinds:
                    self._forget_old(now)
                dropped = window.dropped if window is not None else 0
                self._windows[key] = window = _Window(start=now)
                if dropped:
                    _rewrite(record, f"[{dropped} more like the next line were suppressed in the previous "
                                     f"{self.interval_s:g} s] {record.getMessage()}")
            window.seen += 1
            if window.seen <= self.burst:
                return True
            if window.seen == self.burst + 1:
                _rewrite(record, f"{record.getMessage().splitlines()[0]} [repeated {window.seen} times in "
                                 f"{now - window.start:.0f} s; further ones are suppressed for up to "
                                 f"{self.interval_s:g} s]", keep_traceback=False)
                return True
            window.dropped += 1
            return False

    def _forget_old(self, now: float) -> None:
        for key in [k for k, w in self._windows.items() if now - w.start >= self.interval_s]:
            del self._windows[key]
        if len(self._windows) >= self.max_kinds:  # all recent: forget the oldest half
            for key in sorted(self._windows, key=lambda k: self._windows[k].start)[: self.max_kinds // 2]:
                del self._windows[key]


def _rewrite(record: logging.LogRecord, message: str, keep_traceback: bool = True) -> None:
    record.msg, record.args = message, None
    if not keep_traceback:
        record.exc_info, record.exc_text, record.stack_info = None, None, None


def install_log_rate_limit(names: Iterable[str] = SERVER_LOGGERS, burst: int = 5,
                           interval_s: float = 60.0) -> None:
    """Put a :class:`RepeatedMessageFilter` on each named logger (once: calling again changes nothing)."""
    for name in names:
        target = logging.getLogger(name)
        if not any(isinstance(f, RepeatedMessageFilter) for f in target.filters):
            target.addFilter(RepeatedMessageFilter(burst=burst, interval_s=interval_s))
