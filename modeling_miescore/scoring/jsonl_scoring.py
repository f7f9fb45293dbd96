"""JSONL batch scoring with resume: ``edits.jsonl`` in, ``preds.jsonl`` out, one line per edit.

Input lines: ``{"id": str | int, "sources": [path, ...], "edited": path, "instruction": str}``; relative paths
are resolved against the input file's folder. Output lines: ``{"id": ..., <score names>..., "overall": ...}``.

Safety: every output line is written with one ``write`` call and flushed + fsynced per chunk, so a crash can
at worst leave one incomplete final line, which the next run detects and cuts off before appending. Rerunning
skips ids already present, so a killed run resumes where it stopped. An exclusive lock on the output (or the
rank's shard) makes a second run on the same file stop at once, naming the run that holds it.

Every problem with one input line (not UTF-8, not JSON, bad id, duplicate id, unreadable image, an image the
model cannot take, any error while scoring that sample) is reported with its line number and handled by
``on_error``: ``"skip"`` reports it and goes on, ``"stop"`` stops the run. The same input gives the same
reports on a first run and on a rerun.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from tqdm.auto import tqdm

from ..hub.errors import MIEScoreInputError
from ..hub.image_io import regular_file_problem
from ..hub.processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS, EditSample, as_edit_sample
from ..utils.atomic_files import atomic_write, write_text_atomic
from ..utils.numbers import model_fault
from ..utils.output_lock import exclusive_output, lock_path_for
from ..utils.output_paths import check_distinct_files, ensure_folder

__all__ = ["BatchInputError", "BatchReport", "LineError", "check_input_file", "iter_input", "line_entries",
           "check_producer", "complete_lines", "make_output_folder", "merge_shards", "producer_file", "read_done_ids",
           "read_predictions", "record_to_sample", "score_jsonl", "shard_path"]


@dataclass
class LineError:
    line: int
    message: str

    def __str__(self):
        return f"line {self.line}: {self.message}"


@dataclass
class BatchReport:
    scored: int = 0
    skipped_existing: int = 0
    errors: list[LineError] = field(default_factory=list)
    repaired_tail: bool = False


class BatchInputError(MIEScoreInputError):
    """A bad input line when running with ``on_error="stop"``."""


def check_input_file(path) -> Path:
    """``path`` as a readable regular file, or :class:`MIEScoreInputError` saying what it is instead."""
    path = Path(path)
    problem = regular_file_problem(path, "input file")
    if problem:
        raise MIEScoreInputError(problem)
    return path


def check_output_file(path, input_path: Path | None = None, label: str = "--output") -> Path:
    """``path`` as a writable output file location; one-line errors otherwise. It must not be the input file
    (also through a link); missing folders above it are created and named in a note
    (:func:`modeling_miescore.utils.output_paths.ensure_folder`)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise MIEScoreInputError(f"output '{path}' is a directory; pass a file path such as '{path / 'preds.jsonl'}'")
    if path.exists() and not path.is_file():
        raise MIEScoreInputError(f"output '{path}' is not a regular file; pass a file path")
    if input_path is not None:
        check_distinct_files({"--input": input_path, label: path})
    ensure_folder(path.parent, f"{label} '{path}'")
    return path


def make_output_folder(folder, context: str = "", inputs: dict | None = None, writes=()) -> Path:
    """``folder`` (user-expanded), created with its parents when missing (named in a note); a file in its place or
    a folder that cannot be made raises :class:`MIEScoreInputError` (``context`` opens the message, e.g.
    ``"--out: "``). ``inputs`` (``{label: file}``) must be none of the files ``writes`` names inside it."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise MIEScoreInputError(f"{context}'{folder}' is a file, not a folder; pass a folder")
    label = context.rstrip(": ") or "the output folder"
    for name in writes:
        check_distinct_files({**(inputs or {}), f"{label}'s {name}": folder / name})
    return ensure_folder(folder, label, named=True)


def read_done_ids(output: Path, repair: bool = True) -> tuple[set[str], bool]:
    """Ids already in ``output``; cuts off an incomplete last line left by a crash (``repair``), or ignores it.

    Returns ``(ids, repaired)``.
    """
    records, repaired = read_predictions(output, repair)
    return set(records), repaired


def complete_lines(path: Path, repair: bool = True) -> tuple[bytes, bool]:
    """``(bytes, repaired)``: a JSONL file's complete lines (b"" when it does not exist). An incomplete last line
    left by a crash is cut off the file (``repair``) or only left out."""
    path = Path(path)
    if not path.exists():
        return b"", False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return data, False
    cut = data.rfind(b"\n") + 1
    if repair:
        with open(path, "r+b") as handle:
            handle.truncate(cut)
    return data[:cut], repair


def read_predictions(output: Path, repair: bool = True) -> tuple[dict[str, bytes], bool]:
    """``{id: raw line}`` of a predictions file, in file order; see :func:`read_done_ids`."""
    output = Path(output)
    data, repaired = complete_lines(output, repair)
    records = {}
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            records.setdefault(str(json.loads(raw)["id"]), raw)
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            raise MIEScoreInputError(
                f"output file '{output}' line {number} is not a prediction record; "
                "fix or move the file before resuming"
            ) from None
    return records, repaired


def shard_path(output: Path, rank: int, world_size: int) -> Path:
    return Path(output).with_name(f"{Path(output).name}.rank{rank}-of-{world_size}")


def iter_input(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Yield ``(line_number, record, error)`` for each non-blank line of a JSONL file.

    A line that is not UTF-8 or not a JSON object is yielded with ``record=None`` and the reason.
    """
    path = check_input_file(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise MIEScoreInputError(f"cannot read input file '{path}': {err.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield number, None, f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
                continue
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                yield number, None, f"invalid JSON ({err.msg} at column {err.colno})"
                continue
            except RecursionError:
                yield number, None, "invalid JSON (nested too deeply)"
                continue
            except ValueError as err:  # an integer of more than 4300 digits
                yield number, None, f"invalid JSON ({' '.join(str(err).split())[:120]})"
                continue
            if not isinstance(record, dict):
                yield number, None, "expected a JSON object (one record per line)"
                continue
            yield number, record, None


def record_id(record: dict) -> str:
    """The record's id as a string; only non-empty strings and integers are ids (not booleans or floats)."""
    if "id" not in record or record["id"] is None or record["id"] == "":
        raise MIEScoreInputError("missing 'id'")
    value = record["id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise MIEScoreInputError(f"'id' must be a string or an integer, got {json.dumps(value)}")
    return str(value)


def _resolve(value, base: Path):
    if isinstance(value, str):
        candidate = Path(value).expanduser()
        return candidate if candidate.is_absolute() else base / candidate
    return value


def record_to_sample(record: dict, base: Path) -> EditSample:
    sample_id = record_id(record)
    sample = as_edit_sample(record, where="record")
    sources = [_resolve(s, base) for s in sample.sources]
    return EditSample(sources=sources, edited=_resolve(sample.edited, base), instruction=sample.instruction,
                      id=sample_id)


def line_entries(lines) -> list[tuple[int, dict | None, str | None, str | None]]:
    """``(number, record, error, id)`` per line; a repeated id is an error on every occurrence after the first."""
    first_line: dict[str, int] = {}
    entries = []
    for number, record, error in lines:
        sample_id = None
        if error is None:
            try:
                sample_id = record_id(record)
            except MIEScoreInputError as err:
                error = str(err)
        if sample_id is not None:
            if sample_id in first_line:
                error = f"duplicate id '{sample_id}' (first on line {first_line[sample_id]})"
                sample_id = None
            else:
                first_line[sample_id] = number
        entries.append((number, record, error, sample_id))
    return entries


def _is_fatal(err: BaseException) -> bool:
    """Errors that are about the machine, not the sample: they stop the run instead of skipping a line."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"


class _JsonlRun:
    """One pass over the input lines of this rank, appending to ``write_path`` (see :func:`score_jsonl`)."""

    def __init__(self, score_batch, input_path: Path, write_path: Path, batch_size: int, on_error: str,
                 chunk: int, log, report: BatchReport, load_options: dict | None = None):
        self.score_batch, self.input_path, self.write_path = score_batch, input_path, write_path
        self.load_options = load_options or {}  # EditSample.load's target_pixels / max_sample_pixels
        self.batch_size, self.on_error, self.chunk, self.log, self.report = batch_size, on_error, chunk, log, report
        self.pending: list[tuple[int, EditSample]] = []

    def fail(self, number: int, message: str) -> None:
        error = LineError(number, message)
        if self.on_error == "stop":
            raise BatchInputError(f"{self.input_path}: {error} (rerun with --on-error skip to skip bad lines)")
        self.report.errors.append(error)
        self.log(f"skipped {self.input_path}:{error}")

    def _score(self, items: list[tuple[int, EditSample]]) -> list[tuple[int, EditSample, dict]]:
        """Score a chunk; when it fails, score its samples one by one so the failure is pinned to its line."""
        try:
            scores = self.score_batch([s for _, s in items], self.batch_size)
            return [(n, s, r) for (n, s), r in zip(items, scores)]
        except Exception as err:  # noqa: BLE001 - attributed to lines below
            if _is_fatal(err) or len(items) == 1:
                if _is_fatal(err):
                    raise
                self.fail(items[0][0], f"could not be scored ({type(err).__name__}: {err})")
                return []
        done = []
        for item in items:
            done.extend(self._score([item]))
        return done

    def flush(self, out, bar) -> None:
        if not self.pending:
            return
        items, self.pending = self.pending, []
        for number, sample, scores in self._score(items):
            if isinstance(scores, Exception):  # the scorer could not score this sample: reported, not written
                self.fail(number, f"could not be scored ({scores})")
                continue
            fault = model_fault(scores)
            if fault:  # NaN / Inf: never written (a rerun would take it as done), counted like a bad line
                self.fail(number, fault)
                continue
            out.write(json.dumps({"id": sample.id, **scores}) + "\n")
            self.report.scored += 1
        out.flush()
        os.fsync(out.fileno())
        bar.update(len(items))

    def run(self, entries, done: set[str], bar) -> None:
        base = self.input_path.parent
        with open(self.write_path, "a", encoding="utf-8") as out:
            for number, record, error, sample_id in entries:
                if error is None and sample_id in done:
                    self.report.skipped_existing += 1
                    bar.update(1)
                    continue
                if error is None:
                    try:
                        sample = record_to_sample(record, base)
                        self.pending.append((number, sample.load(where="sample", **self.load_options)))
                    except (MIEScoreInputError, OSError, ValueError) as err:
                        error = str(err)
                if error is not None:
                    self.fail(number, error)
                    bar.update(1)
                elif len(self.pending) >= self.chunk:
                    self.flush(out, bar)
            self.flush(out, bar)


def score_jsonl(
    score_batch: Callable[[list[EditSample], int], list[dict]],
    input_path,
    output_path,
    batch_size: int = 8,
    on_error: str = "skip",
    progress: bool = True,
    chunk_size: int | None = None,
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr),
    rank: int = 0,
    world_size: int = 1,
    target_pixels: int | None = None,
    max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS,
    producer: dict | None = None,
) -> BatchReport:
    """Score every edit of ``input_path`` not yet in ``output_path`` and append the results (module docstring).

    ``score_batch(samples, batch_size)`` returns one score dict per loaded sample, in order (e.g.
    ``lambda s, b: model.score_batch(s, batch_size=b)``), or an exception instance for a sample it could not
    score (reported like a bad line and not written, so a rerun tries it again). Results are written every
    ``chunk_size`` edits (default ``8 * batch_size``): a crash loses at most that many.

    With ``world_size > 1`` this process takes the ``rank``-th contiguous slice of the input lines (so the edits of
    one instance stay together for prefix reuse) and appends to its shard ``<output>.rank<r>-of-<w>``;
    :func:`merge_shards` then writes the single output. ``target_pixels`` (the model's ``max_pixels``) lets a much
    larger image be reduced while decoding; ``max_sample_pixels`` is the per-sample budget (give the scorer the
    same value). ``producer`` (``{"command": "score-batch", "model": ...}``) is recorded beside the output
    (:func:`check_producer`): a file that another command or model wrote is refused instead of extended.
    """
    if on_error not in ("skip", "stop"):
        raise ValueError(f"on_error must be 'skip' or 'stop', got {on_error!r}")
    input_path = check_input_file(input_path)
    output_path = check_output_file(output_path, input_path)
    entries = line_entries(iter_input(input_path))
    write_path, merged = output_path, {}
    if world_size > 1:
        write_path = shard_path(output_path, rank, world_size)
        merged, _ = read_predictions(output_path, repair=False)  # rank 0 owns the merged file; only read it here
        entries = entries[rank * len(entries) // world_size : (rank + 1) * len(entries) // world_size]
    with exclusive_output(write_path, "--output"):
        shard_records, repaired = read_predictions(write_path)
        shard_done = set(shard_records)
        if producer is not None:
            check_producer(output_path, shard_records if world_size == 1 else merged, producer, record=rank == 0)
        report = BatchReport(repaired_tail=repaired)
        if repaired:
            log(f"note: removed an incomplete last line from '{write_path}' (left by an interrupted run)")
        run = _JsonlRun(score_batch, input_path, write_path, batch_size, on_error,
                        max(chunk_size or batch_size * 8, 1), log, report,
                        {"target_pixels": target_pixels, "max_sample_pixels": max_sample_pixels})
        with tqdm(total=len(entries), desc="score-batch", unit="edit", file=sys.stderr,
                  disable=not progress) as bar:
            run.run(entries, set(merged) | shard_done, bar)
    return report


def producer_file(output) -> Path:
    """Where :func:`check_producer` records who writes ``output`` (a hidden file beside it, like its lock)."""
    output = Path(output)
    return output.with_name(f".{output.name}.producer.json")


def _inferred_producer(records: dict) -> dict | None:
    """Who wrote a predictions file that has no producer record: the judge's lines name the judge, the baselines'
    the metric; score-batch lines name nobody (None)."""
    for raw in records.values():
        line = json.loads(raw)
        if isinstance(line, dict) and isinstance(line.get("judge"), str):
            return {"command": "judge", "model": line["judge"]}
        if isinstance(line, dict) and isinstance(line.get("metric"), str):
            return {"command": "baselines", "model": line["metric"]}
        return None
    return None


def _who(producer: dict) -> str:
    return f"`miescore {producer.get('command')}` with model {producer.get('model')!r}"


def check_producer(output, records: dict, producer: dict, record: bool = True) -> None:
    """Refuse to extend ``output`` (whose predictions are ``records``) when another command or model wrote it;
    otherwise record ``producer`` beside it (unless ``record`` is false: a check before the run). The record is :func:`producer_file`; a file without
    one is judged by its lines (:func:`_inferred_producer`)."""
    output, sidecar = Path(output), producer_file(output)
    recorded = None
    if records:
        try:
            recorded = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.is_file() else \
                _inferred_producer(records)
        except (OSError, ValueError):
            recorded = None
    if recorded is not None and recorded != producer:
        raise MIEScoreInputError(f"'{output}' holds predictions of {_who(recorded)}, not of {_who(producer)}; pass "
                                 "another --output (one predictions file holds one model's scores)")
    if record and recorded != producer:
        write_text_atomic(sidecar, json.dumps(producer) + "\n")


def merge_shards(input_path, output_path, world_size: int) -> int:
    """Merge the per-rank shards and any existing output into ``output_path``, in input order; returns the count.

    The merged file is written beside the output and renamed over it, so an interrupted merge loses nothing;
    the shards are removed only after the rename. Predictions whose id is not in the input are kept at the end.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    with exclusive_output(output_path, "--output"):
        records, _ = read_predictions(output_path, repair=False)
        shards = [shard_path(output_path, r, world_size) for r in range(world_size)]
        for shard in shards:
            for key, raw in read_predictions(shard, repair=False)[0].items():
                records.setdefault(key, raw)
        ordered = []
        for _, record, error in iter_input(input_path):
            key = None if error else str(record.get("id"))
            if key in records:
                ordered.append(records.pop(key))
        ordered.extend(records.values())
        with atomic_write(output_path, "wb") as handle:
            handle.write(b"".join(raw + b"\n" for raw in ordered))
        for shard in shards:
            shard.unlink(missing_ok=True)
            lock_path_for(shard).unlink(missing_ok=True)
    return len(ordered)
