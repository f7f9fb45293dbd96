"""The reward server's request lifecycle apart from HTTP routing: reading a body within its size and time
limits, queueing samples, waiting for their scores (bounded by a timeout and by the client going away), and
the graceful drain on shutdown (new requests 503, queued work finishes, every accepted request is answered).
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor

from .backends import ScorerBackend
from .batch_scheduler import BatchScheduler, Job, JobFailed
from .errors import STATUS_CLIENT_CLOSED, RequestError
from .prometheus_metrics import ServerMetrics
from .request_parsing import ParsedSample, parse_score_request
from .settings import ServerSettings

__all__ = ["RewardService"]


class RewardService:
    """One server's state: its backend, settings, metrics, batch scheduler, decode threads and drain flag.

    Requests are parsed and decoded on ``settings.decode_workers`` threads of their own, so that request N+1
    is decoded while the model thread runs batch N, and at most that many requests decode at once (their
    memory is bounded per request, see :mod:`~modeling_miescore.serving.settings`).
    """

    def __init__(self, backend: ScorerBackend, settings: ServerSettings, metrics: ServerMetrics | None = None):
        self.backend = backend
        self.settings = settings
        self.metrics = metrics or ServerMetrics()
        self.scheduler = BatchScheduler(backend, settings, self.metrics)
        self.draining = False
        self._drain_timer: asyncio.TimerHandle | None = None
        self._decoders: ThreadPoolExecutor | None = None

    # -- lifecycle

    async def startup(self):
        self._decoders = ThreadPoolExecutor(self.settings.decode_workers, thread_name_prefix="miescore-decode")
        self.scheduler.start()

    async def shutdown(self):
        self._begin_drain_on_loop()
        await self.scheduler.stop(self.settings.drain_timeout_s)
        if self._decoders is not None:
            self._decoders.shutdown(wait=False, cancel_futures=True)

    def begin_drain(self):
        """Stop accepting work (new requests get 503) and finish what is queued. Safe from any thread and
        from a signal handler."""
        self.draining = True
        loop = self.scheduler.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._begin_drain_on_loop)

    def _begin_drain_on_loop(self):
        self.draining = True
        self.metrics.draining.set(1)
        self.scheduler.flush()
        if self._drain_timer is None:
            # Answer 503 a little before uvicorn's graceful-shutdown timeout would cancel handlers unanswered.
            delay = max(0.0, self.settings.drain_timeout_s - 1.0)
            self._drain_timer = self.scheduler.loop.call_later(delay, self.scheduler.fail_all, RequestError(
                503, "shutting_down", "server shut down before this request was scored; retry on another replica",
                None, {"Retry-After": str(self.settings.retry_after_s)}))

    # -- request steps

    def check_accepting(self):
        if self.draining:
            raise RequestError(503, "shutting_down", "server is shutting down; retry on another replica",
                               None, {"Retry-After": str(self.settings.retry_after_s)})

    async def read_body(self, request) -> bytes:
        """The body, refused with 413 above ``max_request_bytes`` (declared or streamed) and 408 when it does
        not arrive within ``body_timeout_s``."""
        limit = self.settings.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            try:
                declared_size = int(declared)
            except ValueError:
                raise RequestError(400, "invalid_request", "Content-Length is not an integer", "Content-Length") from None
            if declared_size > limit:
                raise RequestError(413, "too_large", f"request body is {declared_size} bytes, above the limit of "
                                   f"{limit}; send fewer or smaller images per request", "body")

        async def collect() -> bytes:
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise RequestError(413, "too_large", f"request body is above the limit of {limit} bytes; send "
                                       "fewer or smaller images per request", "body")
                chunks.append(chunk)
            return b"".join(chunks)

        try:
            return await asyncio.wait_for(collect(), self.settings.body_timeout_s)
        except asyncio.TimeoutError:
            raise RequestError(408, "body_timeout", f"request body not received within {self.settings.body_timeout_s} s",
                               "body") from None

    async def parse_and_submit(self, request, body: bytes, endpoint: str) -> tuple[list[ParsedSample], list[Job]]:
        """The request's samples, validated and decoded on the decode threads (large images reduced towards the
        backend's ``max_pixels``), then queued; a batch about to start waits for them while they decode."""
        with self.scheduler.decoding():
            parsed = await parse_score_request(request, body, endpoint, self.settings,
                                               getattr(self.backend, "max_pixels", None), self._decoders)
            return parsed, self.scheduler.submit(parsed)

    async def wait(self, request, jobs: list[Job]) -> list[dict]:
        """Wait for a request's jobs, or its timeout, or the client going away (whichever comes first)."""
        gathered = asyncio.gather(*(job.future for job in jobs), return_exceptions=True)
        disconnected = asyncio.ensure_future(_wait_for_disconnect(request))
        try:
            done, _ = await asyncio.wait({gathered, disconnected}, timeout=self.settings.request_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self.scheduler.withdraw(jobs)
            raise
        finally:
            disconnected.cancel()
        if gathered not in done:
            await self._abandon(jobs, gathered)
            if disconnected in done and not disconnected.cancelled() and disconnected.exception() is None:
                raise RequestError(STATUS_CLIENT_CLOSED, "client_disconnected", "client closed the connection")
            raise RequestError(504, "timeout", f"not scored within {self.settings.request_timeout_s} s; the server "
                               "is overloaded or the model is slow", None)
        outcomes = gathered.result()
        for outcome in outcomes:
            if isinstance(outcome, JobFailed):
                raise outcome.error
            if isinstance(outcome, BaseException):
                raise RequestError(500, "internal_error", f"internal error ({type(outcome).__name__})")
        return outcomes

    async def _abandon(self, jobs: list[Job], gathered: asyncio.Future):
        self.scheduler.withdraw(jobs)
        gathered.cancel()
        with contextlib.suppress(BaseException):
            await gathered


async def _wait_for_disconnect(request):
    """Returns when the client disconnects (uvicorn answers ``receive()`` with http.disconnect then)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return
