"""A real ``scripts/vllm_cpu.sh start`` / ``status`` / ``stop`` of a checkpoint ``miescore export-vllm`` wrote
(``-m engines``; the checks without a vLLM: ``tests/test_vllm_script_safety.py``).

A tiny SpatialReward saved by the package (head_dim 64, which vLLM's CPU attention serves), exported, started
without ``MIESCORE_VLLM_LIFETIME`` (as a user starts it: the recorded pid is vLLM's API server itself, not a
``timeout`` wrapper): the record names it, a second start on its port is refused, ``status`` gives the URL, and
``stop`` ends every process of its session (API server, engine core) and frees the port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from engine_servers import SCRIPT, Server, require_vllm

from modeling_miescore.cli import main

pytestmark = pytest.mark.engines


def session_members(session: int) -> list:
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in "ZX" and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def test_start_status_and_stop_of_an_export(tmp_path):
    require_vllm()
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    checkpoint = build_tiny_spatialreward(tmp_path / "checkpoint", vocab="tiny", hidden_size=64, geometry="vllm",
                                          min_pixels=16_384, max_pixels=16_384)
    assert main(["export-vllm", str(checkpoint), str(tmp_path / "export")]) == 0
    server = Server(tmp_path / "export", "tiny", tmp_path / "runs", env={"MIESCORE_VLLM_LIFETIME": "0"})
    pid, members = None, []
    try:
        server.start()
        pid = server.pid()
        record = json.loads((tmp_path / "runs" / str(server.port) / "server.json").read_text())
        cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[:-1]
        assert [part.decode() for part in cmdline] == record["cmdline"] and record["session_leader"]
        assert record["cmdline"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # no wrapper: vLLM itself
        members = session_members(pid)
        assert pid in members and len(members) >= 2, members  # the API server and its engine core
        status = subprocess.run(["bash", str(SCRIPT), "status", "--port", str(server.port)], capture_output=True,
                                text=True, timeout=120, env=server.env)
        assert (status.returncode, status.stdout.strip()) == (0, server.url)
        again = subprocess.run(server.command, capture_output=True, text=True, timeout=120, env=server.env)
        assert again.returncode == 2 and "already runs on port" in again.stderr, again.stderr
        stopped = subprocess.run(["bash", str(SCRIPT), "stop", "--port", str(server.port)], capture_output=True,
                                 text=True, timeout=120, env=server.env)
        assert stopped.returncode == 0 and "and its process group" in stopped.stderr, stopped.stderr
        assert session_members(pid) == []  # vLLM's API server and engine core all ended
        busy = subprocess.run(["python3", str(SCRIPT.parent / "vllm_servers.py"), "busy", str(server.port)],
                              capture_output=True, text=True, timeout=60)
        assert busy.returncode == 1, busy.stdout  # the port is free again
    finally:
        for member in set(members) & set(session_members(pid) if pid else ()):
            os.kill(member, signal.SIGKILL)  # only if stop failed: the processes this test saw vLLM start
