"""The reward server's Prometheus metrics, on ``prometheus_client`` with one ``CollectorRegistry`` per server
(two servers in one process, e.g. in tests, never share counts).

Exposed at ``GET /metrics`` (Prometheus text format, :data:`CONTENT_TYPE`):

====================================  =========  ============================================================
name                                  type       meaning
====================================  =========  ============================================================
miescore_requests_total               counter    HTTP responses, labels ``endpoint`` (a route path or
                                                 ``other``) and ``status`` (499 = the client went away)
miescore_request_duration_seconds     histogram  request start to response, label ``endpoint``
miescore_batch_size                   histogram  samples per model call (dynamic batching)
miescore_batch_duration_seconds       histogram  wall time of one model call
miescore_queue_wait_seconds           histogram  time a sample waits before its model call
miescore_queue_depth                  gauge      samples waiting for a model call
miescore_inflight_requests            gauge      requests being handled now (a /metrics scrape counts itself)
miescore_open_connections             gauge      HTTP connections open now (refused ones included until closed)
miescore_samples_scored_total         counter    samples the model scored
miescore_failures_total               counter    failed requests or samples, label ``kind`` (:data:`FAILURE_KINDS`,
                                                 all present from the first scrape at 0); ``header_timeout`` and
                                                 ``too_many_connections`` count connections closed before a
                                                 request reached the app
miescore_draining                     gauge      1 while the server shuts down (new requests get 503)
====================================  =========  ============================================================

``prometheus_client`` also writes a ``<counter>_created`` / ``<histogram>_created`` sample per series (the
Unix time it was created), as every client built on it does.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["ServerMetrics", "CONTENT_TYPE", "FAILURE_KINDS", "LATENCY_BUCKETS", "BATCH_SIZE_BUCKETS"]

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
    """The metrics of one reward server, in their own registry; :meth:`render` gives the text exposition.

    The attributes are ``prometheus_client`` metrics: ``metrics.requests.labels(endpoint=..., status=...)
    .inc()``, ``metrics.batch_size.observe(n)``, ``metrics.queue_depth.set(n)``. They are thread-safe.
    """

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
