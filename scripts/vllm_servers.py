"""The server records of ``scripts/vllm_cpu.sh``: who a started vLLM server is, and checks before anything signals
it or reports it (Linux: reads /proc; standard library only, so any Python 3.10+ runs it).

``launch RUN PORT -- COMMAND...`` starts COMMAND in a session (and process group) of its own, output to RUN/log, and
records it: RUN/server.json holds its start time (field 22 of /proc/PID/stat, clock ticks since boot), the port,
its command line and whether it leads its session, RUN/pid its pid. A pid names a process only while that process
lives: once it ends the number is handed to the next process. So ``stop`` signals a pid only when the process
behind it is still the one recorded: a positive pid, alive, the same start time and the same command line, a vLLM
API server of this script on that port; its process group only when it leads the group the launch made. Anything
else (no record, ``0``, ``-1``, text, another process, one started later under a reused pid) is refused with one
line and nothing is signalled.

``ready RUN PORT`` (exit 0 ready, 1 starting, 2 gone) checks that the port answers ``GET /v1/models`` from a
process of the recorded server's session, not from whoever else listens there; ``status RUN PORT`` says the same
in words; ``busy PORT`` (exit 0 when busy) names who holds a port; ``stop RUN PORT``."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MODULE = "vllm.entrypoints.openai.api_server"
PID_MAX = 4_194_304  # the kernel's limit for /proc/sys/kernel/pid_max
STOP_GRACE_S = 30


class NotOurs(Exception):
    """The record names no live server of this script (the message says why)."""


def proc_stat(pid: int):
    """(state, process group, session, start time) of a process, or None when it has ended (zombies included)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": the command name may hold spaces
    state, pgrp, session, start = fields[0], int(fields[2]), int(fields[3]), int(fields[19])
    return None if state in "ZX" else (state, pgrp, session, start)


def proc_cmdline(pid: int) -> list:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode("utf-8", "surrogateescape").split("\0")[:-1]


def describe(pid: int) -> str:
    words = " ".join(proc_cmdline(pid)) or "?"
    return f"pid {pid} ({words[:80]}{'...' if len(words) > 80 else ''})"


def write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    os.replace(staging, path)


def launch(run: Path, port: int, command: list) -> int:
    with open(run / "log", "wb") as log:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    # Popen returns while the kernel may still be setting up the new program: wait for its command line
    deadline = time.monotonic() + 10
    while proc_cmdline(server.pid) != command and time.monotonic() < deadline and server.poll() is None:
        time.sleep(0.01)
    stat = proc_stat(server.pid)
    if stat is None or proc_cmdline(server.pid) != command:
        return 1  # ended at once: the caller reads the log
    record = {"port": port, "start_time": stat[3], "cmdline": command,
              "session_leader": stat[1] == stat[2] == server.pid}
    write_atomically(run / "server.json", json.dumps(record) + "\n")
    write_atomically(run / "pid", f"{server.pid}\n")
    return 0


def recorded_pid(run: Path) -> int:
    """The pid of RUN/pid when it is a positive pid; raises NotOurs (or FileNotFoundError: no record)."""
    try:
        with open(run / "pid", "rb") as file:
            text = file.read(32).decode("ascii", "replace").strip()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise NotOurs(f"{run / 'pid'} cannot be read ({err.strerror})") from None
    if not (text.isdigit() and text[0] != "0" and len(text) <= 7 and int(text) <= PID_MAX):
        raise NotOurs(f"{run / 'pid'} holds {text[:20]!r}, not a pid")
    return int(text)


def pidfd(pid: int) -> int:
    """A pidfd of PID (signals through it reach that process or none); raises ProcessLookupError or NotOurs."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except OSError as err:  # a thread id, for one
        raise NotOurs(f"pid {pid} cannot be opened as a process ({err.strerror})") from None


def is_our_server(cmdline: list, port: int) -> bool:
    pairs = set(itertools.pairwise(cmdline))
    return ("-m", MODULE) in pairs and ("--port", str(port)) in pairs and ("--host", "127.0.0.1") in pairs


def check(run: Path, port: int):
    """(pid, leads its group) of the live server the record names; raises NotOurs, FileNotFoundError (no record)
    or ProcessLookupError (the recorded server has ended)."""
    pid = recorded_pid(run)
    try:
        record = json.loads((run / "server.json").read_text())
        start_time, cmdline, leader = int(record["start_time"]), list(record["cmdline"]), record["session_leader"]
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise NotOurs(f"{run / 'server.json'}, which records the server's start, is missing or damaged "
                      f"({type(err).__name__})") from None
    if record.get("port") != port or not is_our_server(cmdline, port):
        raise NotOurs(f"{run / 'server.json'} does not record a vLLM server of this script on port {port}")
    stat = proc_stat(pid)
    if stat is None:
        raise ProcessLookupError(pid)
    if stat[3] != start_time or proc_cmdline(pid) != cmdline:
        raise NotOurs(f"the recorded server has ended and its pid now names another process: {describe(pid)}")
    return pid, bool(leader) and stat[1] == stat[2] == pid


def listeners(port: int) -> set:
    """Socket inodes bound to PORT on this host and not connected (listening, or bound while vLLM loads)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == port and state in ("0A", "07") and set(
                    remote.split(":")[0]) == {"0"}:
                inodes.add(inode)
    return inodes


def holders(port: int, session: int | None = None) -> list:
    """The pids (of SESSION only, when given) with a socket of :func:`listeners` open."""
    wanted = {f"socket:[{inode}]" for inode in listeners(port)}
    found = []
    for entry in Path("/proc").iterdir() if wanted else ():
        if not entry.name.isdigit():
            continue
        if session is not None and (proc_stat(int(entry.name)) or (0, 0, None))[2] != session:
            continue
        try:
            links = {os.readlink(fd) for fd in (entry / "fd").iterdir()}
        except OSError:
            continue
        if links & wanted:
            found.append(int(entry.name))
    return sorted(found)


def port_busy(port: int) -> str:
    """Who holds PORT ("" when it is free)."""
    pids = holders(port)
    if pids:
        return "held by " + ", ".join(describe(pid) for pid in pids)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as err:
            return f"held by a process this user cannot see ({err.strerror})"
    return "held by a process this user cannot see" if listeners(port) else ""


def answers(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)  # direct: no proxy
    try:
        connection.request("GET", "/v1/models")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def state(run: Path, port: int):
    """(exit status, words) of the server recorded on PORT: 0 ready, 1 starting, 2 not running."""
    try:
        pid, _ = check(run, port)
    except FileNotFoundError:
        return 2, "not running" + not_ours_on(port)
    except ProcessLookupError as err:
        return 2, f"not running (the server recorded as pid {err.args[0]} has ended)" + not_ours_on(port)
    except NotOurs as err:
        return 2, f"not running (stale record: {err})" + not_ours_on(port)
    if holders(port, session=pid) and answers(port):
        return 0, f"http://127.0.0.1:{port}/v1"
    return 1, f"starting (pid {pid})"


def not_ours_on(port: int) -> str:
    busy = port_busy(port)
    return f"; port {port} is {busy}, not by a server of this script" if busy else ""


def running(pid: int, group: bool) -> bool:
    """Whether the process (or a process of its group) still runs; zombies have ended."""
    if not group:
        return proc_stat(pid) is not None
    return any(entry.name.isdigit() and (proc_stat(int(entry.name)) or (0, 0))[1] == pid
               for entry in Path("/proc").iterdir())


def wait_gone(pid: int, group: bool, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while running(pid, group):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def send(handle: int, pid: int, group: bool, sig: int) -> None:
    """SIG to the checked process (through its pidfd) or, when it leads the group the launch made, to that group."""
    if group:
        os.killpg(pid, sig)
    else:
        signal.pidfd_send_signal(handle, sig)


def forget(run: Path) -> str:
    """Removes the record; says what was done."""
    for name in ("pid", "server.json"):
        try:
            (run / name).unlink(missing_ok=True)
        except OSError:
            return f"remove {run / name} yourself (it is no file this script wrote)"
    return "removed the record"


def stop(run: Path, port: int, grace: float = STOP_GRACE_S) -> int:
    try:
        handle = pidfd(recorded_pid(run))  # held from before the check: the pid cannot change under it
        try:
            pid, group = check(run, port)
            signal.pidfd_send_signal(handle, 0)  # still the checked process
            send(handle, pid, group, signal.SIGTERM)
            if not wait_gone(pid, group, grace):
                with contextlib.suppress(ProcessLookupError):
                    send(handle, pid, group, signal.SIGKILL)
        finally:
            os.close(handle)
    except FileNotFoundError:
        print(f"vllm_cpu: no server recorded on port {port}", file=sys.stderr)
        return 0
    except ProcessLookupError:
        print(f"vllm_cpu: the server recorded on port {port} had already ended; {forget(run)}", file=sys.stderr)
        return 0
    except NotOurs as err:
        print(f"error: refusing to stop: {err}; nothing was signalled; {forget(run)}", file=sys.stderr)
        return 2
    ended = f"pid {pid} and its process group" if group else f"pid {pid}"
    print(f"vllm_cpu: stopped the server on port {port} ({ended}); {forget(run)}", file=sys.stderr)
    return 0


def main(argv: list) -> int:
    command, rest = argv[0], argv[1:]
    if command == "launch":
        return launch(Path(rest[0]), int(rest[1]), rest[3:])
    if command == "busy":
        holder = port_busy(int(rest[0]))
        print(holder)
        return 0 if holder else 1
    run, port = Path(rest[0]), int(rest[1])
    if command == "stop":
        return stop(run, port)
    if command not in ("ready", "status"):
        raise SystemExit(f"error: unknown command {command!r}")
    code, words = state(run, port)
    print(words)
    return code if command == "ready" else min(code, 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
