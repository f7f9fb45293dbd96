"""Kill a `miescore` command with SIGKILL in the middle of its model calls, then run it again to the end."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


def kill_then_resume(server, args: list[str], cache: Path, kill_after: int, timeout: float = 180) -> tuple[int, int]:
    """Run ``python -m modeling_miescore.cli *args``; once ``server`` (a ``local_http`` server) has received
    ``kill_after`` requests, SIGKILL it; count the answers in the SQLite answer ``cache``; rerun to completion
    (asserting exit status 0). Returns ``(answers cached at the kill, requests the rerun sent)``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "modeling_miescore.cli", *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while len(server.requests) < kill_after and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL, "the command ended before it could be killed"
    with sqlite3.connect(cache) as db:
        cached = db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    before = len(server.requests)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return cached, len(server.requests) - before
