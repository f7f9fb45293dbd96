"""The rows of a converted editor benchmark (the ``editing`` config of ``miescore convert-benchmark gedit-bench`` /
``imgedit-bench``): metadata as a frame (images never decoded), the ``--language`` / ``--category`` selection, and
the source images written once as files for the judges.

Columns read (:data:`~modeling_miescore.data.converters.schema.EDITING_COLUMNS` and the card's subset flags):
``id``, ``key``, ``source_images``, ``instruction``, ``category``, ``language``, e.g. ``intersection_exist``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...data.converters.schema import EDITING_COLUMNS, SPLIT
from ...data.errors import EXAMPLES, BenchmarkInputError
from .protocols import EditorBenchmark
from ...data.converters.converted_card import read_benchmark_metadata
from ...data.dataset_splits import load_split
from ...data.input_export import safe_file_name, store_image

__all__ = ["EditingRows", "export_sources", "load_editing_rows", "select_rows"]


@dataclass
class EditingRows:
    """A benchmark's rows: ``frame`` (index ``id``; ``key``, ``instruction``, ``category``, ``language`` and the
    subset flags), the loaded split ``ds`` (for the source images) and which part or version of the release was
    converted (``release``, from the card; e.g. ImgEdit's ``basic_edit.json`` version)."""

    dataset: str
    benchmark: EditorBenchmark
    frame: object
    ds: object
    flags: tuple[str, ...]
    release: str = ""


def load_editing_rows(dataset: str, benchmark: EditorBenchmark) -> EditingRows:
    """Open ``dataset`` (a folder or Hub repo from ``miescore convert-benchmark <benchmark.dataset>``)."""
    import pandas as pd

    metadata = read_benchmark_metadata(dataset)
    if metadata is None or "editing" not in metadata.get("kinds", []):
        raise BenchmarkInputError(
            f"dataset '{dataset}' is not a converted editor benchmark (its README.md has no miescore_benchmark block "
            f"with an editing config); make it with 'miescore convert-benchmark {benchmark.dataset}'")
    if metadata.get("name") != benchmark.dataset:
        raise BenchmarkInputError(f"dataset '{dataset}' is {metadata.get('name')!r}, not {benchmark.dataset!r}; "
                                  f"'miescore benchmark {benchmark.name}' evaluates {benchmark.title}")
    ds = load_split(dataset, SPLIT, "editing")
    flags = tuple(metadata.get("subset_flags", []))
    missing = [c for c in (*EDITING_COLUMNS, *flags) if c not in ds.column_names]
    if missing:
        raise BenchmarkInputError(f"dataset '{dataset}' lacks column(s) {', '.join(missing)} of an editing config; "
                                  "convert the release again")
    columns = [c for c in (*EDITING_COLUMNS, *flags) if c != "source_images"]
    frame = pd.DataFrame({c: ds[c] for c in columns}).astype({"id": str, "key": str}).set_index("id", drop=False)
    return EditingRows(dataset, benchmark, frame, ds, flags, str(metadata.get("release_part", "")))


def _pick(frame, column: str, wanted: Sequence[str] | None, option: str):
    if not wanted:
        return frame
    available = sorted(set(frame[column]))
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise BenchmarkInputError(f"{option} {', '.join(unknown)} matches no row; the dataset has "
                                  f"{', '.join(available) or 'none'}")
    return frame[frame[column].isin(list(wanted))]


def select_rows(rows: EditingRows, languages: Sequence[str] | None = None,
                categories: Sequence[str] | None = None):
    """The rows of the given languages and categories (all when None); a value that matches no row is an error
    naming the values the dataset has."""
    frame = _pick(rows.frame, "language", languages, "--language")
    frame = _pick(frame, "category", categories, "--category")
    if frame.empty:
        raise BenchmarkInputError(f"no row has language {', '.join(languages or ['*'])} and category "
                                  f"{', '.join(categories or ['*'])} together; check the filters")
    return frame


def export_sources(rows: EditingRows, ids: Sequence[str], folder: Path, progress: bool = False) -> dict[str, list]:
    """Write the source images of rows ``ids`` into ``folder/images/`` (original bytes, each once); returns
    ``{id: [path, ...]}`` with paths relative to ``folder`` (where the judges' input JSONL lives)."""
    import sys

    from datasets import Image, List
    from tqdm.auto import tqdm


    wanted = set(ids)
    positions = [i for i, row_id in enumerate(rows.frame["id"]) if row_id in wanted]
    raw = rows.ds.select(positions).select_columns(["id", "source_images"]).cast_column(
        "source_images", List(Image(decode=False)))
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    out: dict[str, list] = {}
    for row in tqdm(raw, total=len(raw), desc="export sources", unit="row", file=sys.stderr, leave=False,
                    disable=not progress):
        stem = safe_file_name(str(row["id"]))
        out[str(row["id"])] = [store_image(e, images, f"{stem}_s{k + 1}") for k, e in enumerate(row["source_images"])]
    lost = wanted - {i for i, paths in out.items() if paths}
    if lost:
        raise BenchmarkInputError(f"{len(lost)} rows have no source image in the dataset, e.g. "
                                  f"{', '.join(sorted(lost)[:EXAMPLES])}")
    return out
