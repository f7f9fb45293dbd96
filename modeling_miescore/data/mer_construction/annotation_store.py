"""The MER-Bench annotation store: append-only answers of the hierarchical ranking protocol (SpatialReward paper
sec. 4.3, appendix A.1), resumable per annotator.

A task unit is one sample; the tiers are good / medium / poor (A.1 calls poor "bad").

``annotations.jsonl`` in the construction folder holds one line per (annotator, sample) submission::

    {"id": "A1|mer-x", "annotator_id": "A1", "sample_id": "mer-x", "submitted": "2026-...Z",
     "ratings": {"mer-x-c1": {"sc": "good", "pq": "medium", "overall": "good"}, ...}}

A submission is one ``write`` of one line, flushed and fsynced under a file lock before the app shows the next
sample, so a crash loses at most the sample on screen; a torn last line left by a crash mid-write is cut off
before the next append. Reopened, the store gives each annotator the first sample (in instruction order) they
have not submitted and that still lacks annotators.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from filelock import FileLock

from ...hub.errors import MIEScoreInputError
from ..schema import MER_TIER_DIMENSIONS, TIERS
from .candidate_generation import CANDIDATES
from .instruction_synthesis import INSTRUCTIONS
from .ledger import append_records, read_ledger

__all__ = ["ANNOTATIONS", "ANNOTATORS_PER_SAMPLE", "AnnotationSample", "AnnotationStore"]

ANNOTATIONS = "annotations.jsonl"
ANNOTATORS_PER_SAMPLE = 5  # sec. 4.3 / A.1: five annotators per sample
MAX_ANNOTATOR_ID_CHARS = 64
# The keys a ledger line must have to be used (a damaged line is reported once and skipped: ledger.read_ledger).
_SUBMISSION_KEYS = ("annotator_id", "sample_id", "ratings")
_CANDIDATE_KEYS = ("sample_id", "candidate_id", "image", "editing_model")


@dataclass
class AnnotationSample:
    sample_id: str
    instruction: str
    image: str  # absolute path of the original image
    category: str
    subtask: str
    candidates: List[Dict[str, str]]  # {"candidate_id", "image" (absolute), "editing_model"}, in id order
    num_edits: Optional[int] = None  # the operations synthesis asked for (sec. 4.2: 2-5)


def _load_samples(folder: Path) -> List[AnnotationSample]:
    instructions = [r for r in read_ledger(folder / INSTRUCTIONS, required=("status",)).values()
                    if r["status"] == "ok" and all(k in r for k in ("instruction", "image", "category", "subtask"))]
    by_sample: Dict[str, List[Dict[str, str]]] = {}
    for record in read_ledger(folder / CANDIDATES, required=_CANDIDATE_KEYS).values():
        by_sample.setdefault(record["sample_id"], []).append(
            {"candidate_id": record["candidate_id"], "image": str(folder / record["image"]),
             "editing_model": record["editing_model"]})
    samples = []
    for r in instructions:
        candidates = sorted(by_sample.get(r["id"], []), key=lambda c: c["candidate_id"])
        if len(candidates) >= 2:
            samples.append(AnnotationSample(r["id"], r["instruction"], r["image"], r["category"], r["subtask"],
                                            candidates, r.get("num_edits")))
    return samples


class AnnotationStore:
    """Samples to annotate and the submissions of a construction folder (module docstring)."""

    def __init__(self, folder, annotators_per_sample: int = ANNOTATORS_PER_SAMPLE):
        self.folder = Path(folder)
        if not (self.folder / INSTRUCTIONS).is_file():
            raise MIEScoreInputError(f"'{self.folder}' is not a MER-Bench construction folder (no {INSTRUCTIONS}); "
                                     "run `miescore mer-bench synthesize` and `candidates` first")
        self.annotators_per_sample = int(annotators_per_sample)
        self.path = self.folder / ANNOTATIONS
        self._lock = FileLock(str(self.path) + ".lock")
        self.samples = _load_samples(self.folder)
        if not self.samples:
            raise MIEScoreInputError(f"'{self.folder}' has no sample with candidates; run `miescore mer-bench "
                                     "candidates` first")
        self.sample_by_id = {s.sample_id: s for s in self.samples}

    def submissions(self) -> Dict[str, Dict[str, Any]]:
        """``{"annotator|sample": submission}``, in file order (a torn last line is ignored)."""
        return read_ledger(self.path, required=_SUBMISSION_KEYS)

    def annotators_of(self, submissions: Optional[Dict] = None) -> Dict[str, List[str]]:
        """``{sample_id: [annotator ids]}``."""
        out: Dict[str, List[str]] = {}
        for record in (submissions if submissions is not None else self.submissions()).values():
            out.setdefault(record["sample_id"], []).append(record["annotator_id"])
        return out

    def next_sample(self, annotator: str) -> Optional[AnnotationSample]:
        """The first sample ``annotator`` has not submitted that still needs annotators; None when none is left."""
        annotator = _check_annotator(annotator)
        by_sample = self.annotators_of()
        for sample in self.samples:
            who = by_sample.get(sample.sample_id, [])
            if annotator not in who and len(who) < self.annotators_per_sample:
                return sample
        return None

    def progress(self, annotator: str) -> Dict[str, int]:
        """This annotator's submitted samples, the samples still open to them, and the store's totals."""
        annotator = _check_annotator(annotator)
        by_sample = self.annotators_of()
        mine = sum(annotator in who for who in by_sample.values())
        open_ = sum(annotator not in by_sample.get(s.sample_id, []) and
                    len(by_sample.get(s.sample_id, [])) < self.annotators_per_sample for s in self.samples)
        complete = sum(len(by_sample.get(s.sample_id, [])) >= self.annotators_per_sample for s in self.samples)
        return {"done": mine, "open": open_, "samples": len(self.samples), "complete_samples": complete}

    def submit(self, annotator: str, sample_id: str, ratings: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
        """Check and append one submission; raises MIEScoreInputError naming what is missing or wrong."""
        annotator = _check_annotator(annotator)
        sample = self.sample_by_id.get(sample_id)
        if sample is None:
            raise MIEScoreInputError(f"unknown sample {sample_id!r}")
        clean = _check_ratings(sample, ratings)
        record = {"id": f"{annotator}|{sample_id}", "annotator_id": annotator, "sample_id": sample_id,
                  "submitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "ratings": clean}
        with self._lock:
            # cuts a torn last line left by a crash; a damaged line is reported once and skipped
            submissions = read_ledger(self.path, repair=True, required=_SUBMISSION_KEYS)
            if record["id"] in submissions:
                raise MIEScoreInputError(f"{annotator} already annotated {sample_id}")
            if len(self.annotators_of(submissions).get(sample_id, [])) >= self.annotators_per_sample:
                raise MIEScoreInputError(f"{sample_id} already has {self.annotators_per_sample} annotators")
            append_records(self.path, [record])
        return record


def _check_annotator(annotator: str) -> str:
    annotator = (annotator or "").strip()
    if not annotator or "|" in annotator or "," in annotator:
        raise MIEScoreInputError("enter an annotator id (no '|' or ',')")
    if len(annotator) > MAX_ANNOTATOR_ID_CHARS:  # stored in every submission, re-read on every click
        raise MIEScoreInputError(f"the annotator id has {len(annotator):,} characters; use at most "
                                 f"{MAX_ANNOTATOR_ID_CHARS} (a name or an initials code)")
    return annotator


def _check_ratings(sample: AnnotationSample, ratings: Dict[str, Dict[str, str]]) -> Dict[str, Dict[str, str]]:
    clean, missing = {}, []
    for number, candidate in enumerate(sample.candidates, start=1):
        given = (ratings or {}).get(candidate["candidate_id"]) or {}
        tiers = {d: str(given.get(d) or "").strip().lower() for d in MER_TIER_DIMENSIONS}
        bad = [d for d, t in tiers.items() if t not in TIERS]
        if bad:
            missing.append(f"candidate {number}: {', '.join(d.upper() if d != 'overall' else 'Overall' for d in bad)}")
        clean[candidate["candidate_id"]] = tiers
    if missing:
        raise MIEScoreInputError("rate every candidate before submitting; missing " + "; ".join(missing))
    return clean

