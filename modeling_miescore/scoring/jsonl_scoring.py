"""JSONL batch scoring with resume: ``edits.jsonl`` in, ``preds.jsonl`` out, one line per edit.

Input lines: ``{"id": str, "sources": [path, ...], "edited": path, "instruction": str}``; relative paths are
resolved against the input file's folder. Output lines: ``{"id": ..., <score names>..., "overall": ...}``.

Safety: every output line is written with one ``write`` call and flushed + fsynced per batch, so a crash can
at worst leave one incomplete final line, which the next run detects and cuts off before appending. Rerunning
skips ids already present, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..image_io import MIEScoreInputError
from ..processing_miescore import EditSample, as_edit_sample


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


def read_done_ids(output: Path, repair: bool = True) -> tuple[set[str], bool]:
    """Ids already in ``output``; cuts off an incomplete last line left by a crash (``repair``), or ignores it.

    Returns ``(ids, repaired)``.
    """
    records, repaired = read_predictions(output, repair)
    return set(records), repaired


def read_predictions(output: Path, repair: bool = True) -> tuple[dict[str, bytes], bool]:
    """``{id: raw line}`` of a predictions file, in file order; see :func:`read_done_ids`."""
    if not output.exists():
        return {}, False
    data = output.read_bytes()
    repaired = False
    if data and not data.endswith(b"\n") and not repair:
        data = data[: data.rfind(b"\n") + 1]
    elif data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(output, "r+b") as handle:
            handle.truncate(cut)
        data = data[:cut]
        repaired = True
    records = {}
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            records.setdefault(str(json.loads(raw)["id"]), raw)
        except (json.JSONDecodeError, KeyError, TypeError):
            raise MIEScoreInputError(
                f"output file '{output}' line {number} is not a prediction record; "
                "fix or move the file before resuming"
            ) from None
    return records, repaired


def shard_path(output: Path, rank: int, world_size: int) -> Path:
    return output.with_name(f"{output.name}.rank{rank}-of-{world_size}")


def iter_input(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Yield ``(line_number, record, error)`` for each non-blank line of a JSONL file."""
    try:
        handle = open(path, encoding="utf-8")
    except OSError as err:
        raise MIEScoreInputError(f"cannot read input file '{path}': {err.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as err:
                yield number, None, f"invalid JSON ({err.msg} at column {err.colno})"
                continue
            if not isinstance(record, dict):
                yield number, None, "expected a JSON object (one record per line)"
                continue
            yield number, record, None


def _resolve(value, base: Path):
    if isinstance(value, str):
        candidate = Path(value).expanduser()
        return candidate if candidate.is_absolute() else base / candidate
    return value


def record_to_sample(record: dict, base: Path) -> EditSample:
    if "id" not in record or record["id"] in (None, ""):
        raise MIEScoreInputError("missing 'id'")
    sample = as_edit_sample(record, where="record")
    sources = [_resolve(s, base) for s in sample.sources]
    return EditSample(sources=sources, edited=_resolve(sample.edited, base), instruction=sample.instruction,
                      id=str(record["id"]))


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
) -> BatchReport:
    """Score every edit of ``input_path`` not yet in ``output_path`` and append the results.

    ``score_batch(samples, batch_size)`` returns one score dict per loaded sample, in order (e.g.
    ``lambda s, b: model.score_batch(s, batch_size=b)``). A bad line is reported with its number and skipped
    (``on_error="skip"``) or stops the run (``on_error="stop"``, raising :class:`BatchInputError`).
    Results are written every ``chunk_size`` edits (default ``8 * batch_size``): a crash loses at most that many.

    With ``world_size > 1`` this process takes the ``rank``-th contiguous slice of the input lines (contiguous,
    so the edits of one instance stay together for prefix reuse) and appends to its own shard
    ``<output>.rank<r>-of-<w>``, skipping ids already in the shard or in ``output``; :func:`merge_shards` then
    writes the single output.
    """
    if on_error not in ("skip", "stop"):
        raise ValueError(f"on_error must be 'skip' or 'stop', got {on_error!r}")
    input_path, output_path = Path(input_path), Path(output_path)
    if not input_path.is_file():
        raise MIEScoreInputError(f"input file '{input_path}' does not exist")
    if output_path.resolve() == input_path.resolve():
        raise MIEScoreInputError("output file must differ from the input file")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    lines = list(iter_input(input_path))
    write_path = output_path
    done: set[str] = set()
    if world_size > 1:
        write_path = shard_path(output_path, rank, world_size)
        done, _ = read_done_ids(output_path, repair=False)  # rank 0 owns the merged file; only read it here
        lines = lines[rank * len(lines) // world_size : (rank + 1) * len(lines) // world_size]
    shard_done, repaired = read_done_ids(write_path)
    done |= shard_done
    report = BatchReport(repaired_tail=repaired)
    if repaired:
        log(f"note: removed an incomplete last line from '{write_path}' (left by an interrupted run)")
    base = input_path.parent
    seen: set[str] = set()

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(lines), desc="score-batch", unit="edit", file=sys.stderr)

    def fail(number: int, message: str):
        error = LineError(number, message)
        if on_error == "stop":
            raise BatchInputError(f"{input_path}: {error} (rerun with --on-error skip to skip bad lines)")
        report.errors.append(error)
        log(f"skipped {input_path}:{error}")

    pending: list[EditSample] = []
    chunk = max(chunk_size or batch_size * 8, 1)
    with open(write_path, "a", encoding="utf-8") as out:

        def flush():
            if not pending:
                return
            for sample, scores in zip(pending, score_batch(pending, batch_size)):
                out.write(json.dumps({"id": sample.id, **scores}) + "\n")
            out.flush()
            os.fsync(out.fileno())
            report.scored += len(pending)
            if bar is not None:
                bar.update(len(pending))
            pending.clear()

        try:
            for number, record, error in lines:
                if error is None:
                    sample_id = str(record.get("id")) if record.get("id") not in (None, "") else None
                    if sample_id is not None and sample_id in done:
                        report.skipped_existing += 1
                        if bar is not None:
                            bar.update(1)
                        continue
                    if sample_id is not None and sample_id in seen:
                        error = f"duplicate id '{sample_id}'"
                    else:
                        try:
                            sample = record_to_sample(record, base).load()
                        except MIEScoreInputError as err:
                            error = str(err)
                if error is not None:
                    fail(number, error)
                    if bar is not None:
                        bar.update(1)
                    continue
                seen.add(sample.id)
                pending.append(sample)
                if len(pending) >= chunk:
                    flush()
            flush()
        finally:
            if bar is not None:
                bar.close()
    return report


def merge_shards(input_path, output_path, world_size: int) -> int:
    """Merge the per-rank shards and any existing output into ``output_path``, in input order; returns the count.

    The merged file is written beside the output and renamed over it, so an interrupted merge loses nothing;
    the shards are removed only after the rename. Predictions whose id is not in the input are kept at the end.
    """
    input_path, output_path = Path(input_path), Path(output_path)
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
    temporary = output_path.with_name(f".{output_path.name}.merging")
    with open(temporary, "wb") as handle:
        handle.write(b"".join(raw + b"\n" for raw in ordered))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, output_path)
    for shard in shards:
        shard.unlink(missing_ok=True)
    return len(ordered)
