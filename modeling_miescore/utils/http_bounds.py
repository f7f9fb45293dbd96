"""HTTP calls to servers we do not control (the reward-server client, the OpenAI-compatible chat client): one
retry policy, a total deadline per request, and a byte limit on each answer.

**Retries** (:func:`send_with_retries`, on ``tenacity``): a request is retried when it raises one of
``policy.exceptions`` or answers one of ``policy.statuses``; the wait before retry ``k`` is the server's
``Retry-After`` (delta-seconds or an HTTP date) or ``backoff * 2**k`` with up to 10 % jitter, capped at
``max_backoff``. The caller gets the last response or exception and the number of attempts.

**Deadline**: httpx's timeouts apply to each network operation, so a server sending one byte a second never trips
them. :func:`deadline_client` opens sockets through :class:`DeadlineBackend`, so that every operation of a request
made inside :func:`request_deadline` gets at most the time left (an ``httpx.TimeoutException``, retried as a
timeout).

**Bytes**: :func:`read_bounded_body` decodes gzip, deflate and (with ``brotli``) br itself, so at most
``max_bytes`` come off the wire and out of the decoders (a gzip bomb is never inflated whole); a larger
``Content-Length`` is refused before reading. Over the limit, :class:`AnswerTooLarge` is raised and the
connection closed.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import random
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional

import httpcore
import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, retry_if_result, stop_after_attempt


def retry_after_seconds(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header value (delta-seconds or HTTP date); None if absent/unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """What to retry and how long to wait (module docstring). ``retryable``: an optional further test on a
    response whose status is in ``statuses`` (False: answer it as it is; e.g. a 500 that names the one sample the
    model failed on will fail again)."""

    max_retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 30.0
    statuses: frozenset = frozenset({408, 409, 429, 500, 502, 503, 504})
    exceptions: tuple = field(default=())
    retryable: Optional[Callable[[Any], bool]] = None

    def __post_init__(self):
        if int(self.max_retries) < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("max_retries, backoff and max_backoff must be >= 0")

    def wait_seconds(self, retry_index: int, response: Any = None) -> float:
        """The wait before retry ``retry_index`` (0-based) after ``response`` (None after an exception)."""
        if response is not None:
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
            if retry_after is not None:
                return min(retry_after, self.max_backoff)
        return min(self.backoff * (2 ** retry_index) * (1.0 + 0.1 * random.random()), self.max_backoff)


@dataclass
class Attempted:
    """The outcome of :func:`send_with_retries`: the last response, or the last exception, and the attempt count."""

    response: Any = None
    error: Optional[BaseException] = None
    attempts: int = 1


def send_with_retries(send: Callable[[], Any], policy: RetryPolicy, *,
                      on_retry: Optional[Callable[[Attempted, float], None]] = None,
                      sleep: Callable[[float], None] = time.sleep) -> Attempted:
    """Call ``send()`` (returns an object with ``status_code`` and ``headers``) under ``policy``; a retryable
    exception or status still there after the last attempt is returned in :class:`Attempted`, never raised (other
    exceptions propagate at once). ``on_retry(outcome, wait)`` is called before each wait."""

    def wait(state: RetryCallState) -> float:
        outcome = state.outcome
        response = None if outcome.failed else outcome.result()
        return policy.wait_seconds(state.attempt_number - 1, response)

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None:
            on_retry(_attempted(state), state.next_action.sleep)

    retrying = Retrying(
        stop=stop_after_attempt(int(policy.max_retries) + 1),
        wait=wait,
        retry=retry_if_exception_type(tuple(policy.exceptions))
        | retry_if_result(lambda response: response.status_code in policy.statuses
                          and (policy.retryable is None or policy.retryable(response))),
        retry_error_callback=_attempted,
        before_sleep=before_sleep,
        sleep=sleep,
    )
    result = retrying(send)
    if isinstance(result, Attempted):
        return result
    return Attempted(response=result, attempts=retrying.statistics.get("attempt_number", 1))


def _attempted(state: RetryCallState) -> Attempted:
    outcome = state.outcome
    if outcome.failed:
        return Attempted(error=outcome.exception(), attempts=state.attempt_number)
    return Attempted(response=outcome.result(), attempts=state.attempt_number)


_WRITE_CHUNK = 64 * 1024  # a write is cut into chunks so that each one gets the time that is left
_state = threading.local()  # the deadline (time.monotonic()) of the request this thread is sending


@contextlib.contextmanager
def request_deadline(seconds: float) -> Iterator[float]:
    """Every network operation of this thread inside the block ends by ``now + seconds``; yields the deadline."""
    previous = getattr(_state, "deadline", None)
    _state.deadline = time.monotonic() + float(seconds)
    try:
        yield _state.deadline
    finally:
        _state.deadline = previous


def _time_left(timeout: Optional[float], error) -> Optional[float]:
    """``timeout`` shortened to the time left before this thread's deadline; ``error`` once it has passed."""
    deadline = getattr(_state, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        view = memoryview(buffer)
        for start in range(0, len(view), _WRITE_CHUNK):
            self._inner.write(bytes(view[start:start + _WRITE_CHUNK]), _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname: Optional[str] = None, timeout: Optional[float] = None):
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _time_left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every operation cut to the calling thread's :func:`request_deadline`."""

    def __init__(self, inner: Optional[httpcore.NetworkBackend] = None):
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        stream = self._inner.connect_tcp(host, port, _time_left(timeout, httpcore.ConnectTimeout), local_address,
                                         socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_unix_socket(path, _time_left(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_client(**client_args: Any) -> httpx.Client:
    """``httpx.Client(**client_args)`` whose connections (direct and through environment proxies) honour
    :func:`request_deadline`.

    httpx builds its httpcore connection pools itself and takes no network backend, so the backend of each
    pool is wrapped after the client is made (``tests/judges/test_endpoint_limits.py`` checks that slow headers and a
    trickling body both stop at the deadline, which fails loudly if a later httpx lays its pools out otherwise).
    """
    client = httpx.Client(**client_args)
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):
            client.close()
            raise RuntimeError(f"httpx {httpx.__version__}: cannot bound the request time of a "
                               f"{type(transport).__name__}; install httpx 0.28")
        if not isinstance(pool._network_backend, DeadlineBackend):
            pool._network_backend = DeadlineBackend(pool._network_backend)
    return client


# ------------------------------------------------------------------------------------------------ body bytes


class AnswerTooLarge(Exception):
    """The answer's body is over the byte limit (``where``: ``"by its Content-Length"``, ``"on the wire"`` or
    ``"after decompression"``)."""

    def __init__(self, limit: int, where: str, size: Optional[int] = None):
        self.limit, self.where, self.size = int(limit), where, size
        told = f" ({size} bytes)" if size is not None else ""
        super().__init__(f"the answer is over the {limit}-byte limit {where}{told}; it was not read further")


class BadBody(ValueError):
    """A body that cannot be decoded: an unsupported ``Content-Encoding`` or a corrupt compressed stream."""


class _Zlib:
    """gzip or deflate (zlib-wrapped, or raw as some servers send it), with bounded output."""

    def __init__(self, kind: str):
        self.kind = kind
        self._inner = zlib.decompressobj(zlib.MAX_WBITS | 16 if kind == "gzip" else zlib.MAX_WBITS)
        self._first = kind == "deflate"

    def feed(self, data: bytes, room: int) -> bytes:
        if self._first and data:  # a deflate body without the zlib header: raw deflate
            self._first = False
            if data[0] & 0x0F != 8:
                self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._inner.decompress(data, room + 1)  # one byte more than room says "too large"

    def flush(self, room: int) -> bytes:
        if not self._inner.eof:
            raise BadBody(f"the {self.kind} body ends before its compressed stream does")
        return b""


class _Brotli:
    def __init__(self):
        import brotli

        self._inner = brotli.Decompressor()

    def feed(self, data: bytes, room: int) -> bytes:
        out = self._inner.process(data, output_buffer_limit=room + 1)
        if len(out) <= room and not self._inner.can_accept_more_data():
            out += b"x" * (room + 1)  # output is still pending beyond the limit
        return out

    def flush(self, room: int) -> bytes:
        if not self._inner.is_finished():
            raise BadBody("the br body ends before its compressed stream does")
        return b""


def _brotli_available() -> bool:
    try:
        import brotli
    except ImportError:
        return False
    return hasattr(brotli.Decompressor(), "can_accept_more_data")  # bounded output (brotli >= 1.1)


_DECODERS = {"identity": None, "gzip": lambda: _Zlib("gzip"), "x-gzip": lambda: _Zlib("gzip"),
             "deflate": lambda: _Zlib("deflate")}
if _brotli_available():
    _DECODERS["br"] = _Brotli


def accept_encoding() -> str:
    """The ``Accept-Encoding`` header value: the encodings :func:`read_bounded_body` can decode with bounds."""
    return ", ".join(name for name in ("gzip", "deflate", "br") if name in _DECODERS)


def _decoders(response: httpx.Response) -> List[Any]:
    names = [n.strip().lower() for n in response.headers.get("content-encoding", "").split(",") if n.strip()]
    unknown = [n for n in names if n not in _DECODERS]
    if unknown:
        raise BadBody(f"Content-Encoding {', '.join(unknown)[:80]} is not supported (accepted: {accept_encoding()})")
    return [_DECODERS[name]() for name in reversed(names) if _DECODERS[name]]  # the last applied is undone first


@dataclass(frozen=True)
class BoundedResponse:
    """A response read within bounds: ``status_code``, ``headers`` and the decoded ``content``."""

    status_code: int
    headers: Any
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def read_bounded_body(response: httpx.Response, max_bytes: int) -> BoundedResponse:
    """Read a streamed ``response`` (``client.stream(...)``) within ``max_bytes`` (module docstring).

    Raises :class:`AnswerTooLarge`, or :class:`BadBody` for an unsupported encoding or a corrupt compressed
    body; network errors and the deadline propagate as httpx exceptions."""
    limit = int(max_bytes)
    if response.is_stream_consumed:  # built in memory (a test's httpx.MockTransport): nothing left to bound
        if len(response.content) > limit:
            raise AnswerTooLarge(limit, "after decompression", len(response.content))
        return BoundedResponse(response.status_code, response.headers, response.content)
    length = response.headers.get("content-length", "")
    if length.strip().isdigit() and int(length) > limit:
        raise AnswerTooLarge(limit, "by its Content-Length", int(length))
    decoders = _decoders(response)
    raw = 0
    chunks: List[bytes] = []
    size = 0

    def decode(data: bytes, final: bool) -> None:
        nonlocal size
        for decoder in decoders:
            room = limit - size
            try:
                data = decoder.feed(data, room) + (decoder.flush(room) if final else b"")
            except BadBody:
                raise
            except Exception as err:  # zlib.error, brotli.error: a corrupt compressed stream
                raise BadBody(f"corrupt compressed body ({type(err).__name__}: {err})") from None
            if len(data) > room:
                raise AnswerTooLarge(limit, "after decompression")
        if len(data) > limit - size:
            raise AnswerTooLarge(limit, "after decompression")
        if data:
            chunks.append(data)
            size += len(data)

    for chunk in response.iter_raw():
        raw += len(chunk)
        if raw > limit:
            raise AnswerTooLarge(limit, "on the wire")
        decode(chunk, final=False)
        _time_left(None, httpx.ReadTimeout)  # the deadline also ends a body whose reads all return in time
    decode(b"", final=True)
    return BoundedResponse(response.status_code, response.headers, b"".join(chunks))


__all__ = ["AnswerTooLarge", "Attempted", "BadBody", "BoundedResponse", "DeadlineBackend", "RetryPolicy",
           "accept_encoding", "deadline_client", "read_bounded_body", "request_deadline", "retry_after_seconds",
           "send_with_retries"]
