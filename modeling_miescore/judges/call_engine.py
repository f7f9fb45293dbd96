"""The one engine for "many calls to a large model": request keys, an on-disk answer cache, concurrency,
usage and cost accounting, and a progress bar, for the zero-shot MLLM judges, the SpatialReward data pipeline and
skill optimisation::

    backend = OpenAIChatBackend("http://127.0.0.1:8000/v1", "Qwen/Qwen3-VL-8B-Instruct", max_concurrency=16)
    engine = CallEngine(backend, cache=CallCache("calls.sqlite"))
    results = engine.run([ChatRequest(["Source image 1:", src, "Edited image:", out, "Rate it."], stage="judge")],
                         progress=True)
    results[0].text, results[0].error, results[0].cached
    engine.usage.as_dict()   # requests, cache hits, failures by kind, retries, tokens, cost

A request's key (:func:`request_key`) covers everything that decides the answer (the backend's identity, the text,
each image's pixels, ``max_tokens``, ``temperature``, the extra body fields), not the stage or the endpoint URL:
the same model behind another server gives the same answer (changed the weights behind a name? use another cache
file). ``engine.run`` never raises for a failed request: cached answers come back at once, identical requests
are sent once, each answer is cached the moment it arrives (a killed run loses nothing it received), and a
request that failed after its retries (inside the chat client) is a result with ``error`` set, not cached, so a
rerun tries it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from tqdm.auto import tqdm

from .call_cache import CallCache
from .chat_client import ChatCompletion, ChatError

logger = logging.getLogger(__name__)

__all__ = ["CallEngine", "CallResult", "ChatBackend", "ChatRequest", "UsageLog", "image_digest", "request_key",
           "run_together"]

_KEY_VERSION = 1  # bump when the canonical form changes (old cache entries then simply miss)


@dataclass
class ChatRequest:
    """One user turn: ``parts`` (``str``, ``PIL.Image`` or ready content-part dicts, in order) and how to answer.

    ``max_tokens`` / ``temperature`` None: the field is not sent (the endpoint's default applies; a local model
    decodes greedily, at most :data:`~modeling_miescore.judges.chat_backends.LOCAL_MAX_TOKENS` tokens), as the
    editor benchmarks' released scripts do.
    ``extra`` is merged into an OpenAI request body (``top_p``, ``seed``, ``response_format``...).
    ``stage`` names the request's stage in the usage log (not part of the key).
    """

    parts: Sequence[Any]
    max_tokens: Optional[int] = 1024
    temperature: Optional[float] = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    stage: str = "default"


@dataclass
class CallResult:
    """The outcome of one request: ``text`` (None when it failed), ``error`` (one line, None when it worked),
    ``error_kind`` (a :class:`ChatError` kind or ``"local"``), ``cached`` (answered from the cache), token usage
    and ``finish_reason`` of the answer, and ``repaired`` (lone surrogates in a fresh answer's text were replaced
    with U+FFFD; the cache holds the repaired text)."""

    key: str
    text: Optional[str] = None
    error: Optional[str] = None
    error_kind: Optional[str] = None
    cached: bool = False
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    repaired: bool = False
    model: Optional[str] = None  # the model name the endpoint reported (None: cached, local or not reported)

    @property
    def ok(self) -> bool:
        return self.error is None


class ChatBackend(Protocol):
    """What the engine needs from a backend (see :mod:`modeling_miescore.judges.chat_backends`)."""

    model: str  # the model name in keys and in the usage log
    batch_size: int  # requests per complete_batch call
    max_concurrency: int  # complete_batch calls in flight at once

    def identity(self) -> Dict[str, Any]:
        """Everything besides the request that changes the answer (kind, model, image encoding)."""

    def complete_batch(self, requests: Sequence[ChatRequest]) -> List[Any]:
        """One :class:`ChatCompletion` or exception per request, in order; never raises for a failed request."""


# ------------------------------------------------------------------------------------------------ request keys


def image_digest(image) -> str:
    """sha256 of an image's mode, size and raw pixel bytes (two equal images give one digest, whatever file
    they came from; the cheap part: no encoding)."""
    digest = hashlib.sha256(f"{image.mode}|{image.width}x{image.height}|".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def _canonical_part(part: Any) -> Any:
    from PIL import Image

    if isinstance(part, str):
        return {"text": part}
    if isinstance(part, Image.Image):
        return {"image": image_digest(part)}
    if isinstance(part, Mapping):
        return {"part": dict(part)}
    raise TypeError(f"a request part must be a str, a PIL image or a content-part dict, got {type(part).__name__}")


def request_key(identity: Mapping[str, Any], request: ChatRequest) -> str:
    """The cache key of ``request`` sent to a backend of ``identity`` (see the module docstring)."""
    canonical = {"v": _KEY_VERSION, "backend": dict(identity), "parts": [_canonical_part(p) for p in request.parts],
                 "max_tokens": None if request.max_tokens is None else int(request.max_tokens),
                 "temperature": None if request.temperature is None else float(request.temperature),
                 "extra": dict(request.extra)}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # a lone surrogate is still a key


# ------------------------------------------------------------------------------------------------ usage log

_COUNTERS = ("requests", "cache_hits", "duplicates", "sent", "ok", "failed", "retries", "prompt_tokens",
             "completion_tokens", "answers_without_usage", "repaired_text")


class UsageLog:
    """Thread-safe counters per ``(model, stage)``: requests asked for, cache hits, requests sent, answers,
    failures (by kind: ``timeout``, ``too_large``, ...), retries, prompt/completion tokens of sent requests,
    answers whose text had to be repaired (``repaired_text``: lone surrogates), and seconds spent.

    ``prices``: ``{model: (usd_per_1k_prompt_tokens, usd_per_1k_completion_tokens)}``; models without a price
    get ``cost_usd: None``. Cached answers cost nothing (their tokens were paid when they were first sent).
    """

    def __init__(self, prices: Optional[Mapping[str, Tuple[float, float]]] = None):
        self.prices = {str(k): (float(v[0]), float(v[1])) for k, v in (prices or {}).items()}
        self._lock = threading.Lock()
        self._rows: Dict[Tuple[str, str], Dict[str, Any]] = {}

    def _row(self, model: str, stage: str) -> Dict[str, Any]:
        key = (model, stage)
        if key not in self._rows:
            self._rows[key] = {**{name: 0 for name in _COUNTERS}, "failed_by_kind": {}, "seconds": 0.0}
        return self._rows[key]

    def record(self, model: str, stage: str, result: CallResult, attempts: int = 1, duplicate: bool = False) -> None:
        """Count one request's outcome; ``duplicate``: it shared the answer of an identical request of its run."""
        with self._lock:
            row = self._row(model, stage)
            row["requests"] += 1
            if duplicate:
                row["duplicates"] += 1
            elif result.cached:
                row["cache_hits"] += 1
                return
            row["sent"] += 1
            row["retries"] += max(0, int(attempts) - 1)
            if not result.ok:
                row["failed"] += 1
                kinds = row["failed_by_kind"]
                kinds[result.error_kind] = kinds.get(result.error_kind, 0) + 1
                return
            row["ok"] += 1
            row["repaired_text"] += int(result.repaired)
            if result.prompt_tokens is None and result.completion_tokens is None:
                row["answers_without_usage"] += 1
            row["prompt_tokens"] += result.prompt_tokens or 0
            row["completion_tokens"] += result.completion_tokens or 0

    def add_seconds(self, model: str, stage: str, seconds: float) -> None:
        with self._lock:
            self._row(model, stage)["seconds"] += float(seconds)

    def _cost(self, model: str, row: Mapping[str, Any]) -> Optional[float]:
        if model not in self.prices:
            return None
        prompt_price, completion_price = self.prices[model]
        return round(row["prompt_tokens"] / 1000 * prompt_price + row["completion_tokens"] / 1000 * completion_price,
                     6)

    def as_dict(self) -> Dict[str, Any]:
        """``{"by_stage": [{model, stage, counters..., cost_usd}], "totals": {counters..., cost_usd}}``."""
        with self._lock:
            rows = [{"model": m, "stage": s, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in r.items()}}
                    for (m, s), r in sorted(self._rows.items())]
        for row in rows:
            row["seconds"] = round(row["seconds"], 3)
            row["cost_usd"] = self._cost(row["model"], row)
        totals: Dict[str, Any] = {name: sum(r[name] for r in rows) for name in _COUNTERS}
        costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
        totals["cost_usd"] = round(sum(costs), 6) if costs else None
        totals["failed_by_kind"] = {}
        for row in rows:
            for kind, count in row["failed_by_kind"].items():
                totals["failed_by_kind"][kind] = totals["failed_by_kind"].get(kind, 0) + count
        return {"by_stage": rows, "totals": totals}

    def summary_line(self) -> str:
        t = self.as_dict()["totals"]
        cost = "" if t["cost_usd"] is None else f", ${t['cost_usd']:.4f}"
        kinds = f" {t['failed_by_kind']}" if t["failed_by_kind"] else ""
        return (f"{t['requests']} requests: {t['cache_hits']} from the cache, {t['duplicates']} duplicates, "
                f"{t['sent']} sent, {t['failed']} failed{kinds}, {t['retries']} retries; {t['prompt_tokens']} prompt + "
                f"{t['completion_tokens']} completion tokens{cost}")


# ------------------------------------------------------------------------------------------------ the engine


def _error_result(key: str, error: BaseException) -> CallResult:
    message = " ".join(str(error).split())[:500]
    if isinstance(error, ChatError):
        return CallResult(key, error=f"ChatError[{error.kind}]: {message}", error_kind=error.kind)
    return CallResult(key, error=f"{type(error).__name__}: {message}", error_kind="local")


def _answer_result(key: str, answer: ChatCompletion, cached: bool) -> CallResult:
    return CallResult(key, text=answer.text, cached=cached, prompt_tokens=answer.prompt_tokens,
                      completion_tokens=answer.completion_tokens, finish_reason=answer.finish_reason,
                      repaired=answer.repaired and not cached, model=None if cached else answer.model)


class CallEngine:
    """Runs many :class:`ChatRequest` through one backend with a cache and a usage log (module docstring).

    Args:
        backend: an :class:`~modeling_miescore.judges.chat_backends.OpenAIChatBackend`,
            :class:`~modeling_miescore.judges.chat_backends.TransformersChatBackend` or anything with the
            :class:`ChatBackend` attributes.
        cache: a :class:`CallCache` (several engines may share one), or None for no cache.
        usage: a :class:`UsageLog` (several engines may share one); a new one by default.
        name: shown on the progress bar (default: the backend's model).
    """

    def __init__(self, backend: ChatBackend, cache: Optional[CallCache] = None, usage: Optional[UsageLog] = None,
                 name: Optional[str] = None):
        self.backend = backend
        self.cache = cache
        self.usage = usage if usage is not None else UsageLog()
        self.name = name or backend.model
        self._identity = dict(backend.identity())

    def __repr__(self) -> str:
        return f"CallEngine({self.backend!r}, cache={self.cache!r})"

    def key(self, request: ChatRequest) -> str:
        return request_key(self._identity, request)

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def run(self, requests: Sequence[ChatRequest], progress: bool = False, desc: Optional[str] = None
            ) -> List[CallResult]:
        """One :class:`CallResult` per request, in order (see the module docstring); never raises for a failed
        request. Raises ``TypeError`` for a request part that is not text, an image or a content-part dict."""
        requests = list(requests)
        keys = [self.key(r) for r in requests]
        found = self.cache.get_many(keys) if self.cache is not None else {}
        results: List[Optional[CallResult]] = [None] * len(requests)
        first_of: Dict[str, int] = {}
        for i, key in enumerate(keys):
            if key in found:
                results[i] = _answer_result(key, found[key], cached=True)
            else:
                first_of.setdefault(key, i)
        started = time.perf_counter()
        with tqdm(total=len(requests), desc=desc or self.name, unit="call", disable=not progress,
                  initial=len(requests) - sum(r is None for r in results), leave=False) as bar:
            self._send_all(requests, keys, sorted(first_of.values()), results, bar)
        for i, key in enumerate(keys):  # duplicates of a sent request share its answer (counted as duplicates)
            if results[i] is None:
                origin = results[first_of[key]]
                results[i] = CallResult(**{**origin.__dict__, "cached": origin.ok})
            if key in first_of and i != first_of[key]:
                self.usage.record(self.backend.model, requests[i].stage, results[i], duplicate=True)
            elif key not in first_of:
                self.usage.record(self.backend.model, requests[i].stage, results[i])
        self._record_seconds(requests, time.perf_counter() - started)
        return results  # type: ignore[return-value]

    def _send_all(self, requests, keys, todo: List[int], results, bar) -> None:
        size = max(1, int(self.backend.batch_size))
        batches = [todo[s:s + size] for s in range(0, len(todo), size)]
        if not batches:
            return
        pool = ThreadPoolExecutor(max_workers=max(1, min(int(self.backend.max_concurrency), len(batches))),
                                  thread_name_prefix="call-engine")
        try:
            pending = {pool.submit(self._complete, [requests[i] for i in batch]): batch for batch in batches}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    batch = pending.pop(future)
                    for i, answer in zip(batch, future.result()):
                        results[i] = self._store(keys[i], requests[i], answer)
                    bar.update(len(batch))
        finally:  # Ctrl-C: drop what has not started; answers already stored stay in the cache
            pool.shutdown(wait=True, cancel_futures=True)

    def _complete(self, batch: List[ChatRequest]) -> List[Any]:
        try:
            answers = list(self.backend.complete_batch(batch))
        except Exception as err:  # a backend bug must not lose the other batches' answers
            answers = [err] * len(batch)
        if len(answers) != len(batch):
            answers = [RuntimeError(f"the backend returned {len(answers)} answers for {len(batch)} requests")] \
                * len(batch)
        return answers

    def _store(self, key: str, request: ChatRequest, answer: Any) -> CallResult:
        if isinstance(answer, ChatCompletion):
            result = _answer_result(key, answer, cached=False)
            if self.cache is not None:
                self.cache.put(key, self.backend.model, request.stage, answer)
            attempts = answer.attempts
        else:
            result = _error_result(key, answer)
            attempts = getattr(answer, "attempts", 1)
            logger.info("%s: request failed: %s", self.name, result.error)
        self.usage.record(self.backend.model, request.stage, result, attempts=attempts)
        return result

    def _record_seconds(self, requests: Sequence[ChatRequest], seconds: float) -> None:
        stages = {r.stage for r in requests}
        for stage in stages:  # a run of mixed stages: its time is split by request count
            share = sum(r.stage == stage for r in requests) / max(1, len(requests))
            self.usage.add_seconds(self.backend.model, stage, seconds * share)


def run_together(jobs: Sequence[Tuple[CallEngine, Sequence[ChatRequest]]]) -> List[List[CallResult]]:
    """Run several engines' requests at the same time (e.g. one stage's SC and PQ judges on two endpoints);
    returns each job's results, in job order. Jobs of one engine are merged into one run (never two runs of an
    engine at once: a local model generates one batch at a time)."""
    merged: Dict[int, Tuple[CallEngine, List[ChatRequest], List[Tuple[int, int, int]]]] = {}
    for index, (engine, requests) in enumerate(jobs):
        engine_requests = merged.setdefault(id(engine), (engine, [], []))
        start = len(engine_requests[1])
        engine_requests[1].extend(requests)
        engine_requests[2].append((index, start, len(engine_requests[1])))
    active = [entry for entry in merged.values() if entry[1]]
    out: List[List[CallResult]] = [[] for _ in jobs]

    def run(entry) -> None:
        engine, requests, slices = entry
        results = engine.run(requests)
        for index, start, end in slices:
            out[index] = results[start:end]

    if len(active) <= 1:
        for entry in active:
            run(entry)
        return out
    with ThreadPoolExecutor(max_workers=len(active), thread_name_prefix="run-together") as pool:
        for future in [pool.submit(run, entry) for entry in active]:
            future.result()
    return out
