"""Minimal Prometheus metrics for the reward server, written in the text exposition format (version 0.0.4).

``prometheus_client`` is not a dependency; the server needs only counters, one gauge and histograms, which
are a few lines each. All updates happen under one lock, so they may come from the event loop or a thread.
"""

from __future__ import annotations

import math
import threading
from typing import Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_labels(names: Sequence[str], values: Sequence[str], extra: tuple[str, str] | None = None) -> str:
    pairs = [f'{n}="{_escape_label(v)}"' for n, v in zip(names, values)]
    if extra is not None:
        pairs.append(f'{extra[0]}="{_escape_label(extra[1])}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _format_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str], lock: threading.Lock):
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)
        self._lock = lock

    def _key(self, labels: dict) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"metric {self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # an unlabelled counter exists (at 0) from the start, so a first scrape already shows it
        self._values: dict[tuple[str, ...], float] = {(): 0.0} if not self.labelnames else {}

    def inc(self, amount: float = 1.0, **labels) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples(self) -> dict[tuple[str, ...], float]:
        with self._lock:
            return dict(self._values)

    def render(self) -> list[str]:
        lines = self.header()
        for key, value in sorted(self.samples().items()):
            lines.append(f"{self.name}{_format_labels(self.labelnames, key)} {_format_value(value)}")
        return lines


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._values: dict[tuple[str, ...], float] = {(): 0.0} if not self.labelnames else {}

    def set(self, value: float, **labels) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels) -> None:
        self.inc(-amount, **labels)

    def value(self, **labels) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        lines = self.header()
        with self._lock:
            items = sorted(self._values.items())
        for key, value in items:
            lines.append(f"{self.name}{_format_labels(self.labelnames, key)} {_format_value(value)}")
        return lines


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name, help_text, labelnames, lock, buckets: Iterable[float]):
        super().__init__(name, help_text, labelnames, lock)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.buckets = tuple(bounds)
        # per label key: (non-cumulative counts per bucket, sum, count)
        self._series: dict[tuple[str, ...], list] = {}

    def observe(self, value: float, **labels) -> None:
        key = self._key(labels)
        with self._lock:
            series = self._series.setdefault(key, [[0] * len(self.buckets), 0.0, 0])
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    series[0][i] += 1
                    break
            series[1] += float(value)
            series[2] += 1

    def count(self, **labels) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return 0 if series is None else series[2]

    def total(self, **labels) -> float:
        with self._lock:
            series = self._series.get(self._key(labels))
            return 0.0 if series is None else series[1]

    def render(self) -> list[str]:
        lines = self.header()
        with self._lock:
            items = sorted((k, ([*v[0]], v[1], v[2])) for k, v in self._series.items())
        for key, (counts, total, count) in items:
            cumulative = 0
            for bound, n in zip(self.buckets, counts):
                cumulative += n
                le = _format_value(bound)
                lines.append(f"{self.name}_bucket{_format_labels(self.labelnames, key, ('le', le))} {cumulative}")
            lines.append(f"{self.name}_sum{_format_labels(self.labelnames, key)} {_format_value(total)}")
            lines.append(f"{self.name}_count{_format_labels(self.labelnames, key)} {count}")
        return lines


LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256)

# Failure kinds are a closed set so dashboards can rely on them.
FAILURE_KINDS = (
    "malformed_json", "bad_base64", "corrupt_image", "too_large", "invalid_request", "unsupported_media_type",
    "unauthorized", "queue_full", "timeout", "body_timeout", "client_disconnected", "shutting_down",
    "model_error", "internal_error", "not_found",
)


class ServerMetrics:
    """The reward server's metrics registry; :meth:`render` returns the Prometheus text exposition."""

    def __init__(self, prefix: str = "miescore"):
        self._lock = threading.Lock()
        p = prefix
        self.requests = Counter(f"{p}_requests_total", "HTTP requests answered, by endpoint and status code.",
                                ("endpoint", "status"), self._lock)
        self.request_latency = Histogram(f"{p}_request_duration_seconds",
                                         "Time from request start to response, by endpoint.",
                                         ("endpoint",), self._lock, LATENCY_BUCKETS)
        self.batch_size = Histogram(f"{p}_batch_size", "Samples per model call (dynamic batching).", (),
                                    self._lock, BATCH_SIZE_BUCKETS)
        self.batch_latency = Histogram(f"{p}_batch_duration_seconds", "Wall time of one model call.", (),
                                       self._lock, LATENCY_BUCKETS)
        self.queue_wait = Histogram(f"{p}_queue_wait_seconds", "Time a sample waits before its model call.", (),
                                    self._lock, LATENCY_BUCKETS)
        self.queue_depth = Gauge(f"{p}_queue_depth", "Samples waiting for a model call.", (), self._lock)
        self.inflight = Gauge(f"{p}_inflight_requests", "Requests being handled now.", (), self._lock)
        self.samples = Counter(f"{p}_samples_scored_total", "Samples scored by the model.", (), self._lock)
        self.failures = Counter(f"{p}_failures_total", "Failed requests or samples, by kind.", ("kind",), self._lock)
        self.draining = Gauge(f"{p}_draining", "1 while the server is shutting down (new requests get 503).", (),
                              self._lock)
        for kind in FAILURE_KINDS:  # expose zeros so rate() works from the first scrape
            self.failures.inc(0, kind=kind)
        self._all = (self.requests, self.request_latency, self.batch_size, self.batch_latency, self.queue_wait,
                     self.queue_depth, self.inflight, self.samples, self.failures, self.draining)

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._all:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"


def parse_exposition(text: str) -> dict[str, float]:
    """Parse the text format back into ``{'name{labels}': value}`` (used by tests and the benchmark)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        values[name] = float(value.replace("+Inf", "inf"))
    return values
