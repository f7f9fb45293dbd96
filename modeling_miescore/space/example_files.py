"""The Space's example edits as PNG files (Gradio examples need files), and where the Space caches them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..data.example_edits import example_edits
from ..utils.atomic_files import atomic_write


@dataclass
class ExampleRow:
    """One example edit as files: its id, source PNG paths, edited PNG path, instruction and a one-line note."""

    id: str
    sources: list[str]
    edited: str
    instruction: str
    note: str


def write_example_files(folder: str | os.PathLike, max_side: int = 384) -> list[ExampleRow]:
    """Write the bundled example edits (real photos, :func:`modeling_miescore.data.example_edits.example_edits`) as PNG.

    Files already written by an earlier start are reused; each file is written atomically
    (``utils.atomic_files``), so two processes starting together never see a half-written PNG.
    """
    folder = Path(folder) / f"max{max_side}"  # a different size never reuses stale files
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for edit in example_edits(max_side):
        base = folder / edit["id"]
        base.mkdir(exist_ok=True)
        sources = [_write_png_once(image, base / f"source_{i + 1}.png") for i, image in enumerate(edit["sources"])]
        edited = _write_png_once(edit["edited"], base / "edited.png")
        rows.append(ExampleRow(edit["id"], sources, edited, edit["instruction"], edit["note"]))
    return rows


def default_cache_dir() -> Path:
    """Where the Space keeps its example PNGs: ``$MIESCORE_SPACE_CACHE`` or ``~/.cache/miescore/space``."""
    env = os.environ.get("MIESCORE_SPACE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "miescore" / "space"


def _write_png_once(image, path: Path) -> str:
    if not path.is_file():
        with atomic_write(path, "wb") as handle:
            image.save(handle, format="PNG")
    return str(path)


__all__ = ["ExampleRow", "default_cache_dir", "write_example_files"]
