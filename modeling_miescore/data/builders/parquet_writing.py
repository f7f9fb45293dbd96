"""Parquet shards the Hub way: ``data/<split>-00000-of-00003.parquet``, size-bounded, features in the schema.

Rows are materialised one row group at a time, so memory stays bounded with large images; the ``datasets``
features travel in the Parquet schema metadata (key ``huggingface``), so every shard also loads correctly on
its own. ``pyarrow`` is imported only when a split is written.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

__all__ = [
    "DEFAULT_MAX_GROUP_BYTES",
    "DEFAULT_MAX_SHARD_BYTES",
    "DEFAULT_ROWS_PER_GROUP",
    "file_size",
    "format_bytes",
    "image_struct",
    "parse_size",
    "plan_shards",
    "size_arg",
    "write_parquet_split",
]

# The Hub's dataset viewer and `datasets` streaming work best with shards of a few hundred MB.
DEFAULT_MAX_SHARD_BYTES = 256 * 1024 * 1024
# Rows per Parquet row group: image rows are large, and streaming reads one row group at a time.
DEFAULT_ROWS_PER_GROUP = 100
# ... and at most this many (estimated) bytes, so that memory stays bounded with large images.
DEFAULT_MAX_GROUP_BYTES = 64 * 1024 * 1024


def parse_size(value: str | int) -> int:
    """``"256MB"``, ``"1.5GiB"``, ``"500k"``, ``1048576`` -> bytes (decimal and binary units)."""
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size must be positive, got {value}")
        return value
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)([bB]?)\s*", str(value))
    if not m:
        raise ValueError(f"cannot parse size {value!r}; use e.g. 500MB, 1GiB or a number of bytes")
    number, unit, binary, _ = m.groups()
    base = 1024 if binary else 1000
    power = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[unit.lower()]
    size = int(float(number) * base**power)
    if size <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return size


def size_arg(text: str) -> int:
    """argparse ``type=`` for sizes such as ``256MB``."""
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def file_size(path: Path) -> int:
    """Size of ``path`` in bytes, 0 when it cannot be read (used only for shard-size estimates)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def image_struct(path: Path, rel: str) -> dict:
    """The ``datasets.Image`` storage value: original file bytes (no re-encoding) + relative path; a regular file
    of a bounded size only (:func:`~modeling_miescore.image_io.read_image_file`)."""
    from ...image_io import read_image_file

    return {"bytes": read_image_file(path), "path": rel}


def plan_shards(sizes: Sequence[int], max_shard_bytes: int) -> list[range]:
    """Cut consecutive rows into shards whose estimated size stays under ``max_shard_bytes``.

    A single row larger than the bound gets a shard of its own. Always returns at least one shard.
    """
    shards: list[range] = []
    start, acc = 0, 0
    for i, s in enumerate(sizes):
        if i > start and acc + s > max_shard_bytes:
            shards.append(range(start, i))
            start, acc = i, 0
        acc += s
    shards.append(range(start, len(sizes)))
    return shards


def _row_groups(rows: range, sizes: Sequence[int], max_rows: int, max_bytes: int) -> Iterator[range]:
    start, acc = rows.start, 0
    for i in rows:
        if i > start and (i - start >= max_rows or acc + sizes[i] > max_bytes):
            yield range(start, i)
            start, acc = i, 0
        acc += sizes[i]
    if start < rows.stop:
        yield range(start, rows.stop)


def write_parquet_split(
    out_dir: Path,
    split: str,
    items: Sequence[Any],
    features,
    *,
    make_row: Callable[[Any], dict],
    row_size: Callable[[Any], int],
    bar,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
    max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES,
    data_dir: str = "data",
) -> dict:
    """Write one row per item of ``items`` as ``<data_dir>/<split>-XXXXX-of-YYYYY.parquet``.

    ``make_row(item)`` returns the row as a dict in ``features`` storage format (images as
    ``{"bytes", "path"}``); ``row_size(item)`` estimates its size for the shard and row-group bounds (at
    most ``rows_per_group`` rows and ``max_group_bytes`` per row group). ``bar`` (a tqdm bar) advances by
    the rows written. Returns ``{"files", "num_examples", "num_bytes", "file_bytes"}`` where
    ``num_bytes`` is the Arrow (uncompressed) size, as ``datasets`` records it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = features.arrow_schema
    sizes = [row_size(item) for item in items]
    shards = plan_shards(sizes, max_shard_bytes) if items else []
    (out_dir / data_dir).mkdir(parents=True, exist_ok=True)
    files, arrow_bytes, file_bytes = [], 0, 0
    for k, rows in enumerate(shards):
        rel = f"{data_dir}/{split}-{k:05d}-of-{len(shards):05d}.parquet"
        path = out_dir / rel
        with pq.ParquetWriter(path, schema, compression="snappy", write_statistics=True) as writer:
            for group in _row_groups(rows, sizes, rows_per_group, max_group_bytes):
                table = pa.Table.from_pylist([make_row(items[i]) for i in group], schema=schema)
                arrow_bytes += table.nbytes
                writer.write_table(table, row_group_size=len(group))
                bar.update(len(group))
        files.append(rel)
        file_bytes += path.stat().st_size
    return {"files": files, "num_examples": len(items), "num_bytes": int(arrow_bytes), "file_bytes": int(file_bytes)}
