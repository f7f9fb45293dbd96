"""Generating edits with an editor (e.g. after RL): the engine of ``miescore edit``.

For each request (:mod:`modeling_miescore.data.editing_inputs`) it makes ``num_images`` edits with one pipeline
call seeded from ``(seed, request id)`` (so a resumed or reordered run makes the same images), writes them to
``OUT/images/`` and appends one line per edit to ``OUT/edits.jsonl`` in the ``score-batch`` input format:
``{"id", "sources", "edited", "instruction"}`` with paths relative to the JSONL file; with ``num_images > 1`` the
ids are ``<request id>#<k>`` and the lines also carry ``"key"`` (the request id) and ``"sample"`` (k). Image files
are named from the request id (``images/<id>.png``, ``images/<id>-<k>.png`` for several edits): never with a
``#``, which a URL, a Markdown link or the Hub's file viewer reads as a fragment. Dataset sources are written to
``OUT/sources/`` once; JSONL sources are referenced where they are.

The sampling schedule (:class:`~.schedule.SamplingSchedule`: which steps are guided, ODE or SDE steps;
default the pipeline's own, CFG on every step) is written to ``OUT/sampling.json`` (its fields, the guided-step
count and a one-line description); a rerun into an ``OUT`` holding edits of another schedule or step count is
refused, so one folder never mixes edits of two schedules.

Resuming: edits already in ``edits.jsonl`` are skipped (a torn last line is cut off first); an image is written
atomically before its line, so the file never names a missing image. One run at a time per ``OUT`` (a lock).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import torch

from ..hub.errors import MIEScoreInputError
from ..training.editor_rl.rollout import sample_with_schedule
from ..training.editor_rl.schedule import PIPELINE_SCHEDULE, SamplingSchedule, derived_seed
from ..training.editor_rl.outputs import save_png, save_sources
from ..utils.atomic_files import write_text_atomic
from ..scoring.jsonl_scoring import read_done_ids
from ..utils.output_lock import exclusive_output

__all__ = ["EditRun", "SAMPLING_FILE", "generate_edits", "record_sampling"]

SAMPLING_FILE = "sampling.json"


@dataclass
class EditRun:
    """What :func:`generate_edits` (or :func:`~.selection.select_edits`) did: ``written`` edits (selected
    requests), ``skipped`` (already there), ``failed`` requests (``(id, message)``)."""

    written: int = 0
    skipped: int = 0
    failed: List[tuple] = field(default_factory=list)


def _safe(text: str) -> str:
    """A file name for an id; ids that needed changing get a hash suffix so two ids never share a file."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:100].lstrip(".") or "edit"
    if name != text:
        name += "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return name


def _source_paths(request, sources: Sequence, out: Path) -> List[str]:
    """The request's sources as the JSONL names them: its files where they are, else ``sources`` (the decoded
    images) written to ``out/sources/`` once."""
    if all(isinstance(s, (str, os.PathLike)) for s in request.sources):
        return [os.path.relpath(Path(s).resolve(), out) for s in request.sources]
    return save_sources(out, _safe(request.id), sources)


def record_sampling(out: Path, schedule: SamplingSchedule, num_steps: int) -> dict:
    """Write ``out/sampling.json`` for ``schedule``, after checking the one there: edits already made in ``out``
    under another schedule (or step count) are refused with one clear line."""
    record = schedule.record(num_steps)
    path, edits = out / SAMPLING_FILE, out / "edits.jsonl"
    if path.is_file() and edits.is_file() and edits.stat().st_size:
        try:
            stored = json.loads(path.read_text())
        except json.JSONDecodeError:
            stored = {"description": f"an unreadable {SAMPLING_FILE}"}
        stored = stored if isinstance(stored, dict) else {}
        if any(stored.get(k) != record[k] for k in record if k != "description"):
            raise MIEScoreInputError(
                f"'{out}' holds edits sampled with {stored.get('description', '?')} over {stored.get('num_steps')} "
                f"steps; this run asks for {record['description']} over {num_steps}: pick another --out, or the "
                "same --steps and sampling flags")
        return record
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    return record


def edit_ids(request_id: str, num_images: int) -> List[str]:
    return [request_id] if num_images == 1 else [f"{request_id}#{k}" for k in range(num_images)]


def edit_file_name(request_id: str, k: int, num_images: int) -> str:
    """The image file of edit ``k`` of a request (module docstring: no ``#``)."""
    return f"images/{_safe(request_id)}.png" if num_images == 1 else f"images/{_safe(request_id)}-{k}.png"


def generate_edits(editor, requests: Sequence, out, *, seed: int = 0, num_images: int = 1, num_steps: int = 28,
                   progress: Optional[Callable] = None, schedule: SamplingSchedule = PIPELINE_SCHEDULE,
                   jsonl_name: str = "edits.jsonl") -> EditRun:
    """Run ``editor`` (an :class:`~.editors.EditorAdapter`) over ``requests`` into ``out`` under ``schedule``
    (module docstring; ``jsonl_name``: the lines' file, ``candidates.jsonl`` for ``--select``:
    :mod:`.selection`). A request whose edit raises is recorded in ``EditRun.failed`` and the run goes on."""
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    jsonl = out / jsonl_name
    run = EditRun()
    with exclusive_output(jsonl, "output folder"):
        record_sampling(out, schedule, num_steps)
        done, _ = read_done_ids(jsonl)
        with open(jsonl, "a", encoding="utf-8") as handle:
            for request in requests:
                ids = edit_ids(request.id, num_images)
                todo = [k for k, i in enumerate(ids) if i not in done]
                run.skipped += len(ids) - len(todo)
                if todo:
                    try:
                        sources = request.load_sources()
                        editor.check_sources(sources, f"request {request.id!r}")
                        with torch.no_grad():
                            images = sample_with_schedule(editor, sources, request.instruction, num_images=num_images,
                                                          num_steps=num_steps, schedule=schedule,
                                                          seed=derived_seed(seed, request.id) % (2 ** 62))
                        source_paths = _source_paths(request, sources, out)
                    except Exception as error:  # noqa: BLE001 - one request failing does not stop the others
                        run.failed.append((request.id, f"{type(error).__name__}: {error}"))
                        continue
                    for k in todo:
                        name = edit_file_name(request.id, k, num_images)
                        save_png(out / name, images[k])
                        line = {"id": ids[k], "sources": source_paths, "edited": name,
                                "instruction": request.instruction}
                        if num_images > 1 or jsonl_name != "edits.jsonl":
                            line.update(key=request.id, sample=k)
                        handle.write(json.dumps(line) + "\n")
                        handle.flush()
                        run.written += 1
                if progress is not None:
                    progress(1)
    return run
