"""The MER-Bench dataset card (a Jinja template and its statistics) and the ``needs_review.csv`` report."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

from ...hub.model_card import SPATIALREWARD_BIBTEX
from ..schema import MER_CATEGORIES, MER_TIER_DIMENSIONS
from .output_folder import CardSpec, format_bytes, md_table

__all__ = ["CARD", "COLUMNS", "MER_BENCH_CARD_TEMPLATE", "card_context", "write_needs_review"]

COLUMNS = {
    "pair_id": "group id (`<sample_id>-<K>p<j>`)",
    "instruction": "multi-operation editing instruction",
    "original_image": "the image that was edited",
    "edited_images": "the K candidate edits, **best first** (ground-truth order)",
    "label": "editing category (general / human_basic / human_fine), as the authors' eval script groups it",
    "sample_id": "sample (original image + instruction) the group comes from",
    "category": "same as `label`",
    "subtask": "fine-grained subtask",
    "num_edits": "operations in the instruction (2-5 in the paper; null when the raw release has none)",
    "editing_models": "model of each edited image (same order)",
    "candidate_ids": "raw candidate id of each edited image (same order)",
    "overall_tiers": "majority overall tier of each edited image",
    "sc_tiers": "majority semantic-consistency tier",
    "pq_tiers": "majority perceptual-quality tier",
}

MER_BENCH_CARD_TEMPLATE = """---
{{ card_data }}
---

# MER-Bench (MultiEditReward-Bench)

K-pair ranking benchmark for image-editing reward models (SpatialReward paper, section 4): each row is a group of \
K edits of the same image and multi-operation instruction, **ordered best first** by human tiers. A reward model \
gets a group right only if its scores reproduce that order exactly.

This build: **{{ n_groups }} groups** ({{ n_images }} edited images) from {{ n_samples }} samples and \
{{ n_candidates }} annotated candidates. Generated from the data by `miescore build-dataset mer-bench` \
(`modeling_miescore.data.builders.mer_bench`).

## Usage

```python
from datasets import load_dataset

ds = load_dataset("{{ repo_id }}")  # DatasetDict: {{ splits | join(", ") }}
group = ds["{{ splits[0] }}"][0]
group["original_image"], group["edited_images"]  # PIL image, list of PIL images (best first)
```

## Splits

{{ split_table }}

## Columns

{{ column_table }}

Compatible with the authors' `SpatialReward/MER-Bench` (same splits and the columns `pair_id, instruction, \
original_image, edited_images, label, sample_id`); the other columns are additions. `label` holds the editing \
category: the authors' `calculate_accuracy.py` reports per-`label` accuracy as its category breakdown (paper \
Table 2: General / Human-Basic / Human-Fine).

## How the groups are built

1. **Majority vote** (appendix A.1): each of overall, SC (semantic consistency) and PQ (perceptual quality) takes \
the tier named by at least {{ min_agreement }} of the {{ n_annotators or "N" }} annotators. A candidate without a \
majority in any of them is excluded and listed under *Needs review* below.
2. **Ranking** (section 4.3): overall tier first, SC then PQ to break ties (good > medium > poor); two candidates \
with identical tiers never share a group.
3. **Groups**, within one sample, each candidate used at most once: 2-pair = two different overall tiers; 3-pair = \
one good, one medium, one poor; 4-pair = a 3-pair plus a fourth candidate with the same overall tier as one of the \
three but different SC/PQ, so only the sub-dimensions separate them. Sizes are filled most constrained first (4, \
3, then 2 from the leftovers); for each, samples are visited in a random order (seed {{ seed }}), round after \
round, each visit forming at most one group.{% if stratified %} Each size is **stratified by category**: its \
groups are split 2:1:1 over general / human-basic / human-fine (the instructions' ratio, section 4.2; the paper's \
Table 2 Overall is the 2:1:1-weighted category mean in 7 of 8 rows), each category's samples filling its share \
first (`--no-stratify-categories` turns this off).{% else %} Groups are drawn from all samples at once \
(`--no-stratify-categories`), not 2:1:1 by category.{% endif %}
{%- for warning in warnings %}

> {{ warning }}
{%- endfor %}

## Groups per category

{{ category_table }}

## Groups per subtask

{{ subtask_table }}

## Edited images per editing model (in groups)

{{ model_table }}

## Annotation summary

{{ n_candidates }} candidates; {{ n_valid }} with a majority in all three tiers (overall good \
{{ overall_tiers.good }}, medium {{ overall_tiers.medium }}, poor {{ overall_tiers.poor }}); \
{{ needs_review | length }} need review.

## Needs review

{% if needs_review -%}
{{ review_table }}

{% if more_reviews %}({{ more_reviews }} more in `needs_review.csv`.){% else %}Also in `needs_review.csv`.{% endif %}
{%- else -%}
None: every candidate has a majority.
{%- endif %}

## Raw layout this dataset was built from

```text
samples.jsonl     {"sample_id", "instruction", "original_image", "category", "subtask"}
candidates.jsonl  {"candidate_id", "sample_id", "editing_model", "image"}
annotations.csv   annotator_id,candidate_id,overall,sc,pq   (good / medium / poor; 5 per candidate)
```
Rebuild: `miescore build-dataset mer-bench --raw RAW --out OUT` (or \
`python dataset_scripts/build_dataset.py mer-bench --raw RAW --out OUT`); shards are at most {{ max_shard }}. \
Deterministic for a given `--seed`.

## License

`{{ license }}`{% if license == default_license %} (the builder's default){% else %} (set by whoever built this \
dataset, with `--license`){% endif %}. The SpatialReward paper states no license for MER-Bench, so a build \
does not claim one: `{{ default_license }}` means that the terms are those of the raw release it was built \
from. Rebuild with `--license` set to those terms before publishing.
"""

CARD = CardSpec(MER_BENCH_CARD_TEMPLATE, pretty_name="MER-Bench (MultiEditReward-Bench)",
                citation=SPATIALREWARD_BIBTEX, columns=COLUMNS, repo_placeholder="your-username/mer-bench",
                tags=("image-editing", "reward-model", "preference", "ranking", "human-ratings", "spatialreward"))


_REVIEWS_SHOWN = 50


def _group_tables(groups: dict[int, list], samples: dict, splits: list[str]) -> dict[str, str]:
    per_category, per_subtask, per_model = Counter(), Counter(), Counter()
    for k, items in groups.items():
        for _, group in items:
            s = samples[group[0].sample_id]
            per_category[(s.category, f"{k}pair")] += 1
            per_subtask[(s.category, s.subtask)] += 1
            per_model.update(c.editing_model for c in group)
    return {
        "category_table": md_table(
            ["category"] + splits + ["all"],
            [[c] + [per_category[(c, s)] for s in splits] + [sum(per_category[(c, s)] for s in splits)]
             for c in MER_CATEGORIES],
        ),
        "subtask_table": md_table(["category", "subtask", "groups"],
                                  [[c, s, n] for (c, s), n in sorted(per_subtask.items())]),
        "model_table": md_table(["editing model", "images"], sorted(per_model.items(), key=lambda x: (-x[1], x[0]))),
    }


def card_context(build, split_info: dict) -> dict[str, Any]:
    """The variables of :data:`MER_BENCH_CARD_TEMPLATE` for a :class:`~.mer_bench.MERBenchBuilder` that has voted
    and formed its groups."""
    groups, samples, valid, needs_review = build.groups, build.samples, build.valid, build.needs_review
    shown = needs_review[:_REVIEWS_SHOWN]
    return {
        "n_groups": sum(v["num_examples"] for v in split_info.values()),
        "n_images": sum(len(g) for items in groups.values() for _, g in items),
        "n_samples": len(samples),
        "n_candidates": len(build.candidates),
        "n_valid": sum(len(v) for v in valid.values()),
        "overall_tiers": Counter(c.tiers["overall"] for v in valid.values() for c in v),
        "split_table": md_table(
            ["split", "groups", "target", "shards", "Parquet size"],
            [[k, v["num_examples"], build.targets.get(int(k[0]), "–"), len(v["files"]), format_bytes(v["file_bytes"])]
             for k, v in split_info.items()],
        ),
        **_group_tables(groups, samples, list(split_info)),
        "needs_review": needs_review,
        "review_table": md_table(
            ["candidate", "sample", "no majority in", "overall votes"],
            [[r["candidate_id"], r["sample_id"], ", ".join(r["dimensions"]),
              ", ".join(f"{t} {n}" for t, n in r["votes"]["overall"].items())] for r in shown],
        ),
        "more_reviews": len(needs_review) - len(shown),
        "seed": build.seed,
        "min_agreement": build.min_agreement,
        "n_annotators": build.n_annotators,
        "stratified": build.stratify_categories,
    }


def write_needs_review(path: Path, needs_review: list) -> None:
    """``needs_review.csv``: the candidates without a majority, with their votes per dimension."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["candidate_id", "sample_id", "dimensions", *(f"{d}_votes" for d in MER_TIER_DIMENSIONS)])
        for r in needs_review:
            votes = [";".join(f"{t}={n}" for t, n in r["votes"][d].items()) for d in MER_TIER_DIMENSIONS]
            writer.writerow([r["candidate_id"], r["sample_id"], ";".join(r["dimensions"]), *votes])
