"""The dataset output folder, written all at once: built in a temporary folder beside it, then renamed.

A failed build leaves nothing behind, and an existing dataset is replaced only with ``overwrite=True``.
(Single files are replaced with :mod:`modeling_miescore.utils.atomic_files`; a dataset is a whole folder of
shards and a card, so here the unit of atomicity is the folder.)
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

__all__ = ["AtomicOutputDir", "OutputExistsError"]


class OutputExistsError(FileExistsError):
    """The output folder already holds something and ``overwrite`` was not given."""


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


class AtomicOutputDir:
    """Context manager: write into a hidden temporary folder beside ``target``, rename on success.

    * On an exception the temporary folder is deleted and ``target`` is untouched.
    * If ``target`` exists (and is not an empty folder) it is replaced only with ``overwrite=True``:
      the old folder is first renamed aside, the new one renamed in, then the old one deleted, so a
      crash in between leaves either the old or the new dataset under a recognisable name.

    Call :meth:`check` early (before the expensive work) to fail fast on an existing target.
    """

    def __init__(self, target: str | os.PathLike, *, overwrite: bool = False):
        self.target = Path(target).absolute()
        self.overwrite = overwrite
        self.tmp: Path | None = None

    def check(self) -> None:
        t = self.target
        if t.exists() and not _is_empty_dir(t) and not self.overwrite:
            raise OutputExistsError(
                f"output folder {t} already exists and is not empty; pass overwrite=True "
                "(--overwrite) to replace it, or choose another --out"
            )
        if t.exists() and not t.is_dir() and not self.overwrite:
            raise OutputExistsError(f"output path {t} exists and is a file; pass --overwrite or choose another --out")

    def __enter__(self) -> Path:
        self.check()
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.target.parent / f".{self.target.name}.tmp-{uuid.uuid4().hex[:12]}"
        self.tmp.mkdir()
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
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
