"""The dataset output folder, written all at once: built in a temporary folder beside it, then renamed.

A failed build leaves nothing behind, and an existing dataset is replaced only with ``overwrite=True``.
(Single files are replaced with :mod:`modeling_miescore.utils.atomic_files`; a dataset is a whole folder of
shards and a card, so here the unit of atomicity is the folder.)

A build that is killed (``kill -9``, power loss) cannot clean up: its ``.<name>.tmp-*`` folder stays beside
the output. :meth:`AtomicOutputDir.remove_stale` removes such folders; the builder calls it while it holds the
output's lock (:func:`modeling_miescore.utils.output_lock.exclusive_output`), so every temporary folder it finds
belongs to a build that is no longer running.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from ...utils.output_paths import OutputPathError, ensure_folder

__all__ = ["AtomicOutputDir", "OutputExistsError"]


class OutputExistsError(FileExistsError):
    """The output path already holds something and ``overwrite`` was not given."""


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


class AtomicOutputDir:
    """Context manager: write into a hidden temporary folder beside ``target``, rename on success.

    * On an exception the temporary folder is deleted and ``target`` is untouched.
    * If ``target`` exists (and is not an empty folder) it is replaced only with ``overwrite=True``:
      the old folder is first renamed aside, the new one renamed in, then the old one deleted, so a
      crash in between leaves either the old or the new dataset under a recognisable name.

    Call :meth:`check` early (before the expensive work) to fail fast on an existing target. Messages name
    the API parameters (``out_dir``, ``overwrite=True``); the command line rewords them as flags.
    """

    def __init__(self, target: str | os.PathLike, *, overwrite: bool = False):
        self.target = Path(target).absolute()
        self.overwrite = overwrite
        self.tmp: Path | None = None

    def check(self) -> None:
        t = self.target
        if self.overwrite or not (t.exists() or t.is_symlink()) or _is_empty_dir(t):
            return
        if t.is_dir():
            raise OutputExistsError(f"out_dir {t} already exists and is not empty; pass overwrite=True to replace "
                                    "it, or choose another out_dir")
        raise OutputExistsError(f"out_dir {t} already exists and is a file, not a folder; pass overwrite=True to "
                                "replace the file with the dataset folder, or choose another out_dir")

    def _leftovers(self, kind: str) -> list[Path]:
        prefix = f".{self.target.name}.{kind}-"
        parent = self.target.parent
        return sorted(p for p in parent.iterdir() if p.name.startswith(prefix)) if parent.is_dir() else []

    def remove_stale(self) -> list[str]:
        """Remove what interrupted builds left beside the target; one line per thing removed or kept.

        Only call this while holding the output's lock (then no other build is running). ``.tmp-*`` folders
        are unfinished builds and are removed. ``.old-*`` is a dataset that an ``overwrite`` renamed aside:
        removed when the target exists (the replacement finished), otherwise kept, since it is the only copy
        of the previous dataset.
        """
        notes = []
        for path in self._leftovers("tmp"):
            _remove(path)
            notes.append(f"removed {path}, a temporary folder left by an interrupted build")
        for path in self._leftovers("old"):
            if self.target.exists():
                _remove(path)
                notes.append(f"removed {path}, a replaced dataset left by an interrupted overwrite")
            else:
                notes.append(f"kept {path}: it holds the dataset that an interrupted overwrite set aside; rename "
                             f"it to {self.target} to restore it, or delete it")
        return notes

    def __enter__(self) -> Path:
        self.check()
        ensure_folder(self.target.parent, "out_dir")
        self.tmp = self.target.parent / f".{self.target.name}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            self.tmp.mkdir()
        except OSError as err:
            raise OutputPathError(f"out_dir: cannot write in '{self.target.parent}' ({err.strerror}); pass a folder "
                                  "you can write to") from None
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self.tmp is not None
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        try:
            self._commit()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        return False

    def _commit(self) -> None:
        t = self.target
        old = None
        if t.exists() or t.is_symlink():
            self.check()  # someone may have created it while we were building
            old = t.parent / f".{t.name}.old-{uuid.uuid4().hex[:12]}"
            os.replace(t, old)
        os.replace(self.tmp, t)
        if old is not None:
            _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
