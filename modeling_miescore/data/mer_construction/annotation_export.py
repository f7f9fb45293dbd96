"""Export a construction folder's annotations to the raw MER-Bench release the builder reads
(:mod:`modeling_miescore.data.builders.mer_bench`), and preview what the builder will make of it.

Written (one folder, made beside the target and renamed into place: never half-written)::

    samples.jsonl     {"sample_id", "instruction", "original_image", "category", "subtask", "num_edits"}
    candidates.jsonl  {"candidate_id", "sample_id", "editing_model", "image"}
    annotations.csv   annotator_id,candidate_id,overall,sc,pq   (one row per annotator and candidate)
    originals/        candidates/      the images (copied)
    export_report.json

Only samples with all their annotators (paper: 5) are exported; the others are counted as incomplete. The
preview runs the builder's own steps (sec. 4.3, A.1): per-dimension majority vote (>= 3 of 5; a candidate
without one goes to expert review), ranking by overall tier then SC then PQ, and the seeded 2/3/4-pair group
sampling, and reports how many groups of each size the release can give against the paper's 200.
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

from ...hub.errors import MIEScoreInputError
from ...utils.output_paths import OutputPathError, check_folder_apart, ensure_folder
from ..builders.raw_files import ImageRef
from ..builders.mer_bench import Candidate, DEFAULT_GROUPS_PER_TYPE, sample_groups, vote
from ..schema import GROUP_SIZES, MER_TIER_DIMENSIONS
from .annotation_store import AnnotationStore

__all__ = ["export_raw_release"]


def _complete(store: AnnotationStore) -> tuple[list, dict]:
    """Samples with all their annotators, and ``{sample_id: [submission, ...]}`` (first ``n`` of each)."""
    by_sample: Dict[str, list] = {}
    for record in store.submissions().values():
        by_sample.setdefault(record["sample_id"], []).append(record)
    done = [s for s in store.samples if len(by_sample.get(s.sample_id, [])) >= store.annotators_per_sample]
    return done, {s.sample_id: by_sample[s.sample_id][:store.annotators_per_sample] for s in done}


def _write_release(tmp: Path, samples: list, submissions: dict) -> None:
    (tmp / "originals").mkdir()
    (tmp / "candidates").mkdir()
    with open(tmp / "samples.jsonl", "w", encoding="utf-8") as s_out, \
            open(tmp / "candidates.jsonl", "w", encoding="utf-8") as c_out, \
            open(tmp / "annotations.csv", "w", encoding="utf-8", newline="") as a_out:
        writer = csv.writer(a_out)
        writer.writerow(["annotator_id", "candidate_id", *MER_TIER_DIMENSIONS])
        for sample in samples:
            original = f"originals/{sample.sample_id}{Path(sample.image).suffix.lower()}"
            shutil.copyfile(sample.image, tmp / original)
            s_out.write(json.dumps({"sample_id": sample.sample_id, "instruction": sample.instruction,
                                    "original_image": original, "category": sample.category,
                                    "subtask": sample.subtask, "num_edits": sample.num_edits},
                                   ensure_ascii=False) + "\n")
            for candidate in sample.candidates:
                rel = f"candidates/{Path(candidate['image']).name}"
                shutil.copyfile(candidate["image"], tmp / rel)
                c_out.write(json.dumps({"candidate_id": candidate["candidate_id"], "sample_id": sample.sample_id,
                                        "editing_model": candidate["editing_model"], "image": rel}) + "\n")
            for record in submissions[sample.sample_id]:
                for cid, tiers in record["ratings"].items():
                    writer.writerow([record["annotator_id"], cid, *(tiers[d] for d in MER_TIER_DIMENSIONS)])


def preview_groups(samples: list, submissions: dict, groups_per_type: int, seed: int, min_agreement: int) -> Dict:
    """The builder's vote and group sampling on the exported annotations: group counts and review list."""
    candidates = {}
    for sample in samples:
        for c in sample.candidates:
            candidates[c["candidate_id"]] = Candidate(c["candidate_id"], sample.sample_id, c["editing_model"],
                                                      ImageRef(c["image"], Path(c["image"])), 0)
        for record in submissions[sample.sample_id]:
            for cid, tiers in record["ratings"].items():
                for d in MER_TIER_DIMENSIONS:
                    candidates[cid].votes[d].append(tiers[d])
    valid, review = vote(candidates, {s.sample_id for s in samples}, min_agreement)
    groups = sample_groups(valid, [s.sample_id for s in samples], {k: groups_per_type for k in GROUP_SIZES}, seed)
    return {"groups": {f"{k}pair": len(groups[k]) for k in GROUP_SIZES}, "target_per_size": groups_per_type,
            "needs_review": len(review), "voted_candidates": sum(map(len, valid.values()))}


def export_raw_release(folder, raw_dir, *, annotators_per_sample: int = 5, overwrite: bool = False,
                       groups_per_type: int = DEFAULT_GROUPS_PER_TYPE, seed: int = 0,
                       min_agreement: int = 3) -> Dict[str, Any]:
    """Write the raw release of ``folder``'s complete samples to ``raw_dir``; returns the export report."""
    store = AnnotationStore(folder, annotators_per_sample)
    raw_dir = check_folder_apart(raw_dir, {"the construction --folder": folder})  # real path, apart from the work
    if raw_dir.exists() and not overwrite:
        raise MIEScoreInputError(f"'{raw_dir}' already exists; pass another folder or --overwrite")
    samples, submissions = _complete(store)
    if not samples:
        raise MIEScoreInputError(f"no sample of '{folder}' has {annotators_per_sample} annotators yet; nothing to "
                                 "export")
    report: Dict[str, Any] = {"exported_samples": len(samples), "incomplete_samples": len(store.samples) - len(samples),
                              "annotators": sorted({r["annotator_id"] for rs in submissions.values() for r in rs}),
                              **preview_groups(samples, submissions, groups_per_type, seed, min_agreement)}
    ensure_folder(raw_dir.parent, "--out")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{raw_dir.name}.", dir=raw_dir.parent))
    except OSError as err:
        raise OutputPathError(f"--out: cannot write in '{raw_dir.parent}' ({err.strerror})") from None
    try:
        _write_release(tmp, samples, submissions)
        (tmp / "export_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        old: Optional[Path] = None
        if raw_dir.exists():
            old = raw_dir.with_name(f".{raw_dir.name}.old-{tmp.name}")
            raw_dir.rename(old)
        tmp.rename(raw_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report
