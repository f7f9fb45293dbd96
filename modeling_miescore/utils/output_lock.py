"""An exclusive lock on an output file or folder, so that two runs never write the same output.

The lock is a ``filelock.FileLock`` on a hidden ``.<name>.lock`` beside the target (an OS-level ``flock``:
released by the kernel when the holder dies, even after ``kill -9``). The holder writes its pid, host and
start time into the lock file, so a second run can say which run holds it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from ..hub.errors import MIEScoreInputError

__all__ = ["OutputBusyError", "exclusive_output", "lock_path_for"]


class OutputBusyError(MIEScoreInputError):
    """Another run holds the lock on this output."""


def lock_path_for(target: str | os.PathLike) -> Path:
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


def _mark_owner(fd: int) -> None:
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    text = f"pid {os.getpid()} on {socket.gethostname()}, started {stamp}: {command}".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, text, 0)


@contextlib.contextmanager
def exclusive_output(target: str | os.PathLike, what: str = "output") -> Iterator[Path]:
    """Hold the lock on ``target`` for the ``with`` block; raise :class:`OutputBusyError` if another run has it."""
    lock_file = lock_path_for(target)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_file, timeout=0, on_acquired=_mark_owner)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = lock_file.read_text(errors="replace").strip() or "another process"
        except OSError:
            holder = "another process"
        raise OutputBusyError(
            f"{what} '{target}' is being written by another run ({holder}); wait for it to finish or choose "
            f"another {what}"
        ) from None
    try:
        yield lock_file
    finally:
        lock.release()
