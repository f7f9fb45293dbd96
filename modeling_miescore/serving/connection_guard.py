"""Connection-level protection of the reward server, below the ASGI app: a header timeout, a cap on open
connections answered with 503, and that cap kept below the process's file-descriptor limit.

What uvicorn 0.54 leaves open (``uvicorn/protocols/http/h11_impl.py``): its only connection timer is
``timeout_keep_alive``, armed after a response and cancelled by the next byte, so a client that connects and
sends nothing, or part of a request line and headers, keeps its socket for ever; ``limit_concurrency`` answers
503 only once a request's headers are complete, which stalled sockets never reach; and nothing keeps the number
of sockets below the file limit, so ``accept()`` fails with EMFILE and asyncio logs a traceback per retry.

:func:`guarded_protocol` returns an ``H11Protocol`` subclass (passed to uvicorn as ``http=``) that

- closes a connection whose request headers are not complete ``header_timeout_s`` after it connected, or after
  the first byte of its next request (a 408 first when part of a request had arrived);
- answers 503 (JSON error, ``Retry-After``) and closes a new connection when ``max_connections`` are open;
- counts both in the server's metrics (failure kinds ``header_timeout`` and ``too_many_connections``).

The h11 implementation is used whatever else is installed, so the protection does not depend on which HTTP
parser uvicorn would pick. Request bodies have their own timeout in the app (``body_timeout_s``).
"""

from __future__ import annotations

import json
import logging

try:
    import resource  # Unix only; elsewhere the cap is max_connections as given
except ImportError:  # pragma: no cover - Windows
    resource = None

from uvicorn.protocols.http.h11_impl import H11Protocol

from .settings import ServerSettings

__all__ = ["guarded_protocol", "connection_limits", "raise_fd_limit", "uvicorn_options", "FD_RESERVE"]

logger = logging.getLogger("miescore.server")

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
