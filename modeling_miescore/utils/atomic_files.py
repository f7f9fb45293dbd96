"""Atomic file writes: a reader sees the old complete file or the new complete file, never half of one.

Every writer in the package that replaces a file (reports, plots, prediction merges, skill histories,
checkpoint configs, example files) goes through :func:`atomic_write`: the data goes to a temporary file in
the same folder (same file system, so the final ``os.replace`` is atomic), is flushed and fsynced, and only
then replaces the target. On any error the temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_write", "write_text_atomic", "write_bytes_atomic"]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, keep_permissions: bool = True,
                 encoding: str | None = "utf-8", fsync: bool = True) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; on a clean exit it replaces ``path``.

    Args:
        path: the file to create or replace; its folder is created when missing.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        keep_permissions: an existing target's permission bits are copied to the new file (mkstemp
            creates 0600 files otherwise).
        encoding: text encoding for ``"w"``.
        fsync: flush the data to disk before the rename (a crash then leaves the old or the new file).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding if mode == "w" else None) as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        if keep_permissions and path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically; returns the path."""
    with atomic_write(path, "w") as handle:
        handle.write(text)
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically; returns the path."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)
    return Path(path)
