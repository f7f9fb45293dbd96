"""Where a command may write: the checks every command makes before it writes or replaces a file or a folder.

Paths are compared as real paths; an output is never, inside or around an input, and two roles never share a file.
:class:`OutputPathError` is a :class:`~modeling_miescore.hub.errors.MIEScoreInputError` (exit status 2);
:class:`OutputWriteError` (the machine, not the input: a full disk, a quota) exits 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Callable, Mapping

from ..hub.errors import MIEScoreInputError

__all__ = ["OutputPathError", "OutputWriteError", "check_distinct_files", "check_folder_apart", "ensure_folder",
           "output_writes", "real_path"]


class OutputPathError(MIEScoreInputError):
    """An output path the command must not use; the message names it, the path it collides with and the fix."""


class OutputWriteError(RuntimeError):
    """Writing an output failed for a reason of the machine (a full disk, a quota, an I/O error); nothing
    half-written was left. Exit status 1 from the command line."""


def _reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


def real_path(path, label: str) -> Path:
    """``path`` absolute, with ``~``, ``..`` and symbolic links resolved (a missing tail is allowed); a NUL byte
    or a symbolic link loop is an :class:`OutputPathError` naming ``label``."""
    try:
        return Path(os.fspath(path)).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as err:  # RuntimeError: a link loop before Python 3.13
        raise OutputPathError(f"{label} '{path}' cannot be used ({_reason(err)})") from None


def check_folder_apart(out, inputs: Mapping[str, object], out_label: str = "--out",
                       allow_inside: bool = False) -> Path:
    """The real path of the output folder ``out``, refused when it is, lies inside or contains one of ``inputs``
    (``{label: path or None}``; None entries are ignored). ``allow_inside``: an output inside an input folder is
    fine (the input is only read, never replaced); equal or containing is still refused."""
    target = real_path(out, out_label)
    for label, given in inputs.items():
        if given is None:
            continue
        source = real_path(given, label)
        if target == source:
            problem = f"is {label} '{given}'"
        elif target.is_relative_to(source) and not allow_inside:
            problem = f"lies inside {label} '{given}'"
        elif source.is_relative_to(target):
            problem = f"contains {label} '{given}' (replacing it would remove the input)"
        else:
            continue
        raise OutputPathError(f"{out_label} '{out}' {problem}; choose an output folder outside {label}")
    return target


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_distinct_files(paths: Mapping[str, object]) -> None:
    """Refuse two of ``paths`` (``{label: path or None}``) that name the same file (after resolving; through a
    hard link when both exist)."""
    resolved = [(label, given, real_path(given, label)) for label, given in paths.items() if given is not None]
    for k, (label, given, path) in enumerate(resolved):
        for other_label, other, other_path in resolved[k + 1:]:
            if _same_file(path, other_path):
                raise OutputPathError(f"{label} '{given}' and {other_label} '{other}' are the same file; give each "
                                      "its own path (one would overwrite the other)")


@contextlib.contextmanager
def output_writes(what: str):
    """Turn an ``OSError`` (or safetensors' ``SafetensorError``, its own I/O error) raised while ``what`` is
    written into one :class:`OutputWriteError` naming it and the reason. The writer inside removes what it
    left half-written (a temporary file or folder) before the error leaves it."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError) as err:
        raise OutputWriteError(f"cannot write {what} ({_reason(err)}); nothing was left half-written: free some "
                               "space (or fix the folder's permissions) and rerun") from None


def _print_note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def ensure_folder(folder, label: str, note: Callable[[str], None] = _print_note, named: bool = False) -> Path:
    """``folder`` (``~`` expanded) as an existing folder: the missing ones are created and named in one ``note``
    (``named``: the user named ``folder`` itself, so only the folders above it are); a file in the way or a folder
    that cannot be made is an :class:`OutputPathError` naming ``label``."""
    folder = Path(os.fspath(folder)).expanduser()
    try:
        missing = []
        probe = folder
        while not probe.exists() and probe != probe.parent:
            if probe.is_symlink():
                raise OutputPathError(f"{label}: '{probe}' is a broken symbolic link; remove it or pass another path")
            missing.append(probe)
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise OutputPathError(f"{label}: '{probe}' is a file, not a folder; pass a path inside a folder")
        folder.mkdir(parents=True, exist_ok=True)
    except OutputPathError:
        raise
    except (OSError, ValueError) as err:
        raise OutputPathError(f"{label}: cannot create the folder '{folder}' ({_reason(err)}); pass a folder you "
                              "can write to") from None
    if named and missing and missing[0] == folder:
        missing = missing[1:]
    if missing:
        note(f"created the folder{'s' if len(missing) > 1 else ''} {', '.join(map(str, reversed(missing)))} "
             f"for {label}")
    return folder
