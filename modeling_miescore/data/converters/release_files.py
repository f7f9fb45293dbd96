"""Readers for the file formats benchmark releases come in, each reporting problems with file and line (or row).

* :func:`read_json_records`: a JSON array, or the array under one key of a JSON object (``{"pairs": [...]}``), as
  ``[(line, record)]`` with the line where each record starts.
* :func:`read_json_keyed_records`: a JSON object of records keyed by id (``{"1082": {...}, ...}``), as
  ``[(line, key, record)]``; a repeated key is a problem (``json.load`` would silently keep the last one).
* :func:`read_parquet_rows`: the rows of Parquet shards (``datasets`` Hub layout), ``[(file, row, record)]``;
  images stay ``{"bytes", "path"}`` structs, never decoded here.
* :func:`read_saved_dataset`: a ``datasets.Dataset.save_to_disk`` folder (``state.json`` + ``data-*.arrow``), read
  with pyarrow's IPC reader (no pickle, no ``datasets`` cache), as ``[(file, row, record)]``.
* :func:`embedded_image`: an image stored inside a Parquet/Arrow release -> an ``ImageRef``, checked.

Files that leave the raw folder through a symbolic link are refused (reported) unless the build follows links
(:meth:`~modeling_miescore.data.builders.raw_files.ProblemCollector.refuses_link`). JSON Lines, CSV and TSV readers
are :func:`~modeling_miescore.data.builders.raw_files.read_jsonl` and
:func:`~modeling_miescore.data.builders.raw_files.read_csv`. Row numbers are 1-based, like line numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..builders.raw_files import (TOO_DEEP, ImageRef, ProblemCollector, RecordCheck, json_members, json_object_entries,
                                  line_at, read_text, record_problem, skip_space)
from ...hub.image_io import DEFAULT_MAX_IMAGE_PIXELS, ImageLoadError, load_image, open_image_bytes

__all__ = ["check_image_bytes", "embedded_image", "read_json_keyed_records", "read_json_records", "read_parquet_rows",
           "read_saved_dataset"]


def _array_records(text: str, start: int, decoder: json.JSONDecoder) -> Iterator[tuple[int, Any]]:
    """Records of the JSON array whose ``[`` is at ``start``: ``(line, value)``."""
    position = skip_space(text, start + 1)
    if text.startswith("]", position):
        return
    while True:
        value, end = decoder.raw_decode(text, position)
        yield line_at(text, position), value
        position = skip_space(text, end)
        if text.startswith(",", position):
            position = skip_space(text, position + 1)
            continue
        if text.startswith("]", position):
            return
        raise json.JSONDecodeError("expected ',' or ']' after a record", text, position)


def _find_key(text: str, key: str, decoder: json.JSONDecoder) -> int | None:
    """Position of the value of top-level ``key`` in the JSON object ``text`` (None when absent)."""
    return next((start for _, name, start in json_members(text, decoder, "a JSON object") if name == key), None)


def read_json_records(path: Path, problems: ProblemCollector, *, key: str | None = None,
                      required: Sequence[str] = ()) -> list[tuple[int, dict]]:
    """The objects of a JSON array file (or of the array under ``key``), with the line where each starts.

    Records that are not objects or lack a ``required`` key are reported (with their line) and left out; a file
    that is not valid JSON gives one problem at the line of the error.
    """
    name = path.name
    text = read_text(path, problems)
    if text is None:
        return []
    decoder = json.JSONDecoder()
    out: list[tuple[int, dict]] = []
    try:
        start = skip_space(text, 0) if key is None else _find_key(text, key, decoder)
        if start is None:
            problems.add(name, 1, f"the JSON object has no key {key!r} (the list of records)")
            return []
        if not text.startswith("[", start):
            problems.add(name, line_at(text, start), "expected a JSON array of records")
            return []
        for line, record in _array_records(text, start, decoder):
            problem = record_problem(record, required)
            if problem:
                problems.add(name, line, problem)
                continue
            out.append((line, record))
    except json.JSONDecodeError as err:
        problems.add(name, err.lineno, f"malformed JSON: {err.msg} (column {err.colno})")
    except RecursionError:
        problems.add(name, None, TOO_DEEP)
    return out


def read_json_keyed_records(path: Path, problems: ProblemCollector, *,
                            required: Sequence[str] = ()) -> list[tuple[int, str, dict]]:
    """The members of a JSON object file ``{key: record}``, with the line where each key stands.

    A record that is not an object or lacks a ``required`` key, and a key seen before, are reported (with their
    line) and left out; a file that is not valid JSON gives one problem at the line of the error.
    """
    name = path.name
    text = read_text(path, problems)
    if text is None:
        return []
    out: list[tuple[int, str, dict]] = []
    first: dict[str, int] = {}
    try:
        for line, key, record in json_object_entries(text, "a JSON object of records keyed by id"):
            problem = record_problem(record, required)
            if key in first:
                problem = f"duplicate key {key!r} (first on line {first[key]})"
            first.setdefault(key, line)
            if problem:
                problems.add(name, line, f"{key!r}: {problem}")
                continue
            out.append((line, key, record))
    except json.JSONDecodeError as err:
        problems.add(name, err.lineno, f"malformed JSON: {err.msg} (column {err.colno})")
    except RecursionError:
        problems.add(name, None, TOO_DEEP)
    return out


def _table_rows(table, file: str, problems: ProblemCollector, required: Sequence[str]):
    missing = [c for c in required if c not in table.column_names]
    if missing:
        problems.add(file, None, f"missing column(s) {', '.join(map(repr, missing))} "
                                 f"(the table has {', '.join(table.column_names)})")
        return []
    return [(file, row, record) for row, record in enumerate(table.to_pylist(), start=1)]


def read_parquet_rows(root: Path, files: Sequence[Path], problems: ProblemCollector, *,
                      required: Sequence[str] = ()) -> list[tuple[str, int, dict]]:
    """Rows of Parquet shards, ``(file relative to root, 1-based row, record)``; images stay undecoded structs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        if problems.refuses_link(path):
            continue
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as err:
            problems.add(rel, None, f"not a readable Parquet file ({err})")
            continue
        out += _table_rows(table, rel, problems, required)
    return out


def read_saved_dataset(folder: Path, problems: ProblemCollector, *,
                       required: Sequence[str] = ()) -> list[tuple[str, int, dict]]:
    """Rows of a ``save_to_disk`` folder: the Arrow files that ``state.json`` lists, in order."""
    import pyarrow as pa

    state_path = folder / "state.json"
    if state_path.is_file() and problems.refuses_link(state_path):
        return []
    try:
        state = json.loads(state_path.read_text())
        files = [entry["filename"] for entry in state["_data_files"]]
    except FileNotFoundError:
        problems.add("state.json", None, "file not found: expected a datasets save_to_disk folder "
                                         "(state.json, dataset_info.json, data-*.arrow)")
        return []
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        problems.add("state.json", None, f"cannot read the list of Arrow files ({type(err).__name__}: {err})")
        return []
    out = []
    for name in files:
        if problems.refuses_link(folder / name):
            continue
        try:
            with pa.memory_map(str(folder / name)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except (OSError, pa.ArrowException) as err:
            problems.add(name, None, f"not a readable Arrow stream file ({err})")
            continue
        out += _table_rows(table, name, problems, required)
    return out


def check_image_bytes(data: bytes, max_image_pixels: int | None = None) -> str | None:
    """``None`` when ``data`` decodes as an image (of the formats every image reader accepts,
    :func:`~modeling_miescore.hub.image_io.open_image_bytes`), else a one-line reason."""
    try:
        load_image(open_image_bytes(data, "the stored file"), max_image_pixels=max_image_pixels or DEFAULT_MAX_IMAGE_PIXELS)
    except ImageLoadError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - any decoder failure is a data problem
        return f"{type(err).__name__}: {err}"
    return None


def embedded_image(check: RecordCheck, value: Any, fallback_name: str, label: str) -> ImageRef | None:
    """An image stored in a Parquet/Arrow release (``{"bytes", "path"}``) -> :class:`ImageRef`, or None and a
    problem of ``check`` (decoded within the build's ``max_image_pixels``)."""
    data = value.get("bytes") if isinstance(value, dict) else None
    if not data:
        check.fail(f"{label}: no embedded image bytes (got {type(value).__name__})")
        return None
    reason = check_image_bytes(data, check.images.max_image_pixels)
    if reason:
        check.fail(f"{label}: unreadable image ({reason})")
        return None
    name = value.get("path")
    return ImageRef.embedded(data, Path(name).name if name else None, fallback_name)
