"""``scripts/vllm_cpu.sh`` signals only the server it started, and reports only that one (fast, default suite).

Against a stub vLLM inside a throwaway PID namespace (``tests/vllm_script_sandbox.py``; skipped where
``unshare --pid`` is not allowed): ``stop`` with a pid file naming a foreign process, a session leader, a reused pid,
or holding ``0``, ``-1`` or text, refuses with one line and leaves every process alone; ``start`` on a port where
someone else's server answers refuses and names it; ``status`` does not report a foreign pid or server as its
own. The arguments are checked as the CLI checks them (one ``error:`` line, exit 2). A real ``start`` / ``stop``:
``tests/engines/test_engines_vllm_script.py``."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from vllm_script_sandbox import SCRIPT, in_namespace, unshare_command

needs_namespace = pytest.mark.skipif(unshare_command() is None,
                                     reason="needs a throwaway PID namespace (unshare --fork --pid --mount-proc)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_error_line(answer: dict, *words: str) -> None:
    lines = answer["err"].splitlines()
    assert answer["rc"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), answer
    assert all(word in lines[0] for word in words), answer


@needs_namespace
@pytest.mark.parametrize("content, kind, words", [
    ("{pid}", "sleep", "missing or damaged"),  # a pid file alone names any process
    ("{pid}", "leader", "missing or damaged"),  # the leader of another session: its group is not ours
    ("0", "sleep", "'0', not a pid"),  # kill -- -0: the caller's process group
    ("-1", "sleep", "'-1', not a pid"),  # kill -- -1: every process
    ("-7", "sleep", "'-7', not a pid"),
    ("eight", "sleep", "'eight', not a pid"),
    ("", "sleep", "'', not a pid"),
    ("99999999999", "sleep", "not a pid"),
])
def test_stop_never_signals_what_the_pid_file_names_without_the_record(content, kind, words, tmp_path):
    answer = in_namespace("stop_with_pid_file", tmp_path, free_port(), content, kind)
    assert answer["victim_alive"], answer  # the sleep (and the namespace's init) lived on
    one_error_line(answer, "refusing to stop", "nothing was signalled", words, "removed the record")
    assert not answer["record_left"]  # the stale record is reported and removed: the next stop has nothing to do


@needs_namespace
def test_stop_refuses_a_reused_pid(tmp_path):
    answer = in_namespace("pid_reused", tmp_path, free_port())
    assert answer["started"]["rc"] == 0, answer["started"]
    assert answer["victim_alive"], answer
    one_error_line(answer, "refusing to stop", "pid now names another process: pid", "sleep 600")


@needs_namespace
def test_start_status_and_stop_of_its_own_server(tmp_path):
    port = free_port()
    steps = in_namespace("own_server", tmp_path, port)
    url = f"http://127.0.0.1:{port}/v1"
    assert (steps["start"]["rc"], steps["start"]["out"]) == (0, url), steps["start"]
    assert (steps["status"]["rc"], steps["status"]["out"]) == (0, url)
    one_error_line(steps["again"], "already runs on port")
    assert steps["alive_before"] == [True, True]  # the server and its child (the engine core of a real vLLM)
    assert steps["stop"]["rc"] == 0 and "stopped the server" in steps["stop"]["err"] and "process group" in \
        steps["stop"]["err"], steps["stop"]
    assert steps["alive_after"] == [False, False]  # the whole process group ended
    assert (steps["status_after"]["rc"], steps["status_after"]["out"]) == (1, "not running")


@needs_namespace
def test_start_and_status_on_a_port_someone_else_serves(tmp_path):
    steps = in_namespace("busy_port", tmp_path, free_port())
    one_error_line(steps["start"], "is in use", f"pid {steps['other']}", "vllm.entrypoints.openai.api_server",
                   "choose another --port")
    assert steps["status"]["rc"] == 1 and steps["status"]["out"].startswith("not running;"), steps["status"]
    assert f"held by pid {steps['other']}" in steps["status"]["out"]
    status = steps["status_foreign_pid"]  # a pid file naming the foreign server: still not ours
    assert status["rc"] == 1 and status["out"].startswith("not running (stale record") and "starting" not in \
        status["out"], status
    assert steps["other_alive"]


@pytest.mark.parametrize("args, words", [
    (("--port", ""), "--port must be a number 1..65535, got ''"),
    (("--port",), "--port needs a number"),
    (("--wait",), "--wait needs whole seconds"),
    (("--name", ""), "--name needs a model name"),
    (("--port", "65536"), "got '65536'"),
    (("--port", "0"), "got '0'"),
    (("--port", "99999999999999999999"), "got '99999999999999999999'"),
    (("--port", "8_000"), "got '8_000'"),
    (("--wait", "09x"), "--wait must be whole seconds"),
    (("--wait", "99999999999999999999"), "--wait must be whole seconds"),
    (("8000",), "unknown argument '8000'"),
])
@pytest.mark.parametrize("command", ["stop", "status"])
def test_bad_arguments_are_one_line_with_exit_2(command, args, words, tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), command, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MIESCORE_VLLM_RUNS": str(tmp_path)})
    one_error_line({"rc": done.returncode, "err": done.stderr}, words)
    assert not list(tmp_path.iterdir())  # nothing recorded, nothing signalled


def test_a_port_with_leading_zeros_is_read_in_base_10(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "stop", "--port", "08620"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MIESCORE_VLLM_RUNS": str(tmp_path)})
    assert done.returncode == 0 and done.stderr.strip() == "vllm_cpu: no server recorded on port 8620", done.stderr
