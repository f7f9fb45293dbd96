"""The reward server's monitoring: Prometheus metrics at ``GET /metrics`` (one ``CollectorRegistry`` per server,
so two servers in one process never share counts) and rate-limited logs.

``miescore_requests_total`` has status 499 for a client that went away; ``miescore_failures_total`` counts by
``kind`` (:data:`FAILURE_KINDS`, all present from the first scrape at 0), ``header_timeout`` and
``too_many_connections`` counting connections closed before a request reached the app.

:func:`install_log_rate_limit`: a flood of identical errors (EMFILE on ``accept()``, a client hammering a broken
request) lets ``burst`` records of one kind through per ``interval_s``, then one summary line, then none.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256)

# Failure kinds are a closed set so dashboards can rely on them.
FAILURE_KINDS = (
    "malformed_json", "bad_base64", "corrupt_image", "too_large", "invalid_request", "unsupported_media_type",
    "unauthorized", "queue_full", "timeout", "body_timeout", "client_disconnected", "shutting_down",
    "model_error", "internal_error", "not_found", "header_timeout", "too_many_connections",
)


class ServerMetrics:
    """The metrics of one reward server (thread-safe ``prometheus_client`` metrics) in their own registry."""

    def __init__(self, prefix: str = "miescore"):
        self.registry = CollectorRegistry(auto_describe=True)
        p, registry = prefix, self.registry
        self.requests = Counter(f"{p}_requests", "HTTP requests answered, by endpoint and status code.",
                                ("endpoint", "status"), registry=registry)
        self.request_latency = Histogram(f"{p}_request_duration_seconds",
                                         "Time from request start to response, by endpoint.", ("endpoint",),
                                         registry=registry, buckets=LATENCY_BUCKETS)
        self.batch_size = Histogram(f"{p}_batch_size", "Samples per model call (dynamic batching).",
                                    registry=registry, buckets=BATCH_SIZE_BUCKETS)
        self.batch_latency = Histogram(f"{p}_batch_duration_seconds", "Wall time of one model call.",
                                       registry=registry, buckets=LATENCY_BUCKETS)
        self.queue_wait = Histogram(f"{p}_queue_wait_seconds", "Time a sample waits before its model call.",
                                    registry=registry, buckets=LATENCY_BUCKETS)
        self.queue_depth = Gauge(f"{p}_queue_depth", "Samples waiting for a model call.", registry=registry)
        self.inflight = Gauge(f"{p}_inflight_requests", "Requests being handled now.", registry=registry)
        self.connections = Gauge(f"{p}_open_connections", "HTTP connections open now.", registry=registry)
        self.samples = Counter(f"{p}_samples_scored", "Samples scored by the model.", registry=registry)
        self.failures = Counter(f"{p}_failures", "Failed requests or samples, by kind.", ("kind",),
                                registry=registry)
        self.draining = Gauge(f"{p}_draining", "1 while the server is shutting down (new requests get 503).",
                              registry=registry)
        for kind in FAILURE_KINDS:  # expose zeros so rate() works from the first scrape
            self.failures.labels(kind=kind)

    def failure(self, kind: str) -> None:
        """Count one failure of ``kind``."""
        self.failures.labels(kind=kind).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of this server's registry."""
        return generate_latest(self.registry)


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


__all__ = ["BATCH_SIZE_BUCKETS", "CONTENT_TYPE", "FAILURE_KINDS", "LATENCY_BUCKETS", "RepeatedMessageFilter",
           "SERVER_LOGGERS", "ServerMetrics", "install_log_rate_limit"]
