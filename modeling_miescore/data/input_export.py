"""Export a MIE-Bench split to files that ``score-batch`` reads: the images (exact bytes) and an input JSONL.

Scoring a split goes through the same resumable JSONL scorer as ``miescore score-batch``; the files are a cache,
kept out of the report folder.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

from tqdm.auto import tqdm

from ..utils.atomic_files import atomic_write, write_text_atomic
from .errors import BenchmarkInputError

__all__ = ["export_mie_inputs", "input_cache_dir", "safe_file_name", "store_image"]

_SUFFIXES = {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "bmp": ".bmp", "tiff": ".tif", "gif": ".gif"}


def _image_ext(data: bytes) -> str:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = (im.format or "").lower()
    except Exception:  # noqa: BLE001 - an unreadable image is reported by the scorer with its id
        return ".img"
    return _SUFFIXES.get(fmt, ".img")


def safe_file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120]


def store_image(entry: dict, images: Path, stem: str) -> str:
    """Write one dataset image (``{"bytes", "path"}``) unless an equal-sized file is there; its JSONL path."""
    data = entry.get("bytes")
    if data is None:  # an image stored as a path outside the Parquet file
        p = entry.get("path")
        if not p or not Path(p).is_file():
            raise BenchmarkInputError(f"image '{stem}' has neither bytes nor a readable path in the dataset")
        return str(Path(p).resolve())
    name = stem + _image_ext(data)
    target = images / name
    if not target.exists() or target.stat().st_size != len(data):
        # a cache: a rerun rewrites files of the wrong size, so no fsync per image (tens of thousands of them)
        with atomic_write(target, "wb", fsync=False) as handle:
            handle.write(data)
    return f"images/{name}"


def input_cache_dir(ds, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder that holds a split's exported images and ``inputs.jsonl``.

    ``cache_dir`` defaults to ``$HF_HOME/miescore``, beside the hub and datasets caches. The key is the split's
    ``datasets`` fingerprint (no public accessor), so the same split resumes into the same folder, from any report
    folder, and a rebuilt dataset gets a fresh one.
    """
    from huggingface_hub import constants

    root = Path(cache_dir).expanduser() if cache_dir else Path(constants.HF_HOME) / "miescore"
    fingerprint = getattr(ds, "_fingerprint", None)
    if not fingerprint:
        raise BenchmarkInputError("the dataset split has no fingerprint to key its input cache; load it with "
                                  "datasets.load_dataset")
    return root / "mie-bench-inputs" / safe_file_name(str(fingerprint))


def export_mie_inputs(ds, cache_dir, *, progress: bool = True, hint_columns: tuple = ()) -> Path:
    """Write a MIE-Bench split's images (exact bytes, no re-encoding) and a ``score-batch`` input JSONL.

    Sources are written once per instance; images already written are kept, so a rerun only writes what is
    missing. Returns the JSONL path.
    """
    from datasets import Image, List

    cache = Path(cache_dir)
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    cols = ["id", "instance_id", "instruction", "source_images", "edited_image"]
    missing = [c for c in cols if c not in ds.column_names]
    cols += [c for c in hint_columns if c in ds.column_names]
    if missing:
        raise BenchmarkInputError(f"dataset split lacks column(s) {', '.join(missing)} needed to score it")
    raw = (ds.select_columns(cols)
             .cast_column("edited_image", Image(decode=False))
             .cast_column("source_images", List(Image(decode=False))))
    lines = []
    # (instance, the sources' names and sizes) -> their files: rows of one instance share them, and a row whose
    # sources differ from its instance's (a converter that grouped too coarsely) still gets its own
    written_sources: dict[tuple, list[str]] = {}
    variants: dict[str, int] = {}
    for row in tqdm(raw, total=len(raw), desc="export images", unit="edit", file=sys.stderr, leave=False,
                    disable=not progress):
        iid = str(row["instance_id"])
        key = (iid, tuple((e.get("path"), len(e.get("bytes") or b"")) for e in row["source_images"]))
        if key not in written_sources:
            variant = variants.get(iid, 0)
            variants[iid] = variant + 1
            stem = safe_file_name(iid) + (f"_v{variant + 1}" if variant else "")
            written_sources[key] = [store_image(e, images, f"{stem}_s{k + 1}")
                                    for k, e in enumerate(row["source_images"])]
        edited = store_image(row["edited_image"], images, f"{safe_file_name(str(row['id']))}_edited")
        hints = {c: row[c] for c in hint_columns if row.get(c) not in (None, "")}
        lines.append(json.dumps({"id": str(row["id"]), "sources": written_sources[key], "edited": edited,
                                 "instruction": row["instruction"], **hints}))
    return write_text_atomic(cache / "inputs.jsonl", "\n".join(lines) + "\n")
