"""Reward server under abuse, loopback only and bounded: stalled half-sent headers (header timeout), more
connections than allowed (503 and close), a process at its file-descriptor limit, floods of identical log
errors, and requests whose small files decode to huge images (pixel budgets, measured with the server's RSS).
"""

from __future__ import annotations

import base64
import errno
import io
import json
import logging
import re
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from prometheus_text import metric_value

from modeling_miescore.serving.backends import CallableBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.serving.settings import ServerSettings

HALF_SENT = b"POST /v1/score HTTP/1.1\r\nHost: x\r\n"  # the request line and one header, then nothing
FAKE_SERVER = Path(__file__).parents[1] / "fake_reward_server.py"


def _need_file_descriptors(count: int) -> None:
    """Raise this process's soft open-file limit to ``count`` (or skip: the hard limit forbids it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < count:
        if hard != resource.RLIM_INFINITY and hard < count:
            pytest.skip(f"needs {count} open files; the hard limit here is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))


def _open_stalled(port: int, count: int, payload: bytes = HALF_SENT, timeout: float = 10.0) -> list[socket.socket]:
    """``count`` connections opened in parallel, each sending ``payload`` and then nothing; the ones that could
    not connect within ``timeout`` are left out."""
    pending, connected = [], []
    with selectors.DefaultSelector() as selector:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE)
            pending.append(sock)
        deadline = time.monotonic() + timeout
        while len(connected) < count and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.2):
                sock = key.fileobj
                selector.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connected.append(sock)
    for sock in pending:
        if sock in connected:
            try:
                sock.setblocking(True)
                sock.settimeout(5)
                if payload:
                    sock.sendall(payload)
                continue
            except OSError:
                pass
        sock.close()
    return [sock for sock in connected if sock.fileno() != -1]


def _read_until_closed(sockets: list[socket.socket], deadline: float) -> dict[socket.socket, bytes]:
    """What each socket received until the server closed it; sockets still open at ``deadline`` are left out."""
    received = {sock: b"" for sock in sockets}
    closed: dict[socket.socket, bytes] = {}
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while len(closed) < len(sockets) and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, min(0.2, deadline - time.monotonic()))):
                sock = key.fileobj
                try:
                    data = sock.recv(65536)
                except (ConnectionResetError, BlockingIOError):
                    data = b""
                if data:
                    received[sock] += data
                else:
                    closed[sock] = received[sock]
                    selector.unregister(sock)
    return closed


def _get_health(port: int, timeout: float) -> int | str:
    """GET /health on a fresh connection (a raw socket: no client-side setup cost to measure): the status, or
    the name of the error."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = b""
            while b"\r\n" not in head:
                data = sock.recv(4096)
                if not data:
                    break
                head += data
    except OSError as err:
        return type(err).__name__
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", head)
    return int(match.group(1)) if match else f"no answer: {head[:60]!r}"


class _HealthProbe(threading.Thread):
    """GETs /health every 0.1 s until stopped; records (status or error name, seconds) per probe."""

    def __init__(self, port: int, timeout: float = 2.0):
        super().__init__(daemon=True)
        self.port, self.timeout, self.results, self.stop_event = port, timeout, [], threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            started = time.monotonic()
            status = _get_health(self.port, self.timeout)
            self.results.append((status, time.monotonic() - started))
            self.stop_event.wait(0.1)

    def stop(self) -> list:
        self.stop_event.set()
        self.join(10)
        return self.results


def _close_all(sockets):
    for sock in sockets:
        sock.close()


# ---------------------------------------------------------------------------------------------- connections


def test_stalled_half_sent_headers_are_timed_out_while_health_answers():
    """500 connections send a request line and one header, then stall: /health answers within 2 s throughout,
    and every stalled socket is closed (with a 408) within the header timeout (2 s here)."""
    _need_file_descriptors(1024)
    process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--header-timeout", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stalled = []
    try:
        url = _first_line_url(process)
        port = int(url.rsplit(":", 1)[1])
        probe = _HealthProbe(port)
        probe.start()
        started = time.monotonic()
        stalled = _open_stalled(port, 500)
        closed = _read_until_closed(stalled, deadline=started + 2.0 + 3.0)  # the timeout + a loaded machine's slack
        time.sleep(0.3)
        probes = probe.stop()
        assert len(closed) == 500, f"{500 - len(closed)} stalled sockets still open after the header timeout"
        assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in closed.values())
        assert len(probes) >= 10 and all(status == 200 and seconds < 2.0 for status, seconds in probes), probes
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert metric_value(metrics, "miescore_failures_total", kind="header_timeout") == 500
    finally:
        _close_all(stalled)
        process.kill()
        process.wait(timeout=10)


def test_a_connection_idle_from_the_start_is_closed_too():
    settings = ServerSettings(header_timeout_s=1.0)
    with serve_in_background(CallableBackend(lambda samples: [{} for _ in samples]), settings) as server:
        [silent] = _open_stalled(server.port, 1, payload=b"")
        try:
            closed = _read_until_closed([silent], deadline=time.monotonic() + 4.0)
        finally:
            silent.close()
    assert list(closed.values()) == [b""]  # nothing was asked, so nothing is answered: just closed


def test_connections_beyond_the_cap_get_a_503_and_are_closed():
    settings = ServerSettings(max_connections=20, header_timeout_s=3.0, retry_after_s=2)
    with serve_in_background(CallableBackend(lambda samples: [{} for _ in samples]), settings) as server:
        stalled = _open_stalled(server.port, 20)
        try:
            state = server.server.server_state
            deadline = time.monotonic() + 5
            while len(state.connections) < 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            [extra] = _open_stalled(server.port, 1, payload=b"")
            answer = _read_until_closed([extra], deadline=time.monotonic() + 5)
            extra.close()
            [raw] = answer.values()
            head, _, body = raw.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 2" in head.lower()
            assert json.loads(body)["error"]["kind"] == "too_many_connections"
            refused = httpx.get(server.url + "/health", timeout=2)  # a real client reads the 503 cleanly
            assert refused.status_code == 503 and refused.json()["error"]["kind"] == "too_many_connections"
            _read_until_closed(stalled, deadline=time.monotonic() + 6)  # the header timeout frees the slots
        finally:
            _close_all(stalled)
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        metrics = httpx.get(server.url + "/metrics").text
        assert metric_value(metrics, "miescore_failures_total", kind="too_many_connections") == 2


def test_connection_cap_and_backlog_fit_the_file_descriptor_limit():
    from modeling_miescore.serving.app import (ACCEPT_BATCHES, FD_RESERVE, REFUSAL_SLACK,
                                                            connection_limits)

    assert connection_limits(1000, soft_fd_limit=100_000) == (1000, 2048)
    assert connection_limits(1000, soft_fd_limit=resource.RLIM_INFINITY) == (1000, 2048)
    for soft in (256, 1024, 4096):
        cap, backlog = connection_limits(1000, soft_fd_limit=soft)
        assert 1 <= cap <= 1000 and 16 <= backlog
        assert cap + REFUSAL_SLACK + ACCEPT_BATCHES * backlog + FD_RESERVE <= soft


def test_a_server_at_its_file_limit_keeps_answering_and_its_log_stays_small(tmp_path):
    """The issue's scenario, scaled down: a server process allowed 256 open files gets 300 stalled
    connections. /health always gets an HTTP answer (503 while the stalled ones hold every slot, 200 once the
    header timeout freed them) and stderr does not fill with EMFILE tracebacks."""
    _need_file_descriptors(1024)
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--nofile", "256", "--header-timeout", "4"],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
    stalled = []
    try:
        url = _first_line_url(process)
        port = int(url.rsplit(":", 1)[1])
        started = time.monotonic()
        stalled = _open_stalled(port, 300)
        time.sleep(1.5)  # refusals that are still lingering have gone
        statuses = []
        for _ in range(5):
            statuses.append(_get_health(port, timeout=2))
            time.sleep(0.2)
        assert set(statuses) <= {200, 503}, statuses
        _read_until_closed(stalled, deadline=started + 8)
        assert httpx.get(url + "/health", timeout=5).status_code == 200
    finally:
        _close_all(stalled)
        process.kill()
        process.wait(timeout=10)
    log = stderr_path.read_bytes()
    assert b"Too many open files" not in log
    assert len(log) < 20_000, log[-2000:]


def _first_line_url(process: subprocess.Popen, timeout: float = 60) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    match = re.search(r"http://127\.0\.0\.1:\d+", result[0] if result else "")
    if match is None:
        process.kill()
        pytest.fail(f"the fake server did not start: {result}")
    return match.group(0)


# ---------------------------------------------------------------------------------------------- logs


def test_identical_errors_are_rate_limited_with_a_summary():
    from modeling_miescore.serving.monitoring import RepeatedMessageFilter

    now = [0.0]
    stream = io.StringIO()
    logger = logging.getLogger("miescore.test.rate_limit")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    logger.addFilter(RepeatedMessageFilter(burst=3, interval_s=60, clock=lambda: now[0]))
    try:
        for i in range(100):
            try:
                raise OSError(errno.EMFILE, "Too many open files")
            except OSError:
                logger.error("accept failed on socket %d", 7, exc_info=True)
            now[0] += 0.1
        logger.error("a different problem")
        now[0] = 61.0
        logger.error("accept failed on socket %d", 7, exc_info=(OSError, OSError(errno.EMFILE, "again"), None))
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("OSError: [Errno 24]") == 4  # the first three in full, and the first of the next interval
    assert text.count("accept failed on socket 7 [repeated 4 times") == 1  # then one summary line
    assert "a different problem" in text  # other messages are not affected
    assert "[96 more like the next line were suppressed in the previous 60 s] accept failed on socket 7" in text
    assert len(text.splitlines()) < 40


def test_the_server_rate_limits_asyncio_accept_errors():
    """What asyncio does on EMFILE (the loop's exception handler, once per retry) logs a few tracebacks, not one
    per occurrence."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.addHandler(handler)
    try:
        with serve_in_background(CallableBackend(lambda samples: [{} for _ in samples])) as server:
            loop = server.app.state.service.scheduler.loop
            error = OSError(errno.EMFILE, "Too many open files")
            done = threading.Event()

            def flood():
                for _ in range(200):
                    loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                                 "exception": error})
                done.set()

            loop.call_soon_threadsafe(flood)
            assert done.wait(10)
    finally:
        asyncio_logger.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("OSError: [Errno 24]") == 5  # five in full, then one summary line, then nothing
    assert text.count("socket.accept() out of system resource") == 6


# ---------------------------------------------------------------------------------------------- memory


def _vm_hwm_mb(pid: int) -> float:
    """Peak resident set size of process ``pid`` (VmHWM) in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def _png(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_small_files_that_decode_to_huge_images_are_refused_before_decoding():
    """16 sources + the edited image, each a 6200x6200 all-zero 1-bit PNG (~100 KB in all, 653 Mpx decoded):
    413 naming the image where the sample's pixel budget runs out, and the server's peak RSS barely moves. One
    such image alone is accepted and decoded reduced towards the model's max_pixels, within the same bound."""
    huge = _png(Image.new("1", (6200, 6200)))
    small = _png(Image.new("RGB", (64, 48), (200, 30, 30)))
    process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--max-pixels", "1048576"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = _first_line_url(process)
        with httpx.Client(base_url=url, timeout=120) as client:
            warm = client.post("/v1/score", json={"sources": [small], "edited": small, "instruction": "warm up"})
            assert warm.status_code == 200, warm.text
            idle = _vm_hwm_mb(process.pid)
            body = {"sources": [huge] * 16, "edited": huge, "instruction": "make it red"}
            assert len(json.dumps(body)) < 200_000
            refused = client.post("/v1/score", json=body)
            assert refused.status_code == 413, refused.text
            error = refused.json()["error"]
            assert (error["kind"], error["field"]) == ("too_large", "sources[2]")  # 3 x 38.4 Mpx > 96 Mpx
            assert _vm_hwm_mb(process.pid) - idle < 300
            one = client.post("/v1/score", json={"sources": [small], "edited": huge, "instruction": "make it red"})
            assert one.status_code == 200, one.text
            width, height = one.json()["edited_size"]
            assert (width, height) == (1034, 1034)  # 6200 / 6, rounded up: >= 1 Mpx, no more than needed
            assert _vm_hwm_mb(process.pid) - idle < 300
    finally:
        process.kill()
        process.wait(timeout=10)

