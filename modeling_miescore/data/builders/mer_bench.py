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

  Each size is stratified by category (``stratify_categories``, default on): its groups are split 2:1:1 over
  general / human-basic / human-fine, the ratio of the instructions (sec. 4.2). The paper does not say how the
  groups were drawn, but in 7 of its 8 Table 2 rows the Overall equals the 2:1:1-weighted mean of the category
  columns, which is what 2:1:1 groups give; a category short of samples is topped up from the others (reported).
  ``stratify_categories=False`` (``--no-stratify-categories``) samples every size from all samples at once.

Output (compatible with the authors' ``SpatialReward/MER-Bench`` release): splits ``2pair``,
``3pair``, ``4pair``; columns ``pair_id, instruction, original_image, edited_images`` (best first),
``label, sample_id`` plus ``category, subtask, num_edits`` (null when the raw release has none),
``editing_models, candidate_ids, overall_tiers, sc_tiers, pq_tiers``. ``label`` holds the editing category (``general`` / ``human_basic`` /
``human_fine``): the authors' evaluation script (``eval/MERBench/calculate_accuracy.py``) reports
accuracy per ``label`` as its category breakdown (paper Table 2).
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..schema import GROUP_SIZES, MER_SPLITS, MER_TIER_DIMENSIONS
from . import mer_bench_card
from .base import BuildSummary, BuildUsageError, DatasetBuilder
from .mer_bench_groups import category_quotas, majority_tier, sample_groups, vote
from .mer_bench_raw import CANDIDATES, read_annotations, read_candidates, read_samples
from .parquet_writing import file_size, format_bytes, image_struct
from .raw_files import ImageChecker, ProblemCollector

__all__ = [
    "MERBenchBuilder",
    "MERBenchSummary",
    "build_mer_bench",
    "majority_tier",
    "mer_bench_features",
]

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

    Options besides the common ones of :class:`~modeling_miescore.data.builders.base.DatasetBuilder`:

    * ``seed``: seed of the group sampling (same seed + same input = same groups).
    * ``groups_per_type``: target number of groups per size (paper: 200 each); an int or
      ``{2: n2, 3: n3, 4: n4}``. When the data cannot supply that many, all possible groups are kept and
      the shortfall is reported.
    * ``n_annotators``: annotations required per candidate (paper: 5); ``None`` accepts any number
      >= ``min_agreement``.
    * ``min_agreement``: votes needed for a majority (paper: 3 of 5).
    * ``stratify_categories``: groups of each size split 2:1:1 over the categories (default; see the module
      docstring).
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

    def features(self):
        return mer_bench_features()

    def make_row(self, item) -> dict:
        pair_id, group = item
        s = self.samples[group[0].sample_id]
        return {
            "pair_id": pair_id,
            "instruction": s.instruction,
            "original_image": image_struct(s.image[1], s.image[0]),
            "edited_images": [image_struct(c.image[1], c.image[0]) for c in group],
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
        return file_size(s.image[1]) + sum(file_size(c.image[1]) for c in group) + len(s.instruction.encode()) + 512

    def card_context(self, split_info: dict[str, dict]) -> dict[str, Any]:
        return mer_bench_card.card_context(
            split_info=split_info, groups=self.groups, samples=self.samples, candidates=self.candidates,
            valid=self.valid, needs_review=self.needs_review, targets=self.targets, seed=self.seed,
            min_agreement=self.min_agreement, n_annotators=self.n_annotators, stratified=self.stratify_categories,
        )

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
    """Validate a raw MER-Bench release, vote, form 2/3/4-pair groups and write the Parquet dataset.

    Args:
        raw_dir: folder with ``samples.jsonl``, ``candidates.jsonl``, ``annotations.csv`` and images.
        out_dir: output folder, written atomically.
        **options: see :class:`MERBenchBuilder` (``seed``, ``groups_per_type``, ``n_annotators``,
            ``min_agreement``, ``stratify_categories``) and the common options of
            :class:`~modeling_miescore.data.builders.base.DatasetBuilder`.

    Raises:
        DatasetValidationError: every problem of the raw release, with file and line; nothing written.
        BuildUsageError, OutputExistsError, OutputBusyError, HubPushUnavailableError, HubPushError: as for
            :func:`~modeling_miescore.data.builders.mie_bench.build_mie_bench`.
    """
    return MERBenchBuilder(raw_dir, out_dir, **options).build()
