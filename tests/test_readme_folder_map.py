"""The folder map (``docs/folder_map.md``, "How the folders fit together", linked from the README) names every
module of the package: each
``modeling_miescore`` module (and sub-package) in the row of its nearest mapped folder, in backticks
(``name``, ``name.py`` or ``subpackage/``), so that a reader finds where a file lives and what it is for."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "modeling_miescore"
FOLDER_MAP = ROOT / "docs" / "folder_map.md"


def folder_map(page: str) -> dict[str, str]:
    """``{folder: row text}`` of the folder map's table."""
    rows = {}
    for line in page.splitlines():
        match = re.match(r"\| `([^`]+/)` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def unmapped(page: str) -> list[str]:
    """Package modules and sub-packages whose name is not in their folder's row of the map."""
    rows = folder_map(page)
    missing = []
    for path in sorted(PACKAGE.rglob("*")):
        if "__pycache__" in path.parts or path.name == "__init__.py":
            continue
        if path.is_dir() and not (path / "__init__.py").is_file():
            continue
        if path.is_file() and path.suffix != ".py":
            continue
        relative = path.relative_to(ROOT).as_posix()
        folder = relative.rsplit("/", 1)[0] + "/"
        if path.is_dir() and f"{relative}/" in rows:
            continue  # a sub-package with its own row
        owner = max((f for f in rows if folder.startswith(f)), key=len, default=None)
        inner = folder[len(owner):] if owner else ""  # the sub-folders between the row and the module
        names = ([f"{path.name}/", f"{inner}{path.name}/"] if path.is_dir()
                 else [path.stem, path.name, f"{inner}{path.stem}", f"{inner}{path.name}"])
        if owner is None or not any(f"`{name}`" in rows[owner] for name in names):
            missing.append(relative + ("/" if path.is_dir() else ""))
    return missing


def test_every_module_is_named_in_the_folder_map():
    missing = unmapped(FOLDER_MAP.read_text(encoding="utf-8"))
    assert not missing, ("docs/folder_map.md ('How the folders fit together') does not name these modules "
                         "in their folder's row (add a short phrase each, the name in backticks): " + ", ".join(missing))


def test_an_unnamed_module_is_reported():
    page = FOLDER_MAP.read_text(encoding="utf-8")
    assert "modeling_miescore/utils/atomic_files.py" in unmapped(page.replace("`atomic_files`", "atomic files"))


def test_every_row_is_short():
    long_rows = {folder: len(text) for folder, text in folder_map(FOLDER_MAP.read_text(encoding="utf-8")).items()
                 if len(text) > 800}
    assert not long_rows, f"folder map rows over 800 characters (say the folder's job, name the modules): {long_rows}"
