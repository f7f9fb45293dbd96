"""Editing requests ``{"sources": [...], "instruction": "..."}``: what an editor is asked to do, read from a JSONL
file or a dataset folder. The one reader for the editor-RL trainer and ``miescore edit``.

- **JSONL**: one object per line, ``{"id"?: str|int, "sources": [image paths relative to the file],
  "instruction": str}`` (``id`` defaults to the line number; extra keys are ignored).
- **A dataset** (folder or Hub id), recognised from its card / splits:

  * a converted editing benchmark (``miescore convert-benchmark``; card block ``miescore_benchmark`` with
    ``kinds: ["editing"]``, e.g. GEdit-Bench, ImgEdit-Bench): config ``editing``, split ``test``, columns ``id``,
    ``source_images`` (list of images), ``instruction`` (extra columns such as ``category`` are kept in ``extra``);
  * MER-Bench (splits ``2pair`` / ``3pair`` / ``4pair``; it has no train split): every sample once
    (``sample_id``, ``original_image``, ``instruction``), across the splits or the one given;
  * MIE-Bench (default split ``train``): every instance once (``instance_id``, ``source_images``, ``instruction``).

Every request is checked before anything runs: ids and instructions without NUL bytes or other control characters
(an instruction also without chat-control tokens, ``utils.text_hygiene``: it becomes the policy's training text);
sources present, regular files (a FIFO or ``/dev/zero`` is refused at once, never read) of at most
``image_io.MAX_IMAGE_FILE_BYTES``, readable as images (headers; a PNG's chunks are verified too, so a truncated one
is reported without decoding it), instruction a non-empty string of at most ``MAX_INSTRUCTION_CHARS``, ids unique.
Problems are reported together, each with its line or row, as one
:class:`~modeling_miescore.hub.image_io.MIEScoreInputError`.

``source_ids`` name the sources for grouping: a content hash of each file (JSONL) or ``<row id>:<k>`` (datasets).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from ..hub.errors import MIEScoreInputError
from ..hub.image_io import check_image_complete, decode_image, load_image, open_image, open_image_bytes, read_image_file
from ..hub.processing_miescore import check_instruction
from ..utils.text_hygiene import training_text_problem
from ..scoring.jsonl_scoring import iter_input
from .dataset_splits import load_split, split_names
from .converters.converted_card import read_benchmark_metadata
from .schema import MER_SPLITS

__all__ = ["EditingInput", "read_editing_inputs"]

_MAX_LISTED = 10


@dataclass(frozen=True)
class EditingInput:
    """One editing request. ``sources`` holds file paths or encoded image bytes (decoded by
    :meth:`load_sources`); ``extra`` keeps a dataset row's other scalar columns (``category``, ``language``...)."""

    id: str
    instruction: str
    sources: Tuple
    source_ids: Tuple[str, ...]
    extra: dict = field(default_factory=dict, compare=False)

    def load_sources(self) -> list:
        """The sources as upright RGB ``PIL.Image`` objects, in order."""
        out = []
        for k, source in enumerate(self.sources):
            if isinstance(source, (bytes, bytearray)):
                out.append(decode_image(open_image_bytes(bytes(source), f"source {k + 1} of {self.id!r}"),
                                        f"source {k + 1} of {self.id!r}"))
            else:
                out.append(load_image(source))
        return out


def _check_source(source, what: str) -> None:
    """The source's header is a readable image and a PNG's chunks are complete (the file or the bytes are closed
    again)."""
    image = open_image_bytes(bytes(source), what) if isinstance(source, (bytes, bytearray)) else open_image(source)
    if image is not source:  # a file or bytes opened here (never a caller's own image)
        image.close()
    check_image_complete(source, what if isinstance(source, (bytes, bytearray)) else f"{what} '{source}'")


def _validated(entries: Sequence[Tuple[str, Callable[[], EditingInput]]], origin: str) -> List[EditingInput]:
    """Build every entry (``where``, builder); all problems listed together in one error."""
    problems, out, seen = [], [], {}
    for where, build in entries:
        try:
            item = build()
            for k, source in enumerate(item.sources):
                _check_source(source, f"source {k + 1}")
            if item.id in seen:
                raise MIEScoreInputError(f"duplicate id {item.id!r} (first at {seen[item.id]})")
            seen[item.id] = where
            out.append(item)
        except MIEScoreInputError as err:
            problems.append(f"{where}: {err}")
    if problems:
        listed = "; ".join(problems[:_MAX_LISTED])
        more = f" (and {len(problems) - _MAX_LISTED} more)" if len(problems) > _MAX_LISTED else ""
        raise MIEScoreInputError(f"{len(problems)} bad editing request(s) in {origin}: {listed}{more}")
    if not out:
        raise MIEScoreInputError(f"{origin} has no editing requests")
    return out


def _file_hash(path: Path) -> str:
    """A content hash of a source file (its id for grouping), read only after the file is known to be a regular
    file of a bounded size."""
    return hashlib.sha256(read_image_file(path, "source image")).hexdigest()[:16]


def _jsonl_entry(number: int, record: dict, base: Path) -> EditingInput:
    sources = record.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s for s in sources):
        raise MIEScoreInputError("'sources' must be a non-empty list of image paths")
    paths = []
    for k, source in enumerate(sources):
        path = Path(source).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.exists():
            raise MIEScoreInputError(f"source {k + 1} '{source}' does not exist (paths are relative to the JSONL "
                                     "file's folder)")
        paths.append(path)
    instruction = _checked_instruction(record.get("instruction"))
    raw_id = record.get("id", number)
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        raise MIEScoreInputError("'id' must be a non-empty string or an integer")
    return EditingInput(_checked_id(raw_id), instruction, tuple(paths), tuple(_file_hash(p) for p in paths))


def _checked_instruction(value) -> str:
    """:func:`check_instruction`, and no control character or chat-control token (training text)."""
    instruction = check_instruction(value, "the request")
    problem = training_text_problem(instruction)
    if problem:
        raise MIEScoreInputError(f"the request's instruction {problem}; remove it")
    return instruction


def _checked_id(value) -> str:
    """An id as text, without control characters (a NUL would end up in file names and JSONL lines)."""
    text = str(value)
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise MIEScoreInputError(f"'id' {text[:40]!r} holds the control character U+{ord(bad):04X}; remove it")
    return text


def _read_jsonl(path: Path) -> List[EditingInput]:
    entries = []
    for number, record, error in iter_input(path):
        def build(number=number, record=record, error=error):
            if error is not None:
                raise MIEScoreInputError(error)
            return _jsonl_entry(number, record, path.parent)
        entries.append((f"{path}:{number}", build))
    return _validated(entries, str(path))


def _image_bytes(entry, where: str) -> bytes:
    if isinstance(entry, dict):
        if entry.get("bytes"):
            return entry["bytes"]
        if entry.get("path") and Path(entry["path"]).is_file():
            return read_image_file(entry["path"], where)
    raise MIEScoreInputError(f"{where} has no image bytes")


def _row_entries(ds, *, id_column: str, sources_column: str, single_source: bool, dedupe: bool, origin: str,
                 taken: Optional[set] = None):
    """``(where, builder)`` per row (per distinct ``id_column`` value when ``dedupe``; ``taken``: the ids seen
    before, shared across splits, updated)."""
    from datasets import Image, List as ListFeature

    ds = ds.cast_column(sources_column, Image(decode=False) if single_source else ListFeature(Image(decode=False)))
    scalar = [c for c in ds.column_names if c not in (id_column, sources_column, "instruction")
              and ds.features[c].__class__.__name__ == "Value"]
    entries, taken = [], set() if taken is None else taken
    for index, row in enumerate(ds):
        row_id = str(row[id_column])  # checked (no control characters) when the entry is built
        if dedupe and row_id in taken:
            continue
        taken.add(row_id)

        def build(row=row, row_id=row_id):
            images = [row[sources_column]] if single_source else list(row[sources_column] or [])
            if not images:
                raise MIEScoreInputError(f"no source images in '{sources_column}'")
            data = tuple(_image_bytes(e, f"source {k + 1}") for k, e in enumerate(images))
            return EditingInput(_checked_id(row_id), _checked_instruction(row.get("instruction")), data,
                                tuple(f"{row_id}:{k}" for k in range(len(data))),
                                {c: row[c] for c in scalar if row[c] is not None})
        entries.append((f"{origin} row {index} (id {row_id})", build))
    return entries


def _read_dataset(dataset: str, split: Optional[str]) -> List[EditingInput]:
    metadata = read_benchmark_metadata(dataset)
    if metadata is not None:
        if "editing" not in metadata.get("kinds", []):
            raise MIEScoreInputError(f"dataset '{dataset}' is a converted benchmark without an 'editing' config "
                                     f"(its kinds: {', '.join(metadata.get('kinds', []))}); it holds ratings of "
                                     "edits, not editing requests")
        ds = load_split(dataset, split or "test", "editing")
        return _validated(_row_entries(ds, id_column="id", sources_column="source_images", single_source=False,
                                       dedupe=False, origin=f"{dataset} [editing]"), dataset)
    names = split_names(dataset)
    if set(MER_SPLITS) & names and "train" not in names:
        entries, seen = [], set()
        for name in [split] if split else [s for s in MER_SPLITS if s in names]:
            entries += _row_entries(load_split(dataset, name), id_column="sample_id", sources_column="original_image",
                                    single_source=True, dedupe=True, origin=f"{dataset} [{name}]", taken=seen)
        return _validated(entries, dataset)
    ds = load_split(dataset, split or "train")
    missing = {"instance_id", "source_images", "instruction"} - set(ds.column_names)
    if missing:
        raise MIEScoreInputError(f"dataset '{dataset}' has no {', '.join(sorted(missing))} column(s): not a "
                                 "MIE-Bench, MER-Bench or converted editing dataset")
    return _validated(_row_entries(ds, id_column="instance_id", sources_column="source_images", single_source=False,
                                   dedupe=True, origin=f"{dataset} [{split or 'train'}]"), dataset)


def read_editing_inputs(source: str, split: Optional[str] = None, limit: Optional[int] = None) -> List[EditingInput]:
    """Every editing request in ``source`` (a ``.jsonl`` file or a dataset; module docstring), checked.
    ``limit``: keep the first N."""
    path = Path(source).expanduser()
    if path.is_file():
        if split:
            raise MIEScoreInputError(f"'{source}' is a JSONL file; a split applies to datasets only")
        items = _read_jsonl(path)
    else:
        items = _read_dataset(source, split)
    return items[:limit] if limit else items
