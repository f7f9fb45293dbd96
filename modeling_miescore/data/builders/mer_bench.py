"""MER-Bench (MultiEditReward-Bench) builder: tiered annotations -> K-pair ranking groups as Parquet.

Raw layout (paths relative to the raw folder; extra keys/columns/files are ignored)::

    samples.jsonl     {"sample_id": str, "instruction": str, "original_image": relative image path,
                       "category": "general" | "human_basic" | "human_fine", "subtask": str,
                       "num_edits": int (optional: the instruction's operations, 2-5 in the paper)}
    candidates.jsonl  {"candidate_id": str, "sample_id": str, "editing_model": str,
                       "image": relative image path}
    annotations.csv   annotator_id,candidate_id,overall,sc,pq
                      one row per annotator and candidate; tiers good / medium / poor
                      ("bad" is read as poor); 5 annotators per candidate

Construction (SpatialReward paper, section 4.3 and appendix A.1): each of overall / SC / PQ takes the tier chosen
by at least ``min_agreement`` (3) of the 5 annotators, a candidate without such a majority being listed as *needs
review*; candidates rank by overall tier, then SC, then PQ, and two with the same (overall, SC, PQ) never share a
group. Groups, within one sample, each candidate used at most once, drawn with ``seed``: ``2pair`` (two overall
tiers), ``3pair`` (good, medium, poor), ``4pair`` (a 3-pair plus a candidate of the same overall tier as one member
but a different (SC, PQ)). Each size is split 2:1:1 over general / human-basic / human-fine
(``stratify_categories``; the reasons are in ``docs/fidelity.md``), a short category topped up from the others.

Output (compatible with the authors' ``SpatialReward/MER-Bench`` release): splits ``2pair``, ``3pair``, ``4pair``;
columns :data:`.mer_bench_card.COLUMNS` (``edited_images`` best first; ``label`` holds the editing category, by
which the authors' ``eval/MERBench/calculate_accuracy.py`` reports accuracy).
"""

from __future__ import annotations

import argparse
import os
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Callable

from ..schema import GROUP_SIZES, MER_CATEGORIES, MER_SPLITS, MER_TIER_DIMENSIONS, TIERS
from . import mer_bench_card
from .base import BuildSummary, BuildUsageError, DatasetBuilder
from .output_folder import format_bytes
from .raw_files import (ImageChecker, ImageRef, ProblemCollector, RecordCheck, read_csv, read_edited_images,
                        read_jsonl, unique_records)
from .mie_bench_split import stratified_counts

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
    image: ImageRef
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
    image: ImageRef
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
        image = check.image(obj["original_image"], f"sample {sid!r}, original_image")
        if check.ok:
            out[sid] = Sample(sid, obj["instruction"], image, category, subtask.strip(), line, len(out), num_edits)
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


CATEGORY_RATIO = (2, 1, 1)  # sec. 4.2: general : human-basic : human-fine


def majority_tier(votes, min_agreement: int = 3) -> str | None:
    """The tier named by at least ``min_agreement`` votes, else ``None`` (paper A.1: >= 3 of 5)."""
    counts = Counter(votes)
    best = [t for t, c in counts.items() if c >= min_agreement]
    return best[0] if len(best) == 1 else None


def vote(candidates: dict[str, Candidate], sample_ids, min_agreement: int) -> tuple[dict, list]:
    """Set each candidate's majority ``tiers``; returns ``(valid candidates per sample, needs review)``.

    A candidate without a majority in some dimension is left out of the groups and listed for review
    (the paper sends it to expert review) with its votes; the valid ones are sorted by id.
    """
    needs_review = []
    valid: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates.values():
        c.tiers = {d: majority_tier(v, min_agreement) for d, v in c.votes.items()}
        missing = [d for d, t in c.tiers.items() if t is None]
        if missing:
            needs_review.append({
                "candidate_id": c.candidate_id, "sample_id": c.sample_id, "dimensions": missing,
                "votes": {d: dict(sorted(Counter(c.votes[d]).items())) for d in MER_TIER_DIMENSIONS},
            })
        elif c.sample_id in sample_ids:
            valid[c.sample_id].append(c)
    for group in valid.values():
        group.sort(key=lambda c: c.candidate_id)
    return valid, needs_review


def _four_pairs(bases: list[tuple], cands: list[Candidate]) -> list[tuple]:
    """A 3-pair base plus a candidate with the overall tier of one base member but a different (SC, PQ)."""
    out = []
    for base in bases:
        used = {c.candidate_id for c in base}
        for x in cands:
            if x.candidate_id in used:
                continue
            twin = base[2 - x.key[0]]  # the base member with the same overall tier
            if x.key != twin.key:
                out.append(base + (x,))
    return out


def groups_for(cands: list[Candidate], k: int) -> list[tuple]:
    """Every valid k-group among ``cands`` (sorted by id), each ordered best first."""
    if k not in (2, 3, 4):
        raise ValueError(f"group size must be 2, 3 or 4, got {k}")
    if k == 2:  # two different overall tiers
        out = [(a, b) for a, b in combinations(cands, 2) if a.key[0] != b.key[0]]
    else:  # one good, one medium, one poor (overall tier)
        by_tier = defaultdict(list)
        for c in cands:
            by_tier[c.key[0]].append(c)
        out = [(g, m, p) for g in by_tier[2] for m in by_tier[1] for p in by_tier[0]]
        if k == 4:
            out = _four_pairs(out, cands)
    return [tuple(sorted(g, key=lambda c: c.key, reverse=True)) for g in out]


def category_quotas(target: int) -> dict[str, int]:
    """``target`` groups split 2:1:1 over general / human-basic / human-fine (paper sec. 4.2, the ratio of the
    instructions; Table 2's Overall is the 2:1:1-weighted category mean in 7 of 8 rows), largest remainders."""
    return dict(zip(MER_CATEGORIES, stratified_counts([target], CATEGORY_RATIO)[0]))


def sample_groups(by_sample: dict[str, list[Candidate]], sample_order: list[str], targets: dict[int, int], seed: int,
                  categories: dict[str, str] | None = None):
    """Sample up to ``targets[k]`` groups of each size; each candidate is used at most once.

    Sizes are filled most constrained first (4, 3, 2); samples are visited in a seeded random order, round after
    round, each visit forming at most one group chosen uniformly among its valid groups of unused candidates. With
    ``categories`` (``{sample_id: category}``) each category fills its 2:1:1 quota (:func:`category_quotas`) first,
    the others then fill what is left. Deterministic. Returns ``{k: [(pair_id, group), ...]}``.
    """
    rng = random.Random(seed)
    order = list(sample_order)
    rng.shuffle(order)
    used: set[str] = set()
    groups: dict[int, list[tuple[str, tuple]]] = {k: [] for k in targets}
    counters: dict[tuple[str, int], int] = Counter()

    def fill(k: int, samples: list[str], limit: int) -> None:
        formed = True
        while formed and len(groups[k]) < limit:
            formed = False
            for sid in samples:
                if len(groups[k]) >= limit:
                    break
                options = groups_for([c for c in by_sample.get(sid, []) if c.candidate_id not in used], k)
                if not options:
                    continue
                group = options[rng.randrange(len(options))]
                used.update(c.candidate_id for c in group)
                groups[k].append((f"{sid}-{k}p{counters[(sid, k)]}", group))
                counters[(sid, k)] += 1
                formed = True

    for k in sorted(targets, reverse=True):
        if categories is not None:
            for category, quota in category_quotas(targets[k]).items():
                fill(k, [sid for sid in order if categories.get(sid) == category], len(groups[k]) + quota)
        fill(k, order, targets[k])
    return groups


DEFAULT_GROUPS_PER_TYPE = 200  # paper 4.3: 200 groups of each size
# The SpatialReward paper states no license for MER-Bench: a build does not invent one ("unknown" is the Hub's id
# for unstated terms); whoever builds it sets the terms of their raw release with `license`.
LICENSE = "unknown"


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
            "num_edits": Value("int32"),
            **{name: List(Value("string"))
               for name in ("editing_models", "candidate_ids", *(f"{d}_tiers" for d in MER_TIER_DIMENSIONS))},
        }
    )


@dataclass(kw_only=True)
class MERBenchSummary(BuildSummary):
    """What a MER-Bench build produced."""

    dataset = "mer-bench"
    num_groups: int = 0
    num_samples: int = 0
    num_candidates: int = 0
    num_valid_candidates: int = 0
    needs_review: list = field(default_factory=list)  # [{"candidate_id", "sample_id", "dimensions", "votes"}]
    shortfall: dict = field(default_factory=dict)  # split -> missing groups vs target

    def headline(self) -> str:
        parts = ", ".join(f"{k} {v['num_examples']}" for k, v in self.splits.items())
        return (f"MER-Bench written to {self.out_dir}: {self.num_groups} groups ({parts}) from {self.num_samples} "
                f"samples; {self.num_valid_candidates}/{self.num_candidates} candidates with a majority; "
                f"{format_bytes(self.total_bytes)} in {self.elapsed_s:.1f} s")

    def details(self) -> list[str]:
        if not self.needs_review:
            return []
        ids = [r["candidate_id"] for r in self.needs_review]
        return [f"needs review ({len(ids)} without a 3-of-5 majority): {', '.join(ids[:20])}"
                + (" ..." if len(ids) > 20 else "") + " (see needs_review.csv)"]


def _group_targets(groups_per_type: int | dict) -> dict[int, int]:
    if isinstance(groups_per_type, int):
        targets = {k: groups_per_type for k in GROUP_SIZES}
    else:
        targets = {int(k): int(v) for k, v in dict(groups_per_type).items()}
        bad = [k for k in targets if k not in GROUP_SIZES]
        if bad:
            raise BuildUsageError(f"groups_per_type keys must be 2, 3 or 4, got {bad}")
    if any(v < 0 for v in targets.values()):
        raise BuildUsageError("groups_per_type must be >= 0")
    return targets


class MERBenchBuilder(DatasetBuilder):
    """Validate a raw MER-Bench release, vote, form 2/3/4-pair groups and write the Parquet dataset.

    Options besides the common ones of :class:`~.base.DatasetBuilder`: ``seed`` (same seed + input = same
    groups), ``groups_per_type`` (per size, paper 200; an int or ``{2: n2, 3: n3, 4: n4}``; a shortfall is
    reported), ``n_annotators`` (per candidate, paper 5; ``None``: any number >= ``min_agreement``),
    ``min_agreement`` (paper 3 of 5) and ``stratify_categories`` (2:1:1 over the categories, default).
    """

    title = "MER-Bench"
    raw_help = "raw folder (samples.jsonl, candidates.jsonl, annotations.csv, images)"
    default_license = LICENSE
    license_help = ("license id for the card (default: %(default)s, since the SpatialReward paper states none; set "
                    "the terms of your raw release before publishing)")
    split_names = MER_SPLITS
    card = mer_bench_card.CARD
    # How `miescore benchmark reward` scores a build (as a converter's spec declares it, ``BenchmarkSpec``): the
    # K-pair protocol (``mer`` of :data:`modeling_miescore.evaluation.benchmark_protocols.PROTOCOLS`, computed by
    # :mod:`modeling_miescore.evaluation.mer_bench_report`) and the SpatialReward paper's Table 1
    # columns it fills with that protocol's values; mer_tau_ties0 (predicted ties count 0) is our extra column.
    protocol = "mer"
    columns = {"reward": {"mer_2p": "2", "mer_3p": "3", "mer_4p": "4", "mer_ovrl": "overall",
                          "mer_tau": "tau_as_released", "mer_tau_ties0": "tau_ties0"}}
    column_headers = {"mer_tau": "MER-Bench τ (tie +1, as released)", "mer_tau_ties0": "τ (tie 0)"}

    def __init__(self, raw_dir, out_dir, *, seed: int = 0, groups_per_type: int | dict = DEFAULT_GROUPS_PER_TYPE,
                 n_annotators: int | None = 5, min_agreement: int = 3, stratify_categories: bool = True, **common):
        super().__init__(raw_dir, out_dir, **common)
        self.stratify_categories = stratify_categories
        self.targets = _group_targets(groups_per_type)
        if n_annotators is not None and not 1 <= min_agreement <= n_annotators:
            raise BuildUsageError(f"min_agreement must be in 1..n_annotators, got {min_agreement}")
        if n_annotators is not None and 2 * min_agreement <= n_annotators:
            raise BuildUsageError(f"min_agreement={min_agreement} is not a majority of n_annotators={n_annotators}")
        self.seed, self.n_annotators, self.min_agreement = seed, n_annotators, min_agreement

    # ------------------------------------------------------------------ read -> validate

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        bar = self.progress_bar
        self.samples, declared_samples = read_samples(self.raw, problems, images, bar)
        self.candidates, declared_candidates = read_candidates(self.raw, problems, images, declared_samples, bar)
        self.n_annotations = read_annotations(self.raw, problems, self.candidates, declared_candidates, bar)

    def validate(self, problems: ProblemCollector) -> None:
        """Every candidate has the expected number of annotations (enough for a majority).

        (An unusable annotations file is already reported; nothing to count against it.)
        """
        if self.n_annotations is None:
            return
        for c in self.candidates.values():
            n = len(c.votes["overall"])
            if self.n_annotators is not None and n != self.n_annotators:
                problems.add(CANDIDATES, c.line, f"candidate {c.candidate_id!r} has {n} annotation(s) in "
                                                 f"annotations.csv, expected {self.n_annotators}")
            elif n < self.min_agreement:
                problems.add(CANDIDATES, c.line, f"candidate {c.candidate_id!r} has {n} annotation(s); a majority "
                                                 f"needs at least {self.min_agreement}")

    # ------------------------------------------------------------------ labels -> split

    def label(self) -> None:
        self.valid, self.needs_review = vote(self.candidates, self.samples, self.min_agreement)

    def split(self) -> dict[str, list]:
        """``(pair_id, group)`` rows per split (``<K>pair``), in sample-file order, then group number."""
        sample_order = [s.sample_id for s in self.samples.values()]
        categories = ({s.sample_id: s.category for s in self.samples.values()} if self.stratify_categories
                      else None)
        self.groups = sample_groups(self.valid, sample_order, self.targets, self.seed, categories)
        if categories is not None:
            self._check_category_quotas()
        self.shortfall = {f"{k}pair": n - len(self.groups[k]) for k, n in self.targets.items()
                          if len(self.groups[k]) < n}
        if self.shortfall:
            self.warnings.append(
                "fewer groups than requested: " + ", ".join(f"{s} {n} short" for s, n in self.shortfall.items())
                + " (not enough annotated candidates with the required tiers)"
            )
        for items in self.groups.values():
            items.sort(key=lambda item: (self.samples[item[1][0].sample_id].order, item[0]))
        return {f"{k}pair": items for k, items in self.groups.items()}

    def _check_category_quotas(self) -> None:
        """A warning per size whose groups are not 2:1:1 over the categories (too few samples of one)."""
        for k, items in self.groups.items():
            got = Counter(self.samples[group[0].sample_id].category for _, group in items)
            want = category_quotas(len(items))
            if any(got.get(c, 0) != n for c, n in want.items()):
                self.warnings.append(
                    f"{k}pair groups are not 2:1:1 over the categories: " + ", ".join(
                        f"{c} {got.get(c, 0)} (2:1:1: {n})" for c, n in want.items())
                    + " (too few samples with groups of one category; the others filled the rest)")

    def empty_dataset_problem(self) -> tuple[str, str]:
        return "annotations.csv", ("no valid group can be formed (need candidates of different majority tiers "
                                   "within a sample)")

    # ------------------------------------------------------------------ write -> card

    def features(self, split=None):
        return mer_bench_features()

    def make_row(self, item) -> dict:
        pair_id, group = item
        s = self.samples[group[0].sample_id]
        return {
            "pair_id": pair_id,
            "instruction": s.instruction,
            "original_image": s.image.struct(),
            "edited_images": [c.image.struct() for c in group],
            "label": s.category,
            "sample_id": s.sample_id,
            "category": s.category,
            "subtask": s.subtask,
            "num_edits": s.num_edits,
            "editing_models": [c.editing_model for c in group],
            "candidate_ids": [c.candidate_id for c in group],
            **{f"{d}_tiers": [c.tiers[d] for c in group] for d in MER_TIER_DIMENSIONS},
        }

    def row_size(self, item) -> int:
        _, group = item
        s = self.samples[group[0].sample_id]
        return sum(image.size() for image in (s.image, *(c.image for c in group))) + len(s.instruction.encode()) + 512

    def card_context(self, split_info: dict[str, dict]) -> dict[str, Any]:
        return mer_bench_card.card_context(self, split_info)

    def write_extra_files(self, folder: Path) -> None:
        mer_bench_card.write_needs_review(folder / "needs_review.csv", self.needs_review)

    def summary(self, split_info: dict[str, dict]) -> MERBenchSummary:
        keys = ("num_examples", "files", "num_bytes", "file_bytes")
        return MERBenchSummary(
            out_dir=str(self.out),
            splits={k: {kk: v[kk] for kk in keys} for k, v in split_info.items()},
            num_groups=sum(len(v) for v in self.groups.values()),
            num_samples=len(self.samples),
            num_candidates=len(self.candidates),
            num_valid_candidates=sum(len(v) for v in self.valid.values()),
            needs_review=self.needs_review,
            shortfall=self.shortfall,
        )

    # ------------------------------------------------------------------ command line

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seed", type=int, default=0, help="group sampling seed (default: %(default)s)")
        parser.add_argument("--groups-per-type", type=int, default=DEFAULT_GROUPS_PER_TYPE,
                            help="target groups per split 2pair/3pair/4pair (default: %(default)s, as in the paper)")
        parser.add_argument("--annotators", dest="n_annotators", type=int, default=5,
                            help="annotations per candidate (default: %(default)s)")
        parser.add_argument("--min-agreement", type=int, default=3, help="votes for a majority (default: %(default)s)")
        parser.add_argument("--no-stratify-categories", dest="stratify_categories", action="store_false",
                            help="sample the groups of each size from all samples at once instead of 2:1:1 over "
                                 "general / human-basic / human-fine (the default)")


def build_mer_bench(raw_dir: str | os.PathLike, out_dir: str | os.PathLike, **options) -> MERBenchSummary:
    """Validate a raw MER-Bench release, vote, form 2/3/4-pair groups and write the Parquet dataset to ``out_dir``.
    ``options``: :class:`MERBenchBuilder`'s and the common ones of :class:`~.base.DatasetBuilder`; errors as
    :meth:`~.base.DatasetBuilder.build` raises them."""
    return MERBenchBuilder(raw_dir, out_dir, **options).build()


__all__ = ["CATEGORY_RATIO", "Candidate", "MERBenchBuilder", "MERBenchSummary", "Sample", "TIER_RANK",
           "build_mer_bench", "category_quotas", "groups_for", "majority_tier", "mer_bench_features",
           "read_annotations", "read_candidates", "read_samples", "sample_groups", "vote"]
