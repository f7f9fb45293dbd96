"""The HTTP reward server for online RL: a Starlette app whose routes take JSON (or multipart) edits and answer
scores, with bearer-token auth, Prometheus metrics and dynamic batching.

Why not the Flask + pickle servers the released reward models ship (SpatialReward, EditScore): pickle bodies
run arbitrary code on the server, and one request per model call wastes the GPU when an editor sends its G
candidates (G = 12 in the SpatialReward paper, section 4) as concurrent requests. Here every sample goes on
one queue and a single worker scores up to ``max_batch`` of them per model call
(:mod:`~modeling_miescore.serving.batch_scheduler`).

Endpoints (see :func:`create_app`):
    POST /v1/score         one sample: JSON ``{"sources": [b64, ...], "edited": b64, "instruction": str}`` or
                           multipart (files ``sources`` repeated, file ``edited``, text ``instruction``)
                           -> the backend's result dict (MIEScore: visual_quality, instruction_following,
                           attribute_preservation, overall).
    POST /v1/score_groups  ``{"groups": [{"sources", "instruction", "edited": [b64, ...]}], "samples": [{...,
                           "group": id}]}`` -> ``{"results": [...]}`` in order (groups first, then samples).
    GET  /health           ``{"status": "ok" | "draining", ...}`` (503 while draining); with an API key set,
                           the model, device, queue and limits only for requests that carry the key.
    GET  /metrics          Prometheus text format (:mod:`~modeling_miescore.serving.prometheus_metrics`); with
                           an API key set, only with the key unless ``public_metrics``.

Every accepted request gets exactly one response: errors are JSON ``{"error": {"field", "message", "kind"}}``
with a 4xx/5xx status; a client that went away is recorded as 499 (nginx's "client closed request").

Starlette rather than FastAPI: these handlers read the body themselves (a byte limit while streaming, a body
timeout, disconnect detection, multipart with our own part limits) and answer errors in their own shape, so
FastAPI's body injection and 422 format would be bypassed on every route; pydantic still validates the JSON
(:mod:`~modeling_miescore.serving.request_parsing`).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from typing import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .backends import ScorerBackend
from .errors import STATUS_CLIENT_CLOSED, RequestError
from .prometheus_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .prometheus_metrics import ServerMetrics
from .reward_service import RewardService
from .settings import ServerSettings

__all__ = ["create_app", "check_api_key"]

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


async def _score(request: Request) -> Response:
    return await _scored(request, "score")


async def _score_groups(request: Request) -> Response:
    return await _scored(request, "score_groups")


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
        Route("/v1/score", _score, methods=["POST"]),
        Route("/v1/score_groups", _score_groups, methods=["POST"]),
        Route("/health", _health, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
    ]
    middleware = [Middleware(_MetricsMiddleware, metrics=service.metrics, endpoints=[r.path for r in routes])]
    app = Starlette(routes=routes, lifespan=_lifespan, exception_handlers={HTTPException: _http_error},
                    middleware=middleware)
    app.state.service = service
    app.state.settings = settings
    return app
