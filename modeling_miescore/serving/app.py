"""HTTP reward server for online RL: JSON (or multipart) in, scores out, with dynamic batching.

Why not the Flask + pickle servers the released reward models ship (SpatialReward, EditScore): pickle bodies
run arbitrary code on the server, and one request per model call wastes the GPU when an editor sends its G
candidates (G = 12 in the SpatialReward paper, section 4) as concurrent requests. Here an ASGI app
(Starlette, served by uvicorn) puts every sample on one queue; a single worker takes up to ``max_batch``
samples, or what came within ``max_wait_ms`` of the oldest one, and runs one model call in a worker thread.

Endpoints (see :func:`create_app`):
    POST /v1/score         one sample: JSON ``{"sources": [b64, ...], "edited": b64, "instruction": str}`` or
                           multipart (files ``sources`` repeated, file ``edited``, text ``instruction``)
                           -> the backend's result dict (MIEScore: visual_quality, instruction_following,
                           attribute_preservation, overall).
    POST /v1/score_groups  ``{"groups": [{"sources", "instruction", "edited": [b64, ...]}], "samples": [{...,
                           "group": id}]}`` -> ``{"results": [...]}`` in order (groups first, then samples).
    GET  /health           ``{"status": "ok" | "draining", ...}`` (503 while draining).
    GET  /metrics          Prometheus text format.

Every accepted request gets exactly one response: errors are JSON ``{"error": {"field", "message", "kind"}}``
with a 4xx/5xx status; a client that went away is recorded as 499 (nginx's "client closed request").
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hashlib
import hmac
import io
import json
import logging
import math
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from PIL import Image, UnidentifiedImageError

from ..image_io import ImageLoadError, MIEScoreInputError, load_image
from ..processing_miescore import EditSample
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import ServerMetrics

logger = logging.getLogger("miescore.server")

# Only formats that decode with Pillow's own code; EPS (Ghostscript) and friends are never opened.
ALLOWED_IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF")
STATUS_CLIENT_CLOSED = 499


# ---------------------------------------------------------------------------------------------- settings


@dataclasses.dataclass
class ServerSettings:
    """Limits and batching knobs of the reward server.

    Size limits answer 413 and malformed content 422, always naming the offending field.
    """

    max_batch: int = 16  # samples per model call
    max_wait_ms: float = 20.0  # longest a sample waits for others to join its batch
    max_queue: int = 256  # samples waiting for a model call; beyond it requests get 429
    max_request_bytes: int = 64 * 1024 * 1024
    max_samples_per_request: int = 256
    max_images_per_request: int = 512  # sources shared by a group count once
    max_sources_per_sample: int = 16
    # 40 Mpx is ~40x the MIEScore paper's 1,048,576-pixel budget per image: no real photo is refused, but a
    # decompression bomb is refused from its header, before decoding.
    max_image_pixels: int = 40_000_000
    max_instruction_chars: int = 4096
    request_timeout_s: float = 300.0  # enqueue -> result; beyond it 504
    body_timeout_s: float = 30.0  # reading the request body; beyond it 408 (slow or stalled clients)
    drain_timeout_s: float = 30.0  # on shutdown, queued work gets this long to finish before 503s
    retry_after_s: int = 1
    api_key: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        positive = ("max_batch", "max_queue", "max_request_bytes", "max_samples_per_request",
                    "max_images_per_request", "max_sources_per_sample", "max_image_pixels",
                    "max_instruction_chars", "request_timeout_s", "body_timeout_s", "drain_timeout_s")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"ServerSettings.{name} must be > 0, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise ValueError(f"ServerSettings.max_wait_ms must be >= 0, got {self.max_wait_ms}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServerSettings.api_key is empty; pass None to disable authentication")


# ---------------------------------------------------------------------------------------------- backends


class ScorerBackend:
    """What the server needs from a model: score a list of loaded samples, in order.

    Subclasses implement :meth:`score_samples`; it runs in one worker thread (never concurrently with
    itself), gets at most ``max_batch`` samples whose images are already RGB ``PIL.Image`` objects, and
    returns one JSON-serialisable dict per sample, in input order. Raising fails the batch; the server then
    retries each sample alone so that one bad sample does not fail the others.

    A backend with ``accepts_group_ids = True`` is called as ``score_samples(samples, group_ids=...)``: one
    id per sample, equal for samples that share sources and instruction (a content hash of the uploaded
    source bytes and the instruction), so it can run their shared prefix once.
    """

    name = "backend"
    accepts_group_ids = False

    def score_samples(self, samples: list[EditSample]) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.name}


class MIEScoreBackend(ScorerBackend):
    """A loaded :class:`MIEScoreModel`; one ``score_batch`` call per server batch."""

    name = "miescore"

    def __init__(self, model, batch_size: int | None = None, max_image_pixels: int | None = None):
        import inspect

        self.model = model
        self.batch_size = batch_size
        self.max_image_pixels = max_image_pixels
        # checkpoints with older remote code have a score_batch without prefix-reuse groups
        self.accepts_group_ids = "groups" in inspect.signature(model.score_batch).parameters

    def score_samples(self, samples: list[EditSample], group_ids: list | None = None) -> list[dict]:
        kwargs = {} if self.max_image_pixels is None else {"max_image_pixels": self.max_image_pixels}
        if group_ids is not None and self.accepts_group_ids:
            kwargs["groups"] = group_ids
        return self.model.score_batch(samples, batch_size=self.batch_size or max(1, len(samples)), **kwargs)

    def describe(self) -> dict:
        config = self.model.config
        return {"backend": self.name, "model": config.name_or_path or None,
                "scores": [*config.score_names, "overall"], "device": str(self.model.device),
                "dtype": str(self.model.dtype).replace("torch.", "")}


def _plain(value):
    """Results as JSON-safe plain values (dataclasses, numpy/torch scalars, non-finite floats -> None)."""
    if hasattr(value, "to_dict") and not isinstance(value, (dict, type)):
        value = value.to_dict()  # e.g. SpatialRewardResult: its own JSON form
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalar
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
        return _plain(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


class SpatialRewardBackend(ScorerBackend):
    """A loaded ``SpatialRewardModel`` (generative SC + PQ passes): one ``evaluate_edits`` call per batch."""

    name = "spatialreward"

    def __init__(self, model, batch_size: int | None = None):
        self.model = model
        self.batch_size = batch_size

    def score_samples(self, samples: list[EditSample]) -> list[dict]:
        results = self.model.evaluate_edits(samples, batch_size=self.batch_size or max(1, len(samples)))
        return [_plain(r) for r in results]

    def describe(self) -> dict:
        config = getattr(self.model, "config", None)
        return {"backend": self.name, "model": getattr(config, "name_or_path", None) or None,
                "scores": ["reward", "s_if", "s_con", "s_nat", "s_art", "sc", "pq"],
                "device": str(getattr(self.model, "device", "unknown"))}


def load_backend(model: str, device: str = "auto", dtype: str = "auto", batch_size: int | None = None) -> ScorerBackend:
    """A backend for a checkpoint folder or Hub repo: MIEScore or SpatialReward, chosen by ``model_type``."""
    from ..scoring.loading import ModelLoadError, load_scorer, read_checkpoint_config

    model_type = read_checkpoint_config(model).get("model_type")
    if model_type == "miescore":
        return MIEScoreBackend(load_scorer(model, device=device, dtype=dtype), batch_size=batch_size)
    if model_type in ("spatialreward", "qwen3_vl"):  # ours, or the authors' plain Qwen3-VL checkpoint
        from ..scoring.loading import load_spatialreward

        return SpatialRewardBackend(load_spatialreward(model, device=device, dtype=dtype), batch_size=batch_size)
    raise ModelLoadError(
        f"model '{model}' has model_type={model_type!r}; the server serves 'miescore' and 'spatialreward' checkpoints"
    )


# ---------------------------------------------------------------------------------------------- errors


class RequestError(Exception):
    """An error answered to the client as ``{"error": {"field", "message", "kind"}}``."""

    def __init__(self, status: int, kind: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field
        self.headers = headers or {}

    def payload(self) -> dict:
        return {"error": {"field": self.field, "message": self.message, "kind": self.kind}}


# ---------------------------------------------------------------------------------------------- parsing


@dataclasses.dataclass
class _Parsed:
    """One decoded sample plus what the response needs: its group label, index inside the group, and the
    content key of its shared prefix (sources + instruction) so batches keep one group's samples adjacent."""

    sample: EditSample
    prefix_key: str
    group: Any = None
    index: int = 0


def _b64decode(value, field: str) -> bytes:
    if not isinstance(value, str):
        raise RequestError(422, "invalid_request", f"expected a base64-encoded image string, got {type(value).__name__}",
                           field)
    text = value.strip()
    if text.startswith("data:"):  # data URL: "data:image/png;base64,...."
        head, sep, text = text.partition(",")
        if not sep or ";base64" not in head:
            raise RequestError(422, "bad_base64", "data URL is not base64-encoded (expected 'data:<mime>;base64,')",
                               field)
    text = "".join(text.split())  # line-wrapped base64 (MIME, the base64 tool) is still base64
    if not text:
        raise RequestError(422, "bad_base64", "empty image string", field)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise RequestError(422, "bad_base64", f"invalid base64 ({err}); send standard base64 of the image file bytes",
                           field) from None


def decode_image(data: bytes, field: str, max_pixels: int) -> Image.Image:
    """Image file bytes -> upright RGB PIL image, refusing bombs from the header and corrupt data on load."""
    if not data:
        raise RequestError(422, "corrupt_image", "empty image data", field)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)
    except Image.DecompressionBombError as err:
        raise RequestError(413, "too_large", f"image is too large to decode safely ({err}); downscale it", field) from None
    except UnidentifiedImageError:
        raise RequestError(422, "corrupt_image", "not a readable image (corrupt data or an unsupported format; "
                           f"send one of {', '.join(ALLOWED_IMAGE_FORMATS)})", field) from None
    except (OSError, ValueError, SyntaxError) as err:
        raise RequestError(422, "corrupt_image", f"image data is corrupt ({err})", field) from None
    width, height = image.size
    if width * height > max_pixels:
        raise RequestError(413, "too_large", f"image is {width}x{height} = {width * height} pixels, above the "
                           f"server limit of {max_pixels}; downscale it", field)
    try:
        return load_image(image, max_image_pixels=max_pixels)
    except ImageLoadError as err:
        raise RequestError(422, "corrupt_image", f"unusable image data: {err}", field) from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:  # Pillow decoders raise these on bad data
        raise RequestError(422, "corrupt_image", f"image data is corrupt or truncated ({err})", field) from None


class _RequestParser:
    """Validates a request payload and decodes its images (runs in a worker thread: decoding is CPU work)."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.images = 0

    def _count_image(self, field: str):
        self.images += 1
        if self.images > self.settings.max_images_per_request:
            raise RequestError(413, "too_large", f"more than {self.settings.max_images_per_request} images in one "
                               "request; split it into several requests", field)

    def instruction(self, value, field: str) -> str:
        if not isinstance(value, str):
            raise RequestError(422, "invalid_request", "instruction must be a string", field)
        if len(value) > self.settings.max_instruction_chars:
            raise RequestError(413, "too_large", f"instruction has {len(value)} characters, above the limit of "
                               f"{self.settings.max_instruction_chars}", field)
        if not value.strip():
            raise RequestError(422, "invalid_request", "instruction is empty; send the editing instruction text", field)
        return value.strip()

    def image(self, value, field: str, raw: bool) -> tuple[Image.Image, bytes]:
        self._count_image(field)
        data = value if raw else _b64decode(value, field)
        return decode_image(data, field, self.settings.max_image_pixels), data

    def sources(self, value, field: str, raw: bool) -> tuple[list[Image.Image], list[bytes]]:
        if isinstance(value, (str, bytes)):
            value = [value]  # a single source image
        if not isinstance(value, list):
            raise RequestError(422, "invalid_request", "sources must be a list of base64 image strings", field)
        if not value:
            raise RequestError(422, "invalid_request", "no source images; send at least one", field)
        if len(value) > self.settings.max_sources_per_sample:
            raise RequestError(413, "too_large", f"{len(value)} source images, above the limit of "
                               f"{self.settings.max_sources_per_sample} per sample", field)
        images, blobs = [], []
        for i, item in enumerate(value):
            image, data = self.image(item, f"{field}[{i}]", raw)
            images.append(image)
            blobs.append(data)
        return images, blobs

    @staticmethod
    def prefix_key(source_blobs: list[bytes], instruction: str) -> str:
        digest = hashlib.sha1(instruction.encode("utf-8"))
        for blob in source_blobs:
            digest.update(hashlib.sha1(blob).digest())
        return digest.hexdigest()

    def single(self, payload, prefix: str = "", raw: bool = False) -> _Parsed:
        if not isinstance(payload, dict):
            raise RequestError(422, "invalid_request", 'expected a JSON object {"sources", "edited", "instruction"}',
                               prefix.rstrip(".") or "body")
        for key in ("sources", "edited", "instruction"):
            if key not in payload:
                raise RequestError(422, "invalid_request", f"missing field '{key}'", f"{prefix}{key}")
        instruction = self.instruction(payload["instruction"], f"{prefix}instruction")
        sources, blobs = self.sources(payload["sources"], f"{prefix}sources", raw)
        edited, _ = self.image(payload["edited"], f"{prefix}edited", raw)
        return _Parsed(EditSample(sources=sources, edited=edited, instruction=instruction),
                       prefix_key=self.prefix_key(blobs, instruction))

    def groups(self, payload) -> list[_Parsed]:
        if not isinstance(payload, dict):
            raise RequestError(422, "invalid_request", 'expected a JSON object with "groups" and/or "samples"', "body")
        unknown = sorted(set(payload) - {"groups", "samples"})
        if unknown:
            raise RequestError(422, "invalid_request", f"unknown field(s) {unknown}; use 'groups' and/or 'samples'",
                               unknown[0])
        groups, samples = payload.get("groups", []), payload.get("samples", [])
        if not isinstance(groups, list):
            raise RequestError(422, "invalid_request", "groups must be a list", "groups")
        if not isinstance(samples, list):
            raise RequestError(422, "invalid_request", "samples must be a list", "samples")
        count = len(samples) + sum(len(g["edited"]) for g in groups if isinstance(g, dict)
                                   and isinstance(g.get("edited"), list))
        if count == 0:
            raise RequestError(422, "invalid_request", "no samples; send 'groups' with edited images or 'samples'",
                               "groups")
        if count > self.settings.max_samples_per_request:
            raise RequestError(413, "too_large", f"{count} samples in one request, above the limit of "
                               f"{self.settings.max_samples_per_request}; split it", "groups" if groups else "samples")
        parsed: list[_Parsed] = []
        for g, group in enumerate(groups):
            field = f"groups[{g}]"
            if not isinstance(group, dict):
                raise RequestError(422, "invalid_request", 'expected {"sources", "instruction", "edited": [...]}', field)
            for key in ("sources", "edited", "instruction"):
                if key not in group:
                    raise RequestError(422, "invalid_request", f"missing field '{key}'", f"{field}.{key}")
            edited_list = group["edited"]
            if not isinstance(edited_list, list) or not edited_list:
                raise RequestError(422, "invalid_request", "edited must be a non-empty list of base64 images",
                                   f"{field}.edited")
            instruction = self.instruction(group["instruction"], f"{field}.instruction")
            sources, blobs = self.sources(group["sources"], f"{field}.sources", raw=False)
            key = self.prefix_key(blobs, instruction)
            label = group.get("id", g)
            for e, item in enumerate(edited_list):
                edited, _ = self.image(item, f"{field}.edited[{e}]", raw=False)
                parsed.append(_Parsed(EditSample(sources=sources, edited=edited, instruction=instruction),
                                      prefix_key=key, group=label, index=e))
        seen: dict[Any, int] = {}
        for s, item in enumerate(samples):
            one = self.single(item, prefix=f"samples[{s}].")
            label = item.get("group") if isinstance(item, dict) else None
            if label is not None and not isinstance(label, (str, int)):
                raise RequestError(422, "invalid_request", "group must be a string or an integer", f"samples[{s}].group")
            one.group = label
            key = ("g", label) if label is not None else ("s", s)
            one.index = seen.get(key, 0)
            seen[key] = one.index + 1
            parsed.append(one)
        return parsed


def _parse_json(body: bytes):
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(422, "malformed_json", f"body is not valid JSON ({err})", "body") from None


# ---------------------------------------------------------------------------------------------- batching


class _JobFailed(Exception):
    def __init__(self, error: RequestError):
        super().__init__(error.message)
        self.error = error


@dataclasses.dataclass(eq=False)
class _Job:
    parsed: _Parsed
    future: asyncio.Future
    enqueued: float


class BatchScheduler:
    """Dynamic batching: one asyncio queue of samples, one worker, one model call at a time in a thread.

    The worker takes the oldest sample and waits until ``max_batch`` samples are queued or ``max_wait_ms``
    has passed since that sample arrived, whichever comes first. Samples with the same prefix (sources +
    instruction) stay adjacent in the batch, in arrival order, so ``score_batch`` can reuse their prefix.
    """

    def __init__(self, backend: ScorerBackend, settings: ServerSettings, metrics: ServerMetrics):
        self.backend, self.settings, self.metrics = backend, settings, metrics
        self._pending: deque[_Job] = deque()
        self._running: list[_Job] = []
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stopping = False
        self._flush = False  # draining: no point waiting for more samples
        self._closed: RequestError | None = None  # set once shutdown gave up on queued work
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle (called on the event loop)

    def start(self):
        self.loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="miescore-model")
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
                self._worker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._worker
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def flush(self):
        self._flush = True
        if self._wakeup is not None:
            self._wakeup.set()

    def fail_all(self, error: RequestError):
        self._closed = error
        for job in [*self._pending, *self._running]:
            if not job.future.done():
                job.future.set_exception(_JobFailed(error))
        self._pending.clear()
        self._update_depth()

    # -- submission

    @property
    def depth(self) -> int:
        return len(self._pending)

    def _update_depth(self):
        self.metrics.queue_depth.set(len(self._pending))

    def submit(self, items: Sequence[_Parsed]) -> list[_Job]:
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
            job = _Job(items[i], self.loop.create_future(), now)
            jobs[i] = job
            self._pending.append(job)
        self._update_depth()
        self._wakeup.set()
        return jobs

    def withdraw(self, jobs: Sequence[_Job]):
        """Drop a request's jobs that are still queued (timeout, disconnect); running ones finish unused."""
        gone = set(jobs)
        if any(job in gone for job in self._pending):
            self._pending = deque(job for job in self._pending if job not in gone)
            self._update_depth()
        for job in jobs:
            if not job.future.done():
                job.future.cancel()

    # -- the worker

    def _take(self) -> list[_Job]:
        batch: list[_Job] = []
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

    async def _run(self):
        loop = self.loop
        max_wait = self.settings.max_wait_ms / 1000.0
        while True:
            if not self._pending:
                if self._stopping:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            deadline = self._pending[0].enqueued + max_wait
            while len(self._pending) < self.settings.max_batch and not self._flush:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            batch = self._take()
            if batch:
                try:
                    await self._execute(batch)
                except Exception as err:  # the worker must survive anything; the batch's requests get a 500
                    logger.exception("batch failed unexpectedly")
                    error = RequestError(500, "internal_error", f"internal error while scoring ({type(err).__name__})")
                    for job in batch:
                        if not job.future.done():
                            job.future.set_exception(_JobFailed(error))
                finally:
                    self._running = []

    async def _execute(self, batch: list[_Job]):
        self._running = batch
        now = self.loop.time()
        for job in batch:
            self.metrics.queue_wait.observe(now - job.enqueued)
        self.metrics.batch_size.observe(len(batch))
        started = time.perf_counter()
        outcomes = await self.loop.run_in_executor(self._executor, self._score, [j.parsed.sample for j in batch],
                                                   [j.parsed.prefix_key for j in batch])
        self.metrics.batch_latency.observe(time.perf_counter() - started)
        for job, outcome in zip(batch, outcomes):
            if job.future.done():  # withdrawn (timeout / disconnect / shutdown) while it ran
                continue
            if isinstance(outcome, BaseException):
                if isinstance(outcome, MIEScoreInputError):
                    error = RequestError(422, "invalid_request", f"the model refused this sample: {outcome}"[:500])
                else:
                    error = RequestError(500, "model_error",
                                         f"the model failed on this sample ({type(outcome).__name__}: {outcome})"[:500])
                job.future.set_exception(_JobFailed(error))
            else:
                self.metrics.samples.inc()
                job.future.set_result(outcome)

    def _call_backend(self, samples: list[EditSample], keys: list[str]) -> list:
        if getattr(self.backend, "accepts_group_ids", False):
            return self.backend.score_samples(samples, group_ids=keys)
        return self.backend.score_samples(samples)

    def _score(self, samples: list[EditSample], keys: list[str]) -> list:
        """Runs in the model thread. One call for the batch; if it fails, each sample alone."""
        try:
            results = self._call_backend(samples, keys)
            if len(results) != len(samples):
                raise RuntimeError(f"backend returned {len(results)} results for {len(samples)} samples")
            return [_plain(r) for r in results]
        except Exception as err:
            if len(samples) == 1:
                return [err]
            logger.warning("batch of %d failed (%s: %s); scoring its samples one by one", len(samples),
                           type(err).__name__, err)
        outcomes = []
        for sample, key in zip(samples, keys):
            try:
                outcomes.append(_plain(self._call_backend([sample], [key])[0]))
            except Exception as err:
                outcomes.append(err)
        return outcomes


# ---------------------------------------------------------------------------------------------- the service


class RewardService:
    """Request handling: auth, body limits, parsing, queueing, waiting (with timeout and disconnect)."""

    def __init__(self, backend: ScorerBackend, settings: ServerSettings, metrics: ServerMetrics | None = None):
        self.backend = backend
        self.settings = settings
        self.metrics = metrics or ServerMetrics()
        self.scheduler = BatchScheduler(backend, settings, self.metrics)
        self.draining = False
        self._drain_timer: asyncio.TimerHandle | None = None

    # -- lifecycle

    async def startup(self):
        self.scheduler.start()

    async def shutdown(self):
        self._begin_drain_on_loop()
        await self.scheduler.stop(self.settings.drain_timeout_s)

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

    def check_auth(self, request):
        key = self.settings.api_key
        if key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise RequestError(401, "unauthorized", "missing or wrong API key; send 'Authorization: Bearer <key>'",
                               "Authorization", {"WWW-Authenticate": "Bearer"})

    def check_accepting(self):
        if self.draining:
            raise RequestError(503, "shutting_down", "server is shutting down; retry on another replica",
                               None, {"Retry-After": str(self.settings.retry_after_s)})

    async def read_body(self, request) -> bytes:
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

    async def parse(self, request, body: bytes, endpoint: str) -> list[_Parsed]:
        from starlette.concurrency import run_in_threadpool

        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "multipart/form-data":
            if endpoint != "score":
                raise RequestError(415, "unsupported_media_type", "score_groups takes JSON only", "Content-Type")
            payload = await self._multipart(request, body)
            return [await run_in_threadpool(_RequestParser(self.settings).single, payload, "", True)]
        if content_type not in ("", "application/json", "text/plain", "application/x-www-form-urlencoded"):
            raise RequestError(415, "unsupported_media_type", f"Content-Type '{content_type}' is not accepted; send "
                               "application/json (or multipart/form-data to /v1/score)", "Content-Type")

        def parse_json() -> list[_Parsed]:
            payload = _parse_json(body)
            parser = _RequestParser(self.settings)
            if endpoint == "score":
                return [parser.single(payload)]
            return parser.groups(payload)

        return await run_in_threadpool(parse_json)

    async def _multipart(self, request, body: bytes) -> dict:
        from starlette import formparsers
        from starlette.formparsers import MultiPartException, MultiPartParser

        if formparsers.multipart is None:  # python-multipart is not installed on the server
            raise RequestError(415, "unsupported_media_type", "multipart uploads need the python-multipart package "
                               "on the server; send JSON with base64 images instead", "Content-Type")

        async def stream():
            yield body
            yield b""

        limit = self.settings.max_images_per_request
        parser = MultiPartParser(request.headers, stream(), max_files=limit + 1, max_fields=limit + 8,
                                 max_part_size=self.settings.max_instruction_chars * 4 + 1024)
        try:
            form = await parser.parse()
        except MultiPartException as err:
            raise RequestError(422, "invalid_request", f"malformed multipart body ({err.message})", "body") from None
        try:
            payload: dict[str, Any] = {}
            for name, value in form.multi_items():
                if name == "sources":
                    payload.setdefault("sources", []).append(
                        await value.read() if hasattr(value, "read") else _not_a_file("sources"))
                elif name == "edited":
                    if "edited" in payload:
                        raise RequestError(422, "invalid_request", "send exactly one 'edited' file", "edited")
                    payload["edited"] = await value.read() if hasattr(value, "read") else _not_a_file("edited")
                elif name == "instruction":
                    payload["instruction"] = value if isinstance(value, str) else (await value.read()).decode(
                        "utf-8", errors="replace")
                else:
                    raise RequestError(422, "invalid_request", f"unknown form field '{name}'; use sources, edited, "
                                       "instruction", name)
            return payload
        finally:
            await form.close()

    async def wait(self, request, jobs: list[_Job]) -> list[dict]:
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
            self.scheduler.withdraw(jobs)
            gathered.cancel()
            with contextlib.suppress(BaseException):
                await gathered
            if disconnected in done and not disconnected.cancelled() and disconnected.exception() is None:
                raise RequestError(STATUS_CLIENT_CLOSED, "client_disconnected", "client closed the connection")
            raise RequestError(504, "timeout", f"not scored within {self.settings.request_timeout_s} s; the server "
                               "is overloaded or the model is slow", None)
        outcomes = gathered.result()
        for outcome in outcomes:
            if isinstance(outcome, _JobFailed):
                raise outcome.error
            if isinstance(outcome, BaseException):
                raise RequestError(500, "internal_error", f"internal error ({type(outcome).__name__})")
        return outcomes


def _not_a_file(field: str):
    raise RequestError(422, "invalid_request", f"'{field}' must be an uploaded file, not a text field", field)


async def _wait_for_disconnect(request):
    """Returns when the client disconnects (uvicorn answers ``receive()`` with http.disconnect then)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


# ---------------------------------------------------------------------------------------------- the app


def _error_response(error: RequestError):
    from starlette.responses import JSONResponse

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
                self.metrics.requests.inc(endpoint=endpoint, status=str(state["status"]))
                self.metrics.request_latency.observe(time.perf_counter() - started, endpoint=endpoint)

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


def create_app(backend: ScorerBackend, settings: ServerSettings | None = None):
    """The Starlette app serving ``backend``; ``app.state.service`` is the :class:`RewardService`.

    The batching worker starts and stops with the app's lifespan (uvicorn runs it; so does
    ``starlette.testclient.TestClient`` used as a context manager).
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    settings = settings or ServerSettings()
    service = RewardService(backend, settings)
    metrics = service.metrics

    async def score_endpoint(request, endpoint: str):
        try:
            service.check_auth(request)
            service.check_accepting()
            try:
                body = await service.read_body(request)
            except ClientDisconnect:
                raise RequestError(STATUS_CLIENT_CLOSED, "client_disconnected", "client closed the connection") from None
            # A request that started before a drain began is finished, not refused: it is "in flight".
            parsed = await service.parse(request, body, endpoint)
            jobs = service.scheduler.submit(parsed)
            results = await service.wait(request, jobs)
        except RequestError as err:
            metrics.failures.inc(kind=err.kind)
            return _error_response(err)
        except Exception as err:  # never a traceback to the client
            logger.exception("unexpected error in %s", endpoint)
            metrics.failures.inc(kind="internal_error")
            return _error_response(RequestError(500, "internal_error", f"internal server error ({type(err).__name__})"))
        if endpoint == "score":
            return JSONResponse(results[0])
        return JSONResponse({"results": [{**r, "group": p.group, "index": p.index} for r, p in zip(results, parsed)]})

    async def score(request):
        return await score_endpoint(request, "score")

    async def score_groups(request):
        return await score_endpoint(request, "score_groups")

    async def health(request):
        body = {"status": "draining" if service.draining else "ok", "queue_depth": service.scheduler.depth,
                "max_batch": settings.max_batch, "max_queue": settings.max_queue, **backend.describe()}
        return JSONResponse(body, status_code=503 if service.draining else 200)

    async def metrics_endpoint(request):
        return PlainTextResponse(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    async def http_error(request, exc: HTTPException):
        kind = "not_found" if exc.status_code in (404, 405) else "invalid_request"
        metrics.failures.inc(kind=kind)
        return _error_response(RequestError(exc.status_code, kind, str(exc.detail), None, getattr(exc, "headers", None)))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.startup()
        try:
            yield
        finally:
            await service.shutdown()

    routes = [
        Route("/v1/score", score, methods=["POST"]),
        Route("/v1/score_groups", score_groups, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error},
                    middleware=[Middleware(_MetricsMiddleware, metrics=metrics, endpoints=[r.path for r in routes])])
    app.state.service = service
    app.state.settings = settings
    return app


# ---------------------------------------------------------------------------------------------- running


class BackgroundServer:
    """A uvicorn server on a background thread (tests, notebooks, a reward server inside a training job)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, **config_kwargs):
        import uvicorn

        config_kwargs.setdefault("log_level", "warning")
        config_kwargs.setdefault("access_log", False)
        settings = getattr(app.state, "settings", None)
        if settings is not None:
            config_kwargs.setdefault("timeout_graceful_shutdown", int(math.ceil(settings.drain_timeout_s)) + 1)
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", **config_kwargs))
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
    """Start a reward server on a thread and return it (use as a context manager); ``port=0`` picks a free port."""
    app = backend_or_app if hasattr(backend_or_app, "state") else create_app(backend_or_app, settings)
    return BackgroundServer(app, host=host, port=port, **config_kwargs)


class CallableBackend(ScorerBackend):
    """Wrap a plain ``fn(list[EditSample]) -> list[dict]`` as a backend (fakes in tests, custom scorers)."""

    name = "callable"

    def __init__(self, fn: Callable[[list[EditSample]], list[dict]], name: str = "callable"):
        self.fn = fn
        self.name = name

    def score_samples(self, samples: list[EditSample]) -> list[dict]:
        return self.fn(samples)


__all__ = [
    "BackgroundServer", "BatchScheduler", "CallableBackend", "MIEScoreBackend", "RequestError", "RewardService",
    "ScorerBackend", "ServerSettings", "SpatialRewardBackend", "create_app", "decode_image", "load_backend",
    "serve_in_background",
]
