"""The reward server's request lifecycle apart from HTTP routing: body limits, decoding, dynamic batching,
waiting for the scores, graceful drain.

:class:`BatchScheduler` keeps one queue of samples and one worker: it takes the oldest sample and waits until
``max_batch`` samples are queued or ``max_wait_ms`` has passed (a little longer for requests that arrived by then
but are still being decoded), prepares the batch on the preparing thread (tokenising, image preprocessing,
prefix groups) and scores it on the model thread, which runs nothing but the model. An editor's G candidates
sent as concurrent requests are thus one model call. :class:`RewardService` reads a body within its size and time
limits, decodes it on other threads, waits for its scores (bounded by a timeout and by the client going away),
and on shutdown answers new requests 503 while every accepted request is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from ..hub.errors import MIEScoreInputError
from ..hub.processing_miescore import EditSample
from ..utils.numbers import json_safe, model_fault
from .backends import ScorerBackend
from .monitoring import ServerMetrics
from .request_parsing import STATUS_CLIENT_CLOSED, ParsedSample, RequestError, parse_score_request
from .settings import ServerSettings

logger = logging.getLogger("miescore.server")

# How long past max_wait_ms a batch waits for requests that arrived in time but are still being decoded: as
# long as the last model call took (starting a partial batch costs about one more call later), within bounds.
DECODE_GRACE_S = (0.05, 0.25, 2.0)  # (least, before the first call, most)


class JobFailed(Exception):
    """Set on a job's future when it cannot be scored; carries the error its request is answered with."""

    def __init__(self, error: RequestError):
        super().__init__(error.message)
        self.error = error


class ModelFault(RuntimeError):
    """The model scored a sample with non-finite numbers (``utils.numbers.model_fault`` says which)."""


def _checked_result(result):
    """A backend's result as JSON, or :class:`ModelFault` when it holds NaN / Inf (never sent as nulls)."""
    fault = model_fault(result)
    return ModelFault(fault) if fault else json_safe(result)


def _sample_error(error: BaseException, field: str | None) -> RequestError:
    """The answer for a sample the model failed on alone (its batch mates were scored without it)."""
    where = f"the sample {field}" if field else "this sample"
    if isinstance(error, ModelFault):  # the model's fault, not the client's: 500 naming it
        return RequestError(500, "model_fault", f"{where}: {error}"[:500], field)
    if isinstance(error, MIEScoreInputError):
        return RequestError(422, "invalid_request", f"the model refused {where}: {error}"[:500], field)
    return RequestError(500, "model_error", f"the model failed on {where} ({type(error).__name__}: {error})"[:500],
                        field)


@dataclasses.dataclass(eq=False)
class Job:
    """One queued sample: its future gets the result dict (or :class:`JobFailed`)."""

    parsed: ParsedSample
    future: asyncio.Future
    enqueued: float


class BatchScheduler:
    """Dynamic batching (module docstring): one asyncio queue of samples, one worker, one model call at a time in
    a thread. Samples with the same prefix (sources + instruction) stay adjacent in a batch, in arrival order, so
    ``score_batch`` can reuse their prefix."""

    def __init__(self, backend: ScorerBackend, settings: ServerSettings, metrics: ServerMetrics):
        self.backend, self.settings, self.metrics = backend, settings, metrics
        self._pending: deque[Job] = deque()
        self._preparing: list[Job] = []  # taken from the queue, being prepared for the model
        self._running: list[Job] = []  # in the model now
        self._inflight: asyncio.Task | None = None  # the model call of self._running
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._preparer: ThreadPoolExecutor | None = None
        self._stopping = False
        self._flush = False  # draining: no point waiting for more samples
        self._closed: RequestError | None = None  # set once shutdown gave up on queued work
        self._decoding: list[float] = []  # arrival times of requests being parsed and decoded now
        self._last_call_s = DECODE_GRACE_S[1]  # duration of the last model call
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle (called on the event loop)

    def start(self):
        self.loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="miescore-model")
        self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="miescore-prepare")
        self._worker = asyncio.create_task(self._run(), name="miescore-batcher")

    async def stop(self, timeout: float):
        """Finish queued work (up to ``timeout`` s), then fail whatever is left with 503 and stop."""
        self._stopping = True
        self._flush = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._worker is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._worker), timeout)
            except asyncio.TimeoutError:
                self.fail_all(RequestError(503, "shutting_down", "server shut down before this request was scored"))
                for task in (self._worker, self._inflight):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await task
        for executor in (self._executor, self._preparer):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)

    def flush(self):
        self._flush = True
        if self._wakeup is not None:
            self._wakeup.set()

    def fail_all(self, error: RequestError):
        self._closed = error
        for job in [*self._pending, *self._preparing, *self._running]:
            if not job.future.done():
                job.future.set_exception(JobFailed(error))
        self._pending.clear()
        self._update_depth()

    # -- submission

    @property
    def depth(self) -> int:
        return len(self._pending)

    def _update_depth(self):
        self.metrics.queue_depth.set(len(self._pending))

    def submit(self, items: Sequence[ParsedSample]) -> list[Job]:
        """Queue the samples of one request, or raise 429 if they do not fit (503 once shut down)."""
        if self._closed is not None:
            raise self._closed
        if self.depth + len(items) > self.settings.max_queue:
            raise RequestError(429, "queue_full", f"server queue is full ({self.depth} samples waiting, limit "
                               f"{self.settings.max_queue}); retry after {self.settings.retry_after_s} s",
                               None, {"Retry-After": str(self.settings.retry_after_s)})
        now = self.loop.time()
        # One request's samples go in grouped by prefix, so a group stays contiguous in the queue.
        first_seen: dict[str, int] = {}
        for i, item in enumerate(items):
            first_seen.setdefault(item.prefix_key, i)
        order = sorted(range(len(items)), key=lambda i: (first_seen[items[i].prefix_key], i))
        jobs = [None] * len(items)
        for i in order:
            job = Job(items[i], self.loop.create_future(), now)
            jobs[i] = job
            self._pending.append(job)
        self._update_depth()
        self._wakeup.set()
        return jobs

    @contextlib.contextmanager
    def decoding(self):
        """Marks a request as arrived and being decoded (``with scheduler.decoding(): parse, then submit``), so
        that a batch about to start waits for it (see :meth:`_fill`)."""
        arrived = self.loop.time()
        self._decoding.append(arrived)
        try:
            yield
        finally:
            self._decoding.remove(arrived)
            if self._wakeup is not None:
                self._wakeup.set()

    def withdraw(self, jobs: Sequence[Job]):
        """Drop a request's jobs that are still queued (timeout, disconnect); running ones finish unused."""
        gone = set(jobs)
        if any(job in gone for job in self._pending):
            self._pending = deque(job for job in self._pending if job not in gone)
            self._update_depth()
        for job in jobs:
            if not job.future.done():
                job.future.cancel()

    # -- the worker

    def _take(self) -> list[Job]:
        batch: list[Job] = []
        while self._pending and len(batch) < self.settings.max_batch:
            job = self._pending.popleft()
            if not job.future.done():
                batch.append(job)
        self._update_depth()
        first_seen: dict[str, int] = {}
        for i, job in enumerate(batch):
            first_seen.setdefault(job.parsed.prefix_key, i)
        batch.sort(key=lambda job: first_seen[job.parsed.prefix_key])  # stable: arrival order inside a group
        return batch

    def _model_busy(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    async def _fill(self):
        """Wait until the batch is full, or ``max_wait_ms`` after its oldest sample was queued, or, past that,
        until requests that arrived before that moment and are still being decoded have joined (for at most
        about one model call more, :data:`DECODE_GRACE_S`): a burst of requests then fills one batch instead
        of starting with whatever was decoded first. While the model runs the previous batch, a batch waits for
        it, as it would without the preparing step (so batches are as large), except that a full batch starts
        early when the backend prepares (``backend.prepares``): it is then prepared while the model runs."""
        early = getattr(self.backend, "prepares", False)
        while self._model_busy() and not self._flush and not (early and self.depth >= self.settings.max_batch):
            self._wakeup.clear()  # set by submit, by decoding requests and when the model call ends
            await self._wakeup.wait()
        if not self._pending:  # withdrawn meanwhile
            return
        deadline = self._pending[0].enqueued + self.settings.max_wait_ms / 1000.0
        least, _, most = DECODE_GRACE_S
        grace = min(max(self._last_call_s, least), most)
        while len(self._pending) < self.settings.max_batch and not self._flush:
            now = self.loop.time()
            if now < deadline:
                timeout = deadline - now
            elif self.settings.max_wait_ms > 0 and any(t <= deadline for t in self._decoding):
                timeout = deadline + grace - now
                if timeout <= 0:
                    return
            else:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def _run(self):
        while True:
            if not self._pending:
                if self._stopping:
                    await self._model_done()
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._fill()
            batch = self._take()
            if batch:
                self._preparing = batch
                try:
                    call = await self.loop.run_in_executor(self._preparer, self._prepare,
                                                           [j.parsed.sample for j in batch],
                                                           [j.parsed.prefix_key for j in batch])
                finally:
                    self._preparing = []
                await self._model_done()  # one model call at a time
                self._inflight = asyncio.create_task(self._execute(batch, call), name="miescore-model-call")

    async def _model_done(self):
        if self._inflight is not None:
            await self._inflight
            self._inflight = None

    async def _execute(self, batch: list[Job], call):
        self._running = batch
        try:
            now = self.loop.time()
            for job in batch:
                self.metrics.queue_wait.observe(now - job.enqueued)
            self.metrics.batch_size.observe(len(batch))
            started = time.perf_counter()
            outcomes = await self.loop.run_in_executor(self._executor, self._score, [j.parsed.sample for j in batch],
                                                       [j.parsed.prefix_key for j in batch], call)
            self._last_call_s = time.perf_counter() - started
            self.metrics.batch_latency.observe(self._last_call_s)
            for job, outcome in zip(batch, outcomes):
                if job.future.done():  # withdrawn (timeout / disconnect / shutdown) while it ran
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(JobFailed(_sample_error(outcome, job.parsed.field)))
                else:
                    self.metrics.samples.inc()
                    job.future.set_result(outcome)
        except Exception as err:  # the worker must survive anything; the batch's requests get a 500
            logger.exception("batch failed unexpectedly")
            error = RequestError(500, "internal_error", f"internal error while scoring ({type(err).__name__})")
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(JobFailed(error))
        finally:
            self._running = []
            self._wakeup.set()  # a batch waiting for the model may start

    def _prepare(self, samples: list[EditSample], keys: list[str]):
        """Runs on the preparing thread: the backend's work before the model. A failure is handed to the model
        thread, which then scores the samples one by one (so that one bad sample does not fail the others)."""
        prepare = getattr(self.backend, "prepare", None)
        if prepare is None:  # a duck-typed backend with score_samples only
            return functools.partial(self._call_backend, samples, keys)
        try:
            return prepare(samples, keys)
        except Exception as err:
            return err

    def _call_backend(self, samples: list[EditSample], keys: list[str]) -> list:
        if getattr(self.backend, "accepts_group_ids", False):
            return self.backend.score_samples(samples, group_ids=keys)
        return self.backend.score_samples(samples)

    def _score(self, samples: list[EditSample], keys: list[str], call: Callable[[], list] | Exception) -> list:
        """Runs in the model thread: the prepared call for the batch; if it (or its preparation) fails, each
        sample alone."""
        try:
            if isinstance(call, Exception):
                raise call
            results = call()
            if len(results) != len(samples):
                raise RuntimeError(f"backend returned {len(results)} results for {len(samples)} samples")
            return [_checked_result(r) for r in results]
        except Exception as err:
            if len(samples) == 1:
                return [err]
            logger.warning("batch of %d failed (%s: %s); scoring its samples one by one", len(samples),
                           type(err).__name__, err)
        outcomes = []
        for sample, key in zip(samples, keys):
            try:
                outcomes.append(_checked_result(self._call_backend([sample], [key])[0]))
            except Exception as err:
                outcomes.append(err)
        return outcomes


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


__all__ = ["BatchScheduler", "Job", "JobFailed", "RewardService"]
