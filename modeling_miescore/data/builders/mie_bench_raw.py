"""Reading a raw MIE-Bench release: instances, edits, and ratings (or MOS), each record checked, problems collected.

The layout is described in :mod:`modeling_miescore.data.builders.mie_bench`. Each reader reports every bad
record to the :class:`~modeling_miescore.data.builders.raw_files.ProblemCollector` with its file and line and
returns the good ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..schema import DIMENSION_ABBREVIATIONS, DIMENSIONS, MOS_RANGE, RATING_RANGE, TASK_CATEGORY, TASKS
from ...utils.numbers import finite_float
from .raw_files import (ImageChecker, ProblemCollector, RecordCheck, read_csv, read_edited_images,
                        read_jsonl, unique_records)

__all__ = ["Edit", "Instance", "MOS_SOURCES", "read_edits", "read_instances", "read_mos_csv", "read_ratings"]

MOS_SOURCES = ("auto", "ratings", "mos")
INSTANCES, EDITS, RATINGS, MOS_CSV = "instances.jsonl", "edits.jsonl", "ratings.csv", "mos.csv"

# Spellings of the rating dimensions accepted in ratings.csv (lower-cased): names, abbreviations, prose.
_DIMENSION_ALIASES = {
    **{d: d for d in DIMENSIONS},
    **{short: d for d, short in DIMENSION_ABBREVIATIONS.items()},
    **{d.replace("_", " "): d for d in DIMENSIONS},
}


@dataclass
class Instance:
    instance_id: str
    task: str
    instruction: str
    sources: list  # [(rel, Path)]
    line: int


@dataclass
class Edit:
    edit_id: str
    instance_id: str
    editing_model: str
    image: tuple  # (rel, Path)
    line: int


def normalise_task(value: Any) -> str | None:
    """The task name for ``value`` (case, ``-`` and spaces forgiven), or ``None`` when it is not a task."""
    if not isinstance(value, str):
        return None
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return key if key in TASK_CATEGORY else None


def _check_sources(check: RecordCheck, instance_id: str, sources: Any) -> list:
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list):
        check.fail(f"instance {instance_id!r}: 'sources' must be a list of image paths, got {type(sources).__name__}")
        return []
    if not sources:
        check.fail(f"instance {instance_id!r} has no sources (an MIE instance needs at least one source image)")
        return []
    resolved = []
    for j, rel in enumerate(sources, start=1):
        path = check.image(rel, f"instance {instance_id!r}, source {j}")
        if path is not None:
            resolved.append((rel, path))
    return resolved


def read_instances(raw: Path, problems: ProblemCollector, images: ImageChecker, bar: Callable):
    """``({instance_id: Instance}, declared ids)`` from ``instances.jsonl``."""
    entries = read_jsonl(raw / INSTANCES, problems, required=("instance_id", "task", "instruction", "sources"))
    declared: set[str] = set()
    out: dict[str, Instance] = {}
    for line, obj, iid in unique_records(bar(entries, desc="checking instances"), problems, INSTANCES,
                                         "instance_id", declared):
        check = RecordCheck(problems, INSTANCES, line, images)
        task = normalise_task(obj["task"])
        if task is None:
            check.fail(f"unknown task {obj['task']!r} for instance {iid!r}; expected one of: {', '.join(TASKS)}")
        instruction = check.instruction(obj["instruction"], f"instance {iid!r}")
        sources = _check_sources(check, iid, obj["sources"])
        if check.ok:
            out[iid] = Instance(iid, task, instruction, sources, line)
    return out, declared


def read_edits(raw: Path, problems: ProblemCollector, images: ImageChecker, declared_instances: set, bar: Callable):
    """``({edit_id: Edit}, declared ids)`` from ``edits.jsonl``."""
    records, declared = read_edited_images(raw / EDITS, problems, images, id_key="edit_id", what="edit",
                                           parent_key="instance_id", parent_file=INSTANCES,
                                           declared_parents=declared_instances, bar=bar)
    return {eid: Edit(eid, iid, model, image, line) for line, eid, iid, model, image in records}, declared


def _check_rating(check: RecordCheck, row: dict, declared_edits: set) -> tuple[str | None, float | None]:
    if not row["subject_id"]:
        check.fail("empty subject_id")
    check.known(row["edit_id"], declared_edits, f"rating for unknown edit_id {row['edit_id']!r} (not in {EDITS})")
    dimension = _DIMENSION_ALIASES.get(row["dimension"].strip().lower())
    if dimension is None:
        check.fail(f"unknown dimension {row['dimension']!r}; expected one of: {', '.join(DIMENSIONS)}")
    value = finite_float(row["rating"])
    lo, hi = RATING_RANGE  # "Subjective Experiment Setup": a 0-5 continuous scale
    if value is None:
        check.fail(f"rating {row['rating']!r} is not a number")
    elif not lo <= value <= hi:
        check.fail(f"rating {value:g} out of range [{lo:g}, {hi:g}]")
    return dimension, value


def read_ratings(raw: Path, problems: ProblemCollector, declared_edits: set, bar: Callable) -> dict | None:
    """Columns ``subject_id, item_id, dimension, rating`` (for :func:`~modeling_miescore.data.mos.compute_mos`)
    from ``ratings.csv``; ``None`` when the file is missing or unusable."""
    rows = read_csv(raw / RATINGS, problems, required=("subject_id", "edit_id", "dimension", "rating"))
    if rows is None:
        return None
    first_line: dict[tuple, int] = {}
    columns: dict[str, list] = {"subject_id": [], "item_id": [], "dimension": [], "rating": []}
    for line, row in bar(rows, desc="checking ratings"):
        check = RecordCheck(problems, RATINGS, line)
        dimension, value = _check_rating(check, row, declared_edits)
        if not check.ok:
            continue
        subject, edit_id = row["subject_id"], row["edit_id"]
        key = (subject, edit_id, dimension)
        if key in first_line:
            check.fail(f"duplicate rating of edit {edit_id!r} ({dimension}) by subject {subject!r} "
                       f"(first on line {first_line[key]})")
            continue
        first_line[key] = line
        for column, v in zip(columns, (subject, edit_id, dimension, value)):
            columns[column].append(v)
    return columns


def _optional_count(check: RecordCheck, text: str, column: str) -> int | None:
    if not text:
        return None
    value = finite_float(text)
    if value is None or value < 0 or value != int(value):
        check.fail(f"{column} {text!r} must be a non-negative integer or empty")
        return None
    return int(value)


def _optional_spread(check: RecordCheck, text: str, column: str) -> float | None:
    if not text:
        return None
    value = finite_float(text)
    if value is None or value < 0:
        check.fail(f"{column} {text!r} must be a non-negative number or empty")
    return value


def _mos_record(check: RecordCheck, row: dict) -> dict:
    record: dict[str, Any] = {}
    lo, hi = MOS_RANGE
    for short in DIMENSION_ABBREVIATIONS.values():
        text = row[f"mos_{short}"]
        value = finite_float(text)
        if value is None:
            check.fail(f"mos_{short} {text!r} is not a number")
        elif not lo <= value <= hi:
            check.fail(f"mos_{short} {value:g} out of range [{lo:g}, {hi:g}]")
        record[f"mos_{short}"] = value
        record[f"std_{short}"] = _optional_spread(check, row.get(f"std_{short}", ""), f"std_{short}")
        record[f"n_{short}"] = _optional_count(check, row.get(f"n_{short}", ""), f"n_{short}")
    return record


def read_mos_csv(raw: Path, problems: ProblemCollector, declared_edits: set) -> tuple[dict | None, set]:
    """``({edit_id: {mos_*, std_*, n_*}}, edit ids mentioned)`` from ``mos.csv`` (``None`` when unusable)."""
    rows = read_csv(raw / MOS_CSV, problems, required=("edit_id", "mos_vq", "mos_if", "mos_ap"))
    if rows is None:
        return None, set()
    out: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    for line, row in rows:
        check = RecordCheck(problems, MOS_CSV, line)
        edit_id = row["edit_id"]
        check.known(edit_id, declared_edits, f"MOS for unknown edit_id {edit_id!r} (not in {EDITS})")
        if edit_id in first_line:
            check.fail(f"duplicate edit_id {edit_id!r} (first on line {first_line[edit_id]})")
            continue
        record = _mos_record(check, row)
        first_line[edit_id] = line
        if check.ok:
            out[edit_id] = record
    return out, set(first_line)
