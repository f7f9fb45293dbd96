"""The HTTP reward server (``miescore serve``): the Starlette app, the connection guard below it, and a server on
a background thread (tests, notebooks, a reward server inside a training job).

Endpoints (:func:`create_app`): ``POST /v1/score`` (one edit, JSON or multipart), ``POST /v1/score_groups``
(``{"groups": [...], "samples": [...]}`` -> ``{"results": [...]}``, groups first), ``GET /health`` (503 while
draining; model, queue and limits only with the key when one is set) and ``GET /metrics`` (Prometheus; with the
key unless ``public_metrics``). Every accepted request gets exactly one response; errors are ``{"error":
{"field", "message", "kind"}}`` with a 4xx/5xx status, and a client that went away is recorded as 499. No pickle
bodies (they run code on the server), no model call per request: every sample goes on one queue
(:mod:`.reward_service`). Starlette rather than FastAPI, because the handlers read the body themselves (byte
limit while streaming, body timeout, disconnects, multipart part limits) and answer errors in their own shape.

Below the app, :func:`guarded_protocol` (uvicorn's h11 protocol, whatever parser is installed) closes a connection
whose request headers are not complete ``header_timeout_s`` after it connected (408 once part of a request
arrived) and answers 503 to a connection beyond ``max_connections``, a cap kept below the file-descriptor limit:
uvicorn's own timers leave stalled sockets open until ``accept()`` fails with EMFILE.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import logging
import math
import threading
import time
from typing import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from .backends import ScorerBackend
from .monitoring import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .monitoring import ServerMetrics, install_log_rate_limit
from .request_parsing import STATUS_CLIENT_CLOSED, RequestError
from .reward_service import RewardService
from .settings import ServerSettings

logger = logging.getLogger("miescore.server")


def check_api_key(request: Request, api_key: str | None) -> None:
    """401 unless the request carries ``Authorization: Bearer <api_key>`` (no check when ``api_key`` is None)."""
    if api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise RequestError(401, "unauthorized", "missing or wrong API key; send 'Authorization: Bearer <key>'",
                           "Authorization", {"WWW-Authenticate": "Bearer"})


def _authorised(request: Request, api_key: str | None) -> bool:
    try:
        check_api_key(request, api_key)
    except RequestError:
        return False
    return True


def _error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error.payload(), status_code=error.status, headers=error.headers)


class _MetricsMiddleware:
    """Counts every HTTP response by endpoint and status, and times it (pure ASGI: sees the real status)."""

    def __init__(self, app, metrics: ServerMetrics, endpoints: Sequence[str]):
        self.app, self.metrics, self.endpoints = app, metrics, set(endpoints)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope.get("path", "") if scope.get("path", "") in self.endpoints else "other"
        state = {"status": 500, "recorded": False}
        started = time.perf_counter()

        def record():
            if not state["recorded"]:
                state["recorded"] = True
                self.metrics.inflight.dec()
                self.metrics.requests.labels(endpoint=endpoint, status=str(state["status"])).inc()
                self.metrics.request_latency.labels(endpoint=endpoint).observe(time.perf_counter() - started)

        async def send_and_record(message):
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()  # before the last byte leaves: a client that reads /metrics next sees this request
            await send(message)

        self.metrics.inflight.inc()
        try:
            await self.app(scope, receive, send_and_record)
        finally:
            record()


# ---------------------------------------------------------------------------------------------- routes


async def _scored(request: Request, endpoint: str) -> Response:
    service: RewardService = request.app.state.service
    try:
        check_api_key(request, service.settings.api_key)
        service.check_accepting()
        try:
            body = await service.read_body(request)
        except ClientDisconnect:
            raise RequestError(STATUS_CLIENT_CLOSED, "client_disconnected", "client closed the connection") from None
        # A request that started before a drain began is finished, not refused: it is "in flight".
        parsed, jobs = await service.parse_and_submit(request, body, endpoint)
        results = await service.wait(request, jobs)
    except RequestError as err:
        service.metrics.failure(err.kind)
        return _error_response(err)
    except Exception as err:  # never a traceback to the client
        logger.exception("unexpected error in %s", endpoint)
        service.metrics.failure("internal_error")
        return _error_response(RequestError(500, "internal_error", f"internal server error ({type(err).__name__})"))
    if endpoint == "score":
        return JSONResponse(results[0])
    return JSONResponse({"results": [{**r, "group": p.group, "index": p.index} for r, p in zip(results, parsed)]})


async def _health(request: Request) -> Response:
    """``{"status"}`` for anyone; the model, device, queue and limits only with the API key (when one is set)."""
    service: RewardService = request.app.state.service
    settings = service.settings
    body = {"status": "draining" if service.draining else "ok"}
    if _authorised(request, settings.api_key):
        body.update(queue_depth=service.scheduler.depth, max_batch=settings.max_batch, max_queue=settings.max_queue,
                    **service.backend.describe())
    return JSONResponse(body, status_code=503 if service.draining else 200)


async def _metrics(request: Request) -> Response:
    """Prometheus text; with an API key set it needs the key too, unless the server has ``public_metrics``."""
    service: RewardService = request.app.state.service
    if not service.settings.public_metrics:
        try:
            check_api_key(request, service.settings.api_key)
        except RequestError as err:
            service.metrics.failure(err.kind)
            return _error_response(err)
    return Response(service.metrics.render(), media_type=METRICS_CONTENT_TYPE)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    kind = "not_found" if exc.status_code in (404, 405) else "invalid_request"
    request.app.state.service.metrics.failure(kind)
    return _error_response(RequestError(exc.status_code, kind, str(exc.detail), None, getattr(exc, "headers", None)))


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette):
    await app.state.service.startup()
    try:
        yield
    finally:
        await app.state.service.shutdown()


def create_app(backend: ScorerBackend, settings: ServerSettings | None = None) -> Starlette:
    """The Starlette app serving ``backend``; ``app.state.service`` is its
    :class:`~modeling_miescore.serving.reward_service.RewardService`.

    The batching worker starts and stops with the app's lifespan (uvicorn runs it; so does
    ``starlette.testclient.TestClient`` used as a context manager).
    """
    settings = settings or ServerSettings()
    service = RewardService(backend, settings)
    routes = [
        Route("/v1/score", functools.partial(_scored, endpoint="score"), methods=["POST"]),
        Route("/v1/score_groups", functools.partial(_scored, endpoint="score_groups"), methods=["POST"]),
        Route("/health", _health, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
    ]
    middleware = [Middleware(_MetricsMiddleware, metrics=service.metrics, endpoints=[r.path for r in routes])]
    app = Starlette(routes=routes, lifespan=_lifespan, exception_handlers={HTTPException: _http_error},
                    middleware=middleware)
    app.state.service = service
    app.state.settings = settings
    return app


try:
    import resource  # Unix only; elsewhere the cap is max_connections as given
except ImportError:  # pragma: no cover - Windows
    resource = None


FD_RESERVE = 64  # descriptors kept for the process itself: listening socket, model files, pipes, logs, threads
REFUSAL_SLACK = 32  # refused connections that may wait (up to REFUSAL_LINGER_S) for their 503 to be read
REFUSAL_LINGER_S = 1.0
MAX_BACKLOG = 2048  # uvicorn's default listen backlog
ACCEPT_BATCHES = 4  # accepted-but-not-yet-refused batches that can be in flight (see connection_limits)


def _canned_response(status: int, reason: str, kind: str, message: str, extra: str = "") -> bytes:
    body = json.dumps({"error": {"field": None, "message": message, "kind": kind}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n{extra}\r\n")
    return head.encode("ascii") + body


def connection_limits(max_connections: int, soft_fd_limit: int | None = None) -> tuple[int, int]:
    """``(cap, backlog)``: ``max_connections`` lowered so that everything fits in the process's file limit
    (``RLIMIT_NOFILE`` soft limit unless given), and the listen backlog.

    asyncio accepts up to ``backlog`` sockets per loop pass before any protocol sees them, and a refused socket
    is closed a few passes later, so :data:`ACCEPT_BATCHES` batches of ``backlog`` sockets, the refusals that
    linger (:data:`REFUSAL_SLACK`) and :data:`FD_RESERVE` must fit beside the open connections.
    """
    if soft_fd_limit is None and resource is None:
        return max_connections, MAX_BACKLOG
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if soft_fd_limit is None else soft_fd_limit
    if resource is not None and soft == resource.RLIM_INFINITY:
        return max_connections, MAX_BACKLOG
    room = soft - FD_RESERVE - REFUSAL_SLACK
    backlog = min(MAX_BACKLOG, max(16, room // (2 * ACCEPT_BATCHES)))
    return max(1, min(max_connections, room - ACCEPT_BATCHES * backlog)), backlog


def raise_fd_limit(max_connections: int) -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` towards what ``max_connections`` needs (at most to the hard limit);
    returns the soft limit now in force (None where there is none). For the server process itself."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + FD_RESERVE + REFUSAL_SLACK + ACCEPT_BATCHES * MAX_BACKLOG
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # not allowed here: the cap follows the limit instead
            pass
    return soft


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a connection cap (class attributes set by
    :func:`guarded_protocol`)."""

    header_timeout_s: float = 10.0
    max_connections: int = 1000
    retry_after_s: int = 1
    metrics = None  # a ServerMetrics, or None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._header_timer = None
        self._armed_cycle = None  # the request cycle when the timer was armed; a new one = headers complete
        self._partial = False  # bytes of a request arrived since the timer was armed
        self._refused = False
        if len(self.connections) > self.max_connections:
            self._refuse()
        else:
            self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped while the 503 lingers
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_timer()  # the first byte of the next request on a kept-alive connection
        self._partial = self._partial or self._header_timer is not None
        super().data_received(data)
        if self._header_timer is not None and self.cycle is not self._armed_cycle:
            self._disarm_header_timer()  # a complete request head arrived

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)
        if self.metrics is not None:
            self.metrics.connections.set(len(self.connections))

    def _arm_header_timer(self) -> None:
        self._armed_cycle, self._partial = self.cycle, False
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)
        if self.metrics is not None:
            self.metrics.connections.set(len(self.connections))

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.metrics is not None:
            self.metrics.failure("header_timeout")
        logger.info("closed a connection whose request headers did not arrive within %g s", self.header_timeout_s)
        if self._partial:
            self.transport.write(_canned_response(
                408, "Request Timeout", "header_timeout",
                f"request headers not received within {self.header_timeout_s:g} s"))
        self.transport.close()

    def _refuse(self) -> None:
        """503 and close: politely (the client may read the answer before the socket goes) while few refusals
        are pending, at once beyond that so that refusals cannot exhaust the file descriptors either."""
        self._refused = True
        open_now = len(self.connections)
        if self.metrics is not None:
            self.metrics.failure("too_many_connections")
        logger.warning("connection limit of %d reached; refusing new connections with 503", self.max_connections)
        self.transport.write(_canned_response(
            503, "Service Unavailable", "too_many_connections",
            f"the server has {open_now - 1} open connections, its limit; retry after {self.retry_after_s} s",
            f"retry-after: {self.retry_after_s}\r\n"))
        if open_now > self.max_connections + REFUSAL_SLACK or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()  # the answer, then FIN; the client's request bytes are read and dropped
        self._header_timer = self.loop.call_later(REFUSAL_LINGER_S, self.transport.close)


def guarded_protocol(settings: ServerSettings, metrics=None, max_connections: int | None = None) -> type[H11Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` enforcing ``settings.header_timeout_s`` and
    ``max_connections`` (default: ``settings.max_connections``)."""
    return type("GuardedH11Protocol", (_GuardedH11Protocol,),
                {"header_timeout_s": settings.header_timeout_s,
                 "max_connections": max_connections or settings.max_connections,
                 "retry_after_s": settings.retry_after_s, "metrics": metrics})


def uvicorn_options(settings: ServerSettings, metrics=None) -> dict:
    """``uvicorn.Config`` keyword arguments for these settings: the guarded protocol with the connection cap and
    listen backlog that fit the open-file limit (:func:`connection_limits`), and the keep-alive timeout."""
    cap, backlog = connection_limits(settings.max_connections)
    if cap < settings.max_connections:
        logger.warning("max_connections lowered from %d to %d to fit the open-file limit (ulimit -n)",
                       settings.max_connections, cap)
    return {"http": guarded_protocol(settings, metrics, cap), "backlog": backlog,
            "timeout_keep_alive": settings.keep_alive_timeout_s}


class BackgroundServer:
    """A uvicorn server on a background thread; a context manager (start on enter, graceful stop on exit).

    For an app from :func:`~modeling_miescore.serving.app.create_app`, the connection guard of its settings
    (header timeout, connection cap, keep-alive timeout) applies, as in ``miescore serve``.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, **config_kwargs):
        import uvicorn

        config_kwargs.setdefault("log_level", "warning")
        config_kwargs.setdefault("access_log", False)
        settings = getattr(app.state, "settings", None)
        if settings is not None:
            config_kwargs.setdefault("timeout_graceful_shutdown", int(math.ceil(settings.drain_timeout_s)) + 1)
            service = getattr(app.state, "service", None)
            for key, value in uvicorn_options(settings, getattr(service, "metrics", None)).items():
                config_kwargs.setdefault(key, value)
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", **config_kwargs))
        install_log_rate_limit()  # after uvicorn.Config, which (re)configures uvicorn's loggers
        self.thread = threading.Thread(target=self.server.run, name="miescore-uvicorn", daemon=True)
        self.host = host
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the reward server failed to start (see the log above)")
            if time.monotonic() > deadline:
                self.server.should_exit = True
                raise RuntimeError(f"the reward server did not start within {timeout} s")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout: float = 60.0):
        """Graceful: stop accepting, let in-flight requests finish, then stop (like SIGTERM)."""
        service = getattr(self.app.state, "service", None)
        if service is not None:
            service.begin_drain()
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve_in_background(backend_or_app, settings: ServerSettings | None = None, host: str = "127.0.0.1",
                        port: int = 0, **config_kwargs) -> BackgroundServer:
    """A reward server on a thread, started by ``with`` (or :meth:`BackgroundServer.start`); ``port=0`` picks a
    free port.

    ``backend_or_app``: a :class:`~modeling_miescore.serving.backends.ScorerBackend` (served with ``settings``)
    or an app from :func:`~modeling_miescore.serving.app.create_app`.
    """
    app = backend_or_app if hasattr(backend_or_app, "state") else create_app(backend_or_app, settings)
    return BackgroundServer(app, host=host, port=port, **config_kwargs)


__all__ = ["BackgroundServer", "FD_RESERVE", "check_api_key", "connection_limits", "create_app", "guarded_protocol",
           "raise_fd_limit", "serve_in_background", "uvicorn_options"]
