"""Reading a raw MER-Bench release: samples, candidates and tier annotations, each record checked.

The layout is described in :mod:`modeling_miescore.data.builders.mer_bench`. Each reader reports every bad
record to the :class:`~modeling_miescore.data.builders.raw_files.ProblemCollector` with its file and line and
returns the good ones; the annotations are collected as votes on their candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..schema import MER_CATEGORIES, MER_TIER_DIMENSIONS, TIERS
from .raw_files import (ImageChecker, ProblemCollector, RecordCheck, read_csv, read_edited_images, read_jsonl,
                        unique_records)

__all__ = ["Candidate", "Sample", "TIER_RANK", "read_annotations", "read_candidates", "read_samples"]

SAMPLES, CANDIDATES, ANNOTATIONS = "samples.jsonl", "candidates.jsonl", "annotations.csv"

# Spellings accepted in the raw files (after lower-casing, "-" and " " -> "_"); the values are schema names.
_CATEGORY_ALIASES = {
    "general": "general", "human_basic": "human_basic", "human_basics": "human_basic", "human_b": "human_basic",
    "human_fine": "human_fine", "human_fine_details": "human_fine", "human_f": "human_fine",
    "human_face": "human_fine",
}
_TIER_ALIASES = {**{t: t for t in TIERS}, "bad": "poor"}  # appendix A.1 calls the poor tier "bad"
TIER_RANK = {t: rank for rank, t in enumerate(TIERS)}  # good > medium > poor


@dataclass
class Sample:
    sample_id: str
    instruction: str
    image: tuple  # (rel, Path)
    category: str
    subtask: str
    line: int
    order: int
    num_edits: int | None = None  # operations of the instruction (sec. 4.2: 2-5), when the release gives them


@dataclass
class Candidate:
    candidate_id: str
    sample_id: str
    editing_model: str
    image: tuple  # (rel, Path)
    line: int
    votes: dict = field(default_factory=lambda: {d: [] for d in MER_TIER_DIMENSIONS})
    tiers: dict = field(default_factory=dict)  # dimension -> majority tier (str) or None

    @property
    def key(self) -> tuple:
        """Ranking key (paper sec. 4.3): overall tier first, then SC, then PQ."""
        return tuple(TIER_RANK[self.tiers[d]] for d in MER_TIER_DIMENSIONS)


def _norm(value: str) -> str:
    return value.strip().lower().replace("-", "_").replace(" ", "_")


def read_samples(raw: Path, problems: ProblemCollector, images: ImageChecker, bar: Callable) -> tuple[dict, set]:
    """``({sample_id: Sample}, declared ids)`` from ``samples.jsonl``."""
    entries = read_jsonl(raw / SAMPLES, problems,
                         required=("sample_id", "instruction", "original_image", "category", "subtask"))
    declared: set[str] = set()
    out: dict[str, Sample] = {}
    for line, obj, sid in unique_records(bar(entries, desc="checking samples"), problems, SAMPLES, "sample_id",
                                         declared):
        check = RecordCheck(problems, SAMPLES, line, images)
        check.instruction(obj["instruction"], f"sample {sid!r}")
        category = _CATEGORY_ALIASES.get(_norm(obj["category"])) if isinstance(obj["category"], str) else None
        if category is None:
            check.fail(f"sample {sid!r}: unknown category {obj['category']!r}; expected one of: "
                       f"{', '.join(MER_CATEGORIES)}")
        subtask = check.text(obj["subtask"], f"sample {sid!r}: subtask must be a non-empty string")
        num_edits = obj.get("num_edits")
        if num_edits is not None and (isinstance(num_edits, bool) or not isinstance(num_edits, int)
                                      or not 1 <= num_edits <= 16):
            check.fail(f"sample {sid!r}: num_edits must be an integer from 1 to 16 (or absent), got {num_edits!r}")
        path = check.image(obj["original_image"], f"sample {sid!r}, original_image")
        if check.ok:
            out[sid] = Sample(sid, obj["instruction"], (obj["original_image"], path), category, subtask.strip(), line,
                              len(out), num_edits)
    return out, declared


def read_candidates(raw: Path, problems: ProblemCollector, images: ImageChecker, declared_samples: set,
                    bar: Callable) -> tuple[dict, set]:
    """``({candidate_id: Candidate}, declared ids)`` from ``candidates.jsonl``."""
    records, declared = read_edited_images(raw / CANDIDATES, problems, images, id_key="candidate_id",
                                           what="candidate", parent_key="sample_id", parent_file=SAMPLES,
                                           declared_parents=declared_samples, bar=bar)
    return {cid: Candidate(cid, sid, model, image, line) for line, cid, sid, model, image in records}, declared


def _check_annotation(check: RecordCheck, row: dict, declared_candidates: set) -> dict[str, str]:
    if not row["annotator_id"]:
        check.fail("empty annotator_id")
    check.known(row["candidate_id"], declared_candidates,
                f"annotation for unknown candidate_id {row['candidate_id']!r} (not in {CANDIDATES})")
    tiers = {}
    for dim in MER_TIER_DIMENSIONS:
        tier = _TIER_ALIASES.get(_norm(row[dim]))
        if tier is None:
            check.fail(f"{dim} tier {row[dim]!r} is not one of good / medium / poor")
        else:
            tiers[dim] = tier
    return tiers


def read_annotations(raw: Path, problems: ProblemCollector, candidates: dict, declared_candidates: set,
                     bar: Callable) -> int | None:
    """Add the votes of ``annotations.csv`` to ``candidates``; the number of valid annotations, ``None`` when
    the file is missing or unusable."""
    rows = read_csv(raw / ANNOTATIONS, problems, required=("annotator_id", "candidate_id", *MER_TIER_DIMENSIONS))
    if rows is None:
        return None
    first_line: dict[tuple, int] = {}
    for line, row in bar(rows, desc="checking annotations"):
        check = RecordCheck(problems, ANNOTATIONS, line)
        tiers = _check_annotation(check, row, declared_candidates)
        if not check.ok:
            continue
        key = (row["annotator_id"], row["candidate_id"])
        if key in first_line:
            check.fail(f"duplicate annotation of {key[1]!r} by {key[0]!r} (first on line {first_line[key]})")
            continue
        first_line[key] = line
        if key[1] in candidates:
            for dim, tier in tiers.items():
                candidates[key[1]].votes[dim].append(tier)
    return len(first_line)
