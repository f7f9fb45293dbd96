"""MER-Bench (MultiEditReward-Bench) builder: tiered annotations -> K-pair ranking groups as Parquet.

Raw layout (paths relative to the raw folder; extra keys/columns/files are ignored)::

    samples.jsonl     {"sample_id": str, "instruction": str, "original_image": relative image path,
                       "category": "general" | "human_basic" | "human_fine", "subtask": str}
    candidates.jsonl  {"candidate_id": str, "sample_id": str, "editing_model": str,
                       "image": relative image path}
    annotations.csv   annotator_id,candidate_id,overall,sc,pq
                      one row per annotator and candidate; tiers good / medium / poor
                      ("bad" is read as poor); 5 annotators per candidate

Construction (SpatialReward paper, section 4.3 and appendix A.1):

* **Majority vote.** Each of overall / SC / PQ takes the tier chosen by at least 3 of the 5
  annotators (``min_agreement``). A candidate without such a majority in any of the three is
  excluded and listed as *needs review* (the paper sends it to expert review) in the card,
  ``needs_review.csv`` and the build summary.
* **Ranking.** Overall tier is the primary key; SC then PQ break ties (good > medium > poor).
  Two candidates with the same (overall, SC, PQ) are never put in the same group.
* **Groups**, within one sample (one original image + instruction), each candidate used at most once,
  sampled with ``seed``:

  - ``2pair``: two candidates with different overall tiers;
  - ``3pair``: one good, one medium and one poor candidate (overall tier);
  - ``4pair``: a 3-pair base plus a fourth candidate with the *same overall tier* as one base member
    but a different (SC, PQ), so its place is decided only by the fine-grained sub-dimensions.

Output (compatible with the authors' ``SpatialReward/MER-Bench`` release): splits ``2pair``,
``3pair``, ``4pair``; columns ``pair_id, instruction, original_image, edited_images`` (best first),
``label, sample_id`` plus ``category, subtask, editing_models, candidate_ids, overall_tiers,
sc_tiers, pq_tiers``. ``label`` holds the editing category (``general`` / ``human_basic`` /
``human_fine``): the authors' evaluation script (``eval/MERBench/calculate_accuracy.py``) reports
accuracy per ``label`` as its category breakdown (paper Table 2).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from ..schema import GROUP_SIZES, MER_CATEGORIES, MER_SPLITS, TIERS
from .common import (
    DEFAULT_MAX_SHARD_BYTES,
    DEFAULT_ROWS_PER_GROUP,
    DatasetValidationError,
    ImageChecker,
    Problem,
    ProblemCollector,
    dataset_card_yaml,
    format_bytes,
    image_struct,
    iter_progress,
    md_table,
    parse_size,
    progress_bar,
    push_folder_to_hub,
    run_build,
    size_arg,
    start_build,
    read_csv,
    read_jsonl,
    size_category,
    write_dataset_card,
    write_parquet_split,
)

__all__ = [
    "MERBenchSummary",
    "add_cli_arguments",
    "build_mer_bench",
    "majority_tier",
    "mer_bench_features",
    "run_cli",
]

_CATEGORY_ALIASES = {
    "general": "general", "human_basic": "human_basic", "human_basics": "human_basic", "human_b": "human_basic",
    "human_fine": "human_fine", "human_fine_details": "human_fine", "human_f": "human_fine",
    "human_face": "human_fine",
}
_TIER_RANK = {"poor": 0, "bad": 0, "medium": 1, "good": 2}
DEFAULT_GROUPS_PER_TYPE = 200  # paper 4.3: 200 groups of each size
LICENSE = "unknown"

CITATION = """@article{long2026spatialreward,
  title   = {SpatialReward: Bridging the Perception Gap in Online RL for Image Editing via Explicit Spatial Reasoning},
  author  = {Long, Yancheng and Yang, Yankai and Wei, Hongyang and Chen, Wei and Zhang, Tianke and Fan, Haonan and
             Liu, Changyi and Jiang, Kaiyu and Chen, Jiankang and Tang, Kaiyu and Wen, Bin and Yang, Fan and
             Gao, Tingting and Li, Han and Yang, Shuo},
  journal = {arXiv preprint arXiv:2602.07458},
  year    = {2026}
}"""

COLUMNS = {
    "pair_id": "group id (`<sample_id>-<K>p<j>`)",
    "instruction": "multi-operation editing instruction",
    "original_image": "the image that was edited",
    "edited_images": "the K candidate edits, **best first** (ground-truth order)",
    "label": "editing category (general / human_basic / human_fine), as the authors' eval script groups it",
    "sample_id": "sample (original image + instruction) the group comes from",
    "category": "same as `label`",
    "subtask": "fine-grained subtask",
    "editing_models": "model of each edited image (same order)",
    "candidate_ids": "raw candidate id of each edited image (same order)",
    "overall_tiers": "majority overall tier of each edited image",
    "sc_tiers": "majority semantic-consistency tier",
    "pq_tiers": "majority perceptual-quality tier",
}


def mer_bench_features():
    """The ``datasets.Features`` of a MER-Bench group row."""
    from datasets import Features, Image, List, Value

    return Features(
        {
            "pair_id": Value("string"),
            "instruction": Value("string"),
            "original_image": Image(),
            "edited_images": List(Image()),
            "label": Value("string"),
            "sample_id": Value("string"),
            "category": Value("string"),
            "subtask": Value("string"),
            "editing_models": List(Value("string")),
            "candidate_ids": List(Value("string")),
            "overall_tiers": List(Value("string")),
            "sc_tiers": List(Value("string")),
            "pq_tiers": List(Value("string")),
        }
    )


def majority_tier(votes, min_agreement: int = 3) -> str | None:
    """The tier named by at least ``min_agreement`` votes, else ``None`` (paper A.1: >= 3 of 5)."""
    counts = Counter(votes)
    best = [t for t, c in counts.items() if c >= min_agreement]
    return best[0] if len(best) == 1 else None


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


@dataclass
class MERBenchSummary:
    out_dir: str
    splits: dict = field(default_factory=dict)
    num_groups: int = 0
    num_samples: int = 0
    num_candidates: int = 0
    num_valid_candidates: int = 0
    needs_review: list = field(default_factory=list)  # [{"candidate_id", "sample_id", "dimensions", "votes"}]
    shortfall: dict = field(default_factory=dict)  # split -> missing groups vs target
    total_bytes: int = 0
    warnings: list = field(default_factory=list)
    hub_url: str | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "dataset": "mer-bench",
            "out_dir": self.out_dir,
            "splits": self.splits,
            "num_groups": self.num_groups,
            "num_samples": self.num_samples,
            "num_candidates": self.num_candidates,
            "num_valid_candidates": self.num_valid_candidates,
            "needs_review": list(self.needs_review),
            "shortfall": dict(self.shortfall),
            "total_bytes": self.total_bytes,
            "warnings": list(self.warnings),
            "hub_url": self.hub_url,
            "elapsed_s": self.elapsed_s,
        }

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v['num_examples']}" for k, v in self.splits.items())
        lines = [
            f"MER-Bench written to {self.out_dir}: {self.num_groups} groups ({parts}) from {self.num_samples} samples; "
            f"{self.num_valid_candidates}/{self.num_candidates} candidates with a majority; "
            f"{format_bytes(self.total_bytes)} in {self.elapsed_s:.1f} s"
        ]
        if self.needs_review:
            ids = [r["candidate_id"] for r in self.needs_review]
            lines.append(f"needs review ({len(ids)} without a 3-of-5 majority): {', '.join(ids[:20])}"
                         + (" ..." if len(ids) > 20 else "") + " (see needs_review.csv)")
        lines += [f"warning: {w}" for w in self.warnings]
        if self.hub_url:
            lines.append(f"pushed to {self.hub_url}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Reading and validation
# --------------------------------------------------------------------------------------------


@dataclass
class _Sample:
    sample_id: str
    instruction: str
    image: tuple  # (rel, Path)
    category: str
    subtask: str
    line: int
    order: int


@dataclass
class _Candidate:
    candidate_id: str
    sample_id: str
    editing_model: str
    image: tuple
    line: int
    votes: dict = field(default_factory=lambda: {"overall": [], "sc": [], "pq": []})
    tiers: dict = field(default_factory=dict)  # dim -> majority tier (str) or None

    @property
    def key(self) -> tuple:
        return tuple(_TIER_RANK[self.tiers[d]] for d in ("overall", "sc", "pq"))


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _norm(v: str) -> str:
    return v.strip().lower().replace("-", "_").replace(" ", "_")


def _read_samples(raw: Path, pc: ProblemCollector, images: ImageChecker, progress: bool):
    fname = "samples.jsonl"
    entries = read_jsonl(raw / fname, pc, required=("sample_id", "instruction", "original_image", "category", "subtask"))
    declared, first, out = set(), {}, {}
    for line, obj in iter_progress(entries, "checking samples", progress):
        sid = obj["sample_id"]
        if not _nonempty_str(sid):
            pc.add(fname, line, f"sample_id must be a non-empty string, got {sid!r}")
            continue
        declared.add(sid)
        if sid in first:
            pc.add(fname, line, f"duplicate sample_id {sid!r} (first on line {first[sid]})")
            continue
        first[sid] = line
        ok = True
        if not _nonempty_str(obj["instruction"]):
            pc.add(fname, line, f"sample {sid!r}: instruction must be a non-empty string")
            ok = False
        cat = _CATEGORY_ALIASES.get(_norm(obj["category"])) if isinstance(obj["category"], str) else None
        if cat is None:
            pc.add(fname, line, f"sample {sid!r}: unknown category {obj['category']!r}; expected one of: {', '.join(MER_CATEGORIES)}")
            ok = False
        if not _nonempty_str(obj["subtask"]):
            pc.add(fname, line, f"sample {sid!r}: subtask must be a non-empty string")
            ok = False
        path, err = images(obj["original_image"])
        if err:
            pc.add(fname, line, f"sample {sid!r}, original_image: {err}")
            ok = False
        if ok:
            out[sid] = _Sample(sid, obj["instruction"], (obj["original_image"], path), cat, obj["subtask"].strip(), line, len(out))
    return out, declared


def _read_candidates(raw: Path, pc: ProblemCollector, images: ImageChecker, declared_samples: set, progress: bool):
    fname = "candidates.jsonl"
    entries = read_jsonl(raw / fname, pc, required=("candidate_id", "sample_id", "editing_model", "image"))
    declared, first, out = set(), {}, {}
    for line, obj in iter_progress(entries, "checking candidates", progress):
        cid = obj["candidate_id"]
        if not _nonempty_str(cid):
            pc.add(fname, line, f"candidate_id must be a non-empty string, got {cid!r}")
            continue
        declared.add(cid)
        if cid in first:
            pc.add(fname, line, f"duplicate candidate_id {cid!r} (first on line {first[cid]})")
            continue
        first[cid] = line
        ok = True
        sid = obj["sample_id"]
        if not isinstance(sid, str) or sid not in declared_samples:
            pc.add(fname, line, f"candidate {cid!r} points to unknown sample_id {sid!r} (not in samples.jsonl)")
            ok = False
        if not _nonempty_str(obj["editing_model"]):
            pc.add(fname, line, f"candidate {cid!r}: editing_model must be a non-empty string")
            ok = False
        path, err = images(obj["image"])
        if err:
            pc.add(fname, line, f"candidate {cid!r}: {err}")
            ok = False
        if ok:
            out[cid] = _Candidate(cid, sid, obj["editing_model"].strip(), (obj["image"], path), line)
    return out, declared


def _read_annotations(raw: Path, pc: ProblemCollector, candidates: dict, declared: set, progress: bool):
    fname = "annotations.csv"
    rows = read_csv(raw / fname, pc, required=("annotator_id", "candidate_id", "overall", "sc", "pq"))
    if rows is None:
        return None
    seen: dict[tuple, int] = {}
    n_rows = 0
    for line, row in iter_progress(rows, "checking annotations", progress):
        ok = True
        a, c = row["annotator_id"], row["candidate_id"]
        if not a:
            pc.add(fname, line, "empty annotator_id")
            ok = False
        if c not in declared:
            pc.add(fname, line, f"annotation for unknown candidate_id {c!r} (not in candidates.jsonl)")
            ok = False
        tiers = {}
        for d in ("overall", "sc", "pq"):
            t = _norm(row[d])
            if t not in _TIER_RANK:
                pc.add(fname, line, f"{d} tier {row[d]!r} is not one of good / medium / poor")
                ok = False
            else:
                tiers[d] = TIERS[_TIER_RANK[t]]
        if not ok:
            continue
        if (a, c) in seen:
            pc.add(fname, line, f"duplicate annotation of {c!r} by {a!r} (first on line {seen[(a, c)]})")
            continue
        seen[(a, c)] = line
        n_rows += 1
        if c in candidates:
            for d, t in tiers.items():
                candidates[c].votes[d].append(t)
    return n_rows


# --------------------------------------------------------------------------------------------
# Group sampling
# --------------------------------------------------------------------------------------------


def _groups_for(cands: list[_Candidate], k: int) -> list[tuple]:
    """Every valid k-group among ``cands`` (sorted by id), each ordered best first."""
    if k == 2:
        out = [(a, b) for a, b in combinations(cands, 2) if a.key[0] != b.key[0]]
    else:
        by_tier = defaultdict(list)
        for c in cands:
            by_tier[c.key[0]].append(c)
        bases = [(g, m, p) for g in by_tier[2] for m in by_tier[1] for p in by_tier[0]]
        if k == 3:
            out = bases
        elif k == 4:
            out = []
            for base in bases:
                used = {c.candidate_id for c in base}
                for x in cands:
                    if x.candidate_id in used:
                        continue
                    twin = base[2 - x.key[0]]  # the base member with the same overall tier
                    if x.key != twin.key:
                        out.append(base + (x,))
        else:
            raise ValueError(f"group size must be 2, 3 or 4, got {k}")
    return [tuple(sorted(g, key=lambda c: c.key, reverse=True)) for g in out]


def sample_groups(by_sample: dict[str, list[_Candidate]], sample_order: list[str], targets: dict[int, int], seed: int):
    """Sample up to ``targets[k]`` groups of each size; each candidate is used at most once.

    Sizes are filled one after the other, most constrained first (4, then 3, then 2): a sample can give
    one 4-pair but two 3-pairs, and 2-pairs fit in the leftovers, so this order reaches the targets
    with the fewest samples. For each size, samples are visited in a seeded random order, round after
    round, each visit forming at most one group chosen uniformly among the sample's valid groups of
    unused candidates. Deterministic for a given seed and input.
    """
    rng = random.Random(seed)
    order = list(sample_order)
    rng.shuffle(order)
    used: set[str] = set()
    groups: dict[int, list[tuple[str, tuple]]] = {k: [] for k in targets}
    counters: dict[tuple[str, int], int] = Counter()
    for k in sorted(targets, reverse=True):
        progress = True
        while progress and len(groups[k]) < targets[k]:
            progress = False
            for sid in order:
                if len(groups[k]) >= targets[k]:
                    break
                free = [c for c in by_sample.get(sid, []) if c.candidate_id not in used]
                options = _groups_for(free, k)
                if not options:
                    continue
                g = options[rng.randrange(len(options))]
                used.update(c.candidate_id for c in g)
                groups[k].append((f"{sid}-{k}p{counters[(sid, k)]}", g))
                counters[(sid, k)] += 1
                progress = True
    return groups


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


def build_mer_bench(
    raw_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    seed: int = 0,
    groups_per_type: int | dict = DEFAULT_GROUPS_PER_TYPE,
    n_annotators: int | None = 5,
    min_agreement: int = 3,
    max_shard_bytes: int | str = DEFAULT_MAX_SHARD_BYTES,
    rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
    license: str = LICENSE,
    max_image_pixels: int | None = None,
    push_to_hub: str | None = None,
    private: bool | None = None,
    token: str | None = None,
    progress: bool = True,
) -> MERBenchSummary:
    """Validate a raw MER-Bench release, vote, form 2/3/4-pair groups and write the Parquet dataset.

    Args:
        raw_dir: folder with ``samples.jsonl``, ``candidates.jsonl``, ``annotations.csv`` and images.
        out_dir: output folder, written atomically.
        overwrite: replace an existing non-empty ``out_dir``.
        seed: seed of the group sampling (same seed + same input = same groups).
        groups_per_type: target number of groups per size (paper: 200 each); an int or
            ``{2: n2, 3: n3, 4: n4}``. When the data cannot supply that many, all possible groups are
            kept and the shortfall is reported.
        n_annotators: annotations required per candidate (paper: 5); ``None`` accepts any number
            >= ``min_agreement``.
        min_agreement: votes needed for a majority (paper: 3 of 5).
        max_shard_bytes, rows_per_group, license, max_image_pixels: output options.
        push_to_hub: ``"user/name"``: upload the finished folder as one commit.

    Raises:
        DatasetValidationError: every problem of the raw release, with file and line; nothing written.
        OutputExistsError, HubPushError: as for :func:`~modeling_miescore.data.builders.mie_bench.build_mie_bench`.
    """
    t0 = time.perf_counter()
    raw = Path(raw_dir).absolute()
    out = Path(out_dir).absolute()
    max_shard = parse_size(max_shard_bytes)
    if isinstance(groups_per_type, int):
        targets = {k: groups_per_type for k in GROUP_SIZES}
    else:
        targets = {int(k): int(v) for k, v in dict(groups_per_type).items()}
        bad = [k for k in targets if k not in GROUP_SIZES]
        if bad:
            raise ValueError(f"groups_per_type keys must be 2, 3 or 4, got {bad}")
    if any(v < 0 for v in targets.values()):
        raise ValueError("groups_per_type must be >= 0")
    if n_annotators is not None and not 1 <= min_agreement <= n_annotators:
        raise ValueError(f"min_agreement must be in 1..n_annotators, got {min_agreement}")
    if n_annotators is not None and 2 * min_agreement <= n_annotators:
        raise ValueError(f"min_agreement={min_agreement} is not a majority of {n_annotators} annotators")
    atomic = start_build(raw, out, overwrite, push_to_hub)

    # ---- 1. validate ----
    pc = ProblemCollector(raw)
    images = ImageChecker(raw, max_image_pixels)
    samples, declared_samples = _read_samples(raw, pc, images, progress)
    candidates, declared_cands = _read_candidates(raw, pc, images, declared_samples, progress)
    n_annotations = _read_annotations(raw, pc, candidates, declared_cands, progress)
    if n_annotations is not None:  # (an unusable file is already reported)
        for c in candidates.values():
            n = len(c.votes["overall"])
            if n_annotators is not None and n != n_annotators:
                pc.add("candidates.jsonl", c.line,
                       f"candidate {c.candidate_id!r} has {n} annotation(s) in annotations.csv, expected {n_annotators}")
            elif n < min_agreement:
                pc.add("candidates.jsonl", c.line,
                       f"candidate {c.candidate_id!r} has {n} annotation(s); a majority needs at least {min_agreement}")
    pc.raise_if_any()

    # ---- 2. majority vote ----
    needs_review = []
    valid: dict[str, list[_Candidate]] = defaultdict(list)
    for c in candidates.values():
        c.tiers = {d: majority_tier(v, min_agreement) for d, v in c.votes.items()}
        missing = [d for d, t in c.tiers.items() if t is None]
        if missing:
            needs_review.append({
                "candidate_id": c.candidate_id, "sample_id": c.sample_id, "dimensions": missing,
                "votes": {d: dict(sorted(Counter(c.votes[d]).items())) for d in ("overall", "sc", "pq")},
            })
        elif c.sample_id in samples:
            valid[c.sample_id].append(c)
    for sid in valid:
        valid[sid].sort(key=lambda c: c.candidate_id)

    # ---- 3. groups ----
    sample_order = [s.sample_id for s in samples.values()]
    groups = sample_groups(valid, sample_order, targets, seed)
    shortfall = {f"{k}pair": targets[k] - len(groups[k]) for k in targets if len(groups[k]) < targets[k]}
    warnings_ = []
    if shortfall:
        warnings_.append(
            "fewer groups than requested: " + ", ".join(f"{s} {n} short" for s, n in shortfall.items())
            + " (not enough annotated candidates with the required tiers)"
        )
    n_groups = sum(len(v) for v in groups.values())
    if n_groups == 0:
        raise DatasetValidationError(
            [Problem("annotations.csv", None, "no valid group can be formed (need candidates of different majority tiers within a sample)")],
            source=raw,
        )

    features = mer_bench_features()

    def make_row(item) -> dict:
        pair_id, g = item
        s = samples[g[0].sample_id]
        return {
            "pair_id": pair_id,
            "instruction": s.instruction,
            "original_image": image_struct(s.image[1], s.image[0]),
            "edited_images": [image_struct(c.image[1], c.image[0]) for c in g],
            "label": s.category,
            "sample_id": s.sample_id,
            "category": s.category,
            "subtask": s.subtask,
            "editing_models": [c.editing_model for c in g],
            "candidate_ids": [c.candidate_id for c in g],
            "overall_tiers": [c.tiers["overall"] for c in g],
            "sc_tiers": [c.tiers["sc"] for c in g],
            "pq_tiers": [c.tiers["pq"] for c in g],
        }

    def row_size(item) -> int:
        _, g = item
        s = samples[g[0].sample_id]
        return _size(s.image[1]) + sum(_size(c.image[1]) for c in g) + len(s.instruction.encode()) + 512

    # rows of a split in sample-file order, then group number
    for k in groups:
        groups[k].sort(key=lambda item: (samples[item[1][0].sample_id].order, item[0]))

    split_info: dict[str, dict] = {}
    with atomic as tmp:
        bar = progress_bar(n_groups, "writing MER-Bench", progress)
        try:
            for k in GROUP_SIZES:
                items = groups.get(k, [])
                if not items:
                    continue
                split = f"{k}pair"
                info = write_parquet_split(
                    tmp, split, len(items), [row_size(it) for it in items], lambda i, items=items: make_row(items[i]),
                    features, max_shard_bytes=max_shard, rows_per_group=rows_per_group, progress=bar,
                )
                info["pattern"] = f"data/{split}-*.parquet"
                split_info[split] = info
        finally:
            bar.close()
        header = dataset_card_yaml(
            configs=[{"config_name": "default", "default": True, "features": features, "splits": split_info}],
            license=license,
            pretty_name="MER-Bench (MultiEditReward-Bench)",
            task_categories=["image-to-image", "visual-question-answering"],
            tags=["image-editing", "reward-model", "preference", "ranking", "spatialreward"],
            size_categories=size_category(n_groups),
        )
        body = _card_body(split_info, groups, samples, candidates, valid, needs_review, targets, seed, min_agreement,
                          n_annotators, max_shard, warnings_, license)
        write_dataset_card(tmp, header, body)
        _write_needs_review(tmp / "needs_review.csv", needs_review)
        total = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())

    summary = MERBenchSummary(
        out_dir=str(out),
        splits={k: {kk: v[kk] for kk in ("num_examples", "files", "num_bytes", "file_bytes")} for k, v in split_info.items()},
        num_groups=n_groups,
        num_samples=len(samples),
        num_candidates=len(candidates),
        num_valid_candidates=sum(len(v) for v in valid.values()),
        needs_review=needs_review,
        shortfall=shortfall,
        total_bytes=total,
        warnings=warnings_,
    )
    if push_to_hub:
        summary.hub_url = push_folder_to_hub(out, push_to_hub, private=private, token=token,
                                             commit_message="Upload MER-Bench (built with miescore)")
    summary.elapsed_s = time.perf_counter() - t0
    return summary


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _write_needs_review(path: Path, rows: list) -> None:
    import csv

    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["candidate_id", "sample_id", "dimensions", "overall_votes", "sc_votes", "pq_votes"])
        for r in rows:
            w.writerow([r["candidate_id"], r["sample_id"], ";".join(r["dimensions"])]
                       + [";".join(f"{t}={n}" for t, n in r["votes"][d].items()) for d in ("overall", "sc", "pq")])


def _card_body(split_info, groups, samples, candidates, valid, needs_review, targets, seed, min_agreement,
               n_annotators, max_shard, warnings_, license) -> str:
    out = []
    n_groups = sum(v["num_examples"] for v in split_info.values())
    n_images = sum(len(g) for k in groups for _, g in groups[k])
    out.append("# MER-Bench (MultiEditReward-Bench)\n")
    out.append(
        "K-pair ranking benchmark for image-editing reward models (SpatialReward paper, section 4): each row is a "
        "group of K edits of the same image and multi-operation instruction, **ordered best first** by human "
        "tiers. A reward model gets a group right only if its scores reproduce that order exactly.\n"
    )
    out.append(
        f"This build: **{n_groups} groups** ({n_images} edited images) from {len(samples)} samples and "
        f"{len(candidates)} annotated candidates. Generated from the data by `miescore build-dataset mer-bench` "
        "(`modeling_miescore.data.builders.mer_bench`).\n"
    )
    out.append("## Usage\n")
    out.append(
        "```python\nfrom datasets import load_dataset\n\n"
        "ds = load_dataset(\"path/or/repo\")        # DatasetDict: 2pair / 3pair / 4pair\n"
        "g = ds[\"3pair\"][0]\n"
        "g[\"original_image\"], g[\"edited_images\"]   # PIL image, list of PIL images (best first)\n```\n"
    )
    out.append("## Splits\n")
    out.append(md_table(
        ["split", "groups", "target", "shards", "Parquet size"],
        [[k, v["num_examples"], targets.get(int(k[0]), "–"), len(v["files"]), format_bytes(v["file_bytes"])]
         for k, v in split_info.items()],
    ) + "\n")
    out.append("## Columns\n")
    out.append(md_table(["column", "description"], [[f"`{k}`", v] for k, v in COLUMNS.items()]) + "\n")
    out.append(
        "Compatible with the authors' `SpatialReward/MER-Bench` (same splits and the columns `pair_id, instruction, "
        "original_image, edited_images, label, sample_id`); the other columns are additions. `label` holds the "
        "editing category: the authors' `calculate_accuracy.py` reports per-`label` accuracy as its category "
        "breakdown (paper Table 2: General / Human-Basic / Human-Fine).\n"
    )
    out.append("## How the groups are built\n")
    out.append(
        f"1. **Majority vote** (appendix A.1): each of overall, SC (semantic consistency) and PQ (perceptual quality) "
        f"takes the tier named by at least {min_agreement} of the {n_annotators or 'N'} annotators. A candidate "
        "without a majority in any of them is excluded and listed under *Needs review* below.\n"
        "2. **Ranking** (section 4.3): overall tier first, SC then PQ to break ties (good > medium > poor); two "
        "candidates with identical tiers never share a group.\n"
        "3. **Groups**, within one sample, each candidate used at most once: 2-pair = two different overall tiers; "
        "3-pair = one good, one medium, one poor; 4-pair = a 3-pair plus a fourth candidate with the same overall "
        "tier as one of the three but different SC/PQ, so only the sub-dimensions separate them. Sizes are filled "
        "most constrained first (4, 3, then 2 from the leftovers); for each, samples are visited in a random order "
        f"(seed {seed}), round after round, each visit forming at most one group.\n"
    )
    if warnings_:
        out += [f"> {w}\n" for w in warnings_]

    cat_counts = Counter()
    sub_counts = Counter()
    model_counts = Counter()
    for k in groups:
        for _, g in groups[k]:
            s = samples[g[0].sample_id]
            cat_counts[(s.category, f"{k}pair")] += 1
            sub_counts[(s.category, s.subtask)] += 1
            model_counts.update(c.editing_model for c in g)
    out.append("## Groups per category\n")
    splits = list(split_info)
    out.append(md_table(["category"] + splits + ["all"],
                        [[c] + [cat_counts[(c, s)] for s in splits] + [sum(cat_counts[(c, s)] for s in splits)]
                         for c in MER_CATEGORIES]) + "\n")
    out.append("## Groups per subtask\n")
    out.append(md_table(["category", "subtask", "groups"],
                        [[c, s, n] for (c, s), n in sorted(sub_counts.items())]) + "\n")
    out.append("## Edited images per editing model (in groups)\n")
    out.append(md_table(["editing model", "images"], sorted(model_counts.items(), key=lambda x: (-x[1], x[0]))) + "\n")
    tier_counts = Counter(c.tiers["overall"] for v in valid.values() for c in v)
    out.append("## Annotation summary\n")
    out.append(
        f"{len(candidates)} candidates; {sum(len(v) for v in valid.values())} with a majority in all three tiers "
        f"(overall good {tier_counts['good']}, medium {tier_counts['medium']}, poor {tier_counts['poor']}); "
        f"{len(needs_review)} need review.\n"
    )
    out.append("## Needs review\n")
    if needs_review:
        shown = needs_review[:50]
        out.append(md_table(
            ["candidate", "sample", "no majority in", "overall votes"],
            [[r["candidate_id"], r["sample_id"], ", ".join(r["dimensions"]),
              ", ".join(f"{t} {n}" for t, n in r["votes"]["overall"].items())] for r in shown],
        ) + "\n")
        if len(needs_review) > len(shown):
            out.append(f"({len(needs_review) - len(shown)} more in `needs_review.csv`.)\n")
        else:
            out.append("Also in `needs_review.csv`.\n")
    else:
        out.append("None: every candidate has a majority.\n")
    out.append("## Raw layout this dataset was built from\n")
    out.append(
        "```text\n"
        "samples.jsonl     {\"sample_id\", \"instruction\", \"original_image\", \"category\", \"subtask\"}\n"
        "candidates.jsonl  {\"candidate_id\", \"sample_id\", \"editing_model\", \"image\"}\n"
        "annotations.csv   annotator_id,candidate_id,overall,sc,pq   (good / medium / poor; 5 per candidate)\n"
        "```\n"
        "Rebuild: `miescore build-dataset mer-bench --raw RAW --out OUT` (or `python dataset_scripts/mer_bench.py "
        f"--raw RAW --out OUT`); shards are at most {format_bytes(max_shard)}. Deterministic for a given `--seed`.\n"
    )
    out.append("## License\n")
    out.append(f"`{license}` (set with `--license`).\n")
    out.append("## Citation\n")
    out.append("```bibtex\n" + CITATION + "\n```\n")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def add_cli_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the MER-Bench builder options to ``parser`` (used by ``miescore build-dataset mer-bench``)."""
    parser.add_argument("--raw", required=True, type=Path, help="raw folder (samples.jsonl, candidates.jsonl, annotations.csv, images)")
    parser.add_argument("--out", required=True, type=Path, help="output dataset folder (written atomically)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    parser.add_argument("--seed", type=int, default=0, help="group sampling seed (default: %(default)s)")
    parser.add_argument("--groups-per-type", type=int, default=DEFAULT_GROUPS_PER_TYPE,
                        help="target groups per split 2pair/3pair/4pair (default: %(default)s, as in the paper)")
    parser.add_argument("--annotators", type=int, default=5, help="annotations per candidate (default: %(default)s)")
    parser.add_argument("--min-agreement", type=int, default=3, help="votes for a majority (default: %(default)s)")
    parser.add_argument("--max-shard-bytes", type=size_arg, default=DEFAULT_MAX_SHARD_BYTES,
                        help="maximum Parquet shard size, e.g. 256MB (default: %(default)s bytes)")
    parser.add_argument("--license", default=LICENSE, help="license id for the card (default: %(default)s)")
    parser.add_argument("--push-to-hub", metavar="REPO", default=None, help="after building, upload to this Hub dataset repo (one commit)")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def run_cli(args: argparse.Namespace) -> int:
    """Run a build from parsed arguments; print a summary or a clear error; return the exit code."""
    return run_build(lambda: build_mer_bench(
        args.raw, args.out, overwrite=args.overwrite, seed=args.seed, groups_per_type=args.groups_per_type,
        n_annotators=args.annotators, min_agreement=args.min_agreement, max_shard_bytes=args.max_shard_bytes,
        license=args.license, push_to_hub=args.push_to_hub, private=True if args.private else None,
        progress=not args.no_progress,
    ))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mer_bench", description="Build the MER-Bench Parquet dataset from a raw release.")
    add_cli_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
