"""The MIE-Bench dataset card: a Jinja template and the statistics it shows, computed from the built rows."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ...hub.model_card import MIESCORE_BIBTEX
from ..schema import (DIMENSION_ABBREVIATIONS, MIE_CATEGORIES, MIE_SPLITS, MOS_COLUMN_OF, SCORE_KEYS, TASK_CATEGORY,
                      TASKS)
from .output_folder import CardSpec, format_bytes, md_table

__all__ = ["CARD", "COLUMNS", "MIE_BENCH_CARD_TEMPLATE", "card_context"]

COLUMNS = {
    "id": "edit id (unique per row)",
    "instance_id": "editing instance (sources + instruction); all its edits are in the same split",
    "task": "one of the 16 MIE-Bench tasks (ClassLabel)",
    "category": "regional / global / reasoning",
    "instruction": "editing instruction",
    "source_images": "the source images, in the order the instruction refers to them",
    "num_sources": "number of source images",
    "edited_image": "the edited image",
    "editing_model": "the model that produced the edit",
    "mos_vq": "MOS, visual quality (0-100, paper eq. 1)",
    "mos_if": "MOS, instruction following (0-100)",
    "mos_ap": "MOS, attribute preservation (0-100)",
    "mos_overall": "VQ^0.3 * IF^0.4 * AP^0.3 (paper eq. 2)",
    "std_vq": "standard deviation of the raters' z-scores on the MOS scale (opinion spread), VQ",
    "std_if": "same, IF",
    "std_ap": "same, AP",
    "n_vq": "valid ratings behind mos_vq (after screening)",
    "n_if": "valid ratings behind mos_if",
    "n_ap": "valid ratings behind mos_ap",
}

# Every section of the card; the tables are rendered by card_context (Markdown, `|` escaped).
MIE_BENCH_CARD_TEMPLATE = """---
{{ card_data }}
---

# MIE-Bench

Multi-source image editing (MIE) benchmark with human mean opinion scores (MOS) on three dimensions: visual \
quality (VQ), instruction following (IF) and attribute preservation (AP), from the MIEScore paper. One row per \
edited image: the instance's source images and instruction, the edited image, the editing model and the three \
MOS (0–100) plus the overall score.

This build: **{{ n_rows }} edited images** from **{{ n_instances }} instances**, **{{ n_models }} editing \
models**, **{{ n_tasks }} of 16 tasks**. This card is generated from the data by \
`miescore build-dataset mie-bench` (`modeling_miescore.data.builders.mie_bench`).

## Usage

```python
from datasets import load_dataset

ds = load_dataset("{{ repo_id }}")  # DatasetDict: {{ splits | join(", ") }}
row = ds["{{ example_split }}"][0]
row["source_images"]  # list of PIL images
row["edited_image"]  # PIL image
ds["{{ example_split }}"].features["task"].int2str(row["task"])
stream = load_dataset("{{ repo_id }}", split="{{ example_split }}", streaming=True)
next(iter(stream))["mos_overall"]
```

## Splits

{% if split_method == "file" -%}
Splits as assigned by the split file `{{ split_file }}` given to the build (`--split-file`), e.g. a release's \
official split. All edits of an instance are in one split.
{%- elif split_method == "hash" -%}
Train/validation/test = 3:1:1 **by instance**, on average (`--split-method hash`): all edits of an instance are \
in one split, chosen by a hash bucket of the instance id alone (`sha256("{{ salt }}:" + instance_id)`, first 8 \
bytes as a fraction: < 0.6 train, < 0.8 validation, else test). The ratio holds only on average and not per \
task, but a rebuild gives the same splits and adding instances never moves existing ones.
{%- else -%}
Train/validation/test = 3:1:1 **by instance within each task** (paper, implementation details; \
`--split-method stratified`, the default): all edits of an instance are in one split. A task with n instances \
gets the whole parts of n × (3/5, 1/5, 1/5) and each split at most one of its leftover instances, so every split \
of a task is within one instance of its share; the leftovers are placed so that the whole dataset gets the \
largest-remainder rounding of N × (3/5, 1/5, 1/5) (largest fractional parts first, tasks in task-list order). \
Within a task, instances are ordered by `sha256("{{ salt }}:" + instance_id)` and assigned in that order to \
train, then validation, then test. Deterministic and independent of the order of the raw files; adding instances \
to a task can move existing ones (`--split-method hash` never moves them).
{%- endif %}

{{ split_table }}

## Columns

{{ column_table }}

Images are stored as the original files' bytes (no re-encoding); each image value also keeps the file's path \
in the raw release (the `path` field of the `Image` storage, e.g. \
`ds["{{ example_split }}"].cast_column("edited_image", Image(decode=False))[0]["edited_image"]["path"]` with \
`from datasets import Image`), not a column of its own.

## Counts per task

{{ task_table }}

{{ category_table }}

## Counts and mean MOS per editing model (best overall first)

{{ model_table }}

## Counts per number of source images

{{ sources_table }}

## MOS summary

{{ mos_summary_table }}
{%- if mos_source == "ratings" %}

MOS computation (paper, "Subjective Data Processing", eq. 1): outlier ratings and unreliable subjects are \
removed by ITU-R BT.500 screening (rule `{{ rule }}`), the remaining ratings are z-scored per subject and \
dimension, averaged per image and mapped to MOS = 100 (z + 3) / 6. Overall = VQ^0.3 · IF^0.4 · AP^0.3 (eq. 2). \
`std_*` is the spread of the raters' z-scores on the same scale; `n_*` counts the valid ratings.
{%- if valid_ratings %}

Valid ratings per image (mean): {{ valid_ratings }}.
{%- endif %}
{%- else %}

MOS were taken as given from `mos.csv` (already on the 0–100 scale); overall = VQ^0.3 · IF^0.4 · AP^0.3 \
(paper eq. 2). No screening report (no raw ratings).
{%- endif %}
{%- if screening %}

## Screening report

Rule `{{ screening.rule }}` (ITU-R BT.500 Annex 2 §2.3.1; reject when more than 5% of a subject's ratings are \
outliers{% if screening.rule == "bt500" %} and they are symmetric{% endif %}). {{ screening.n_ratings }} ratings \
from {{ screening.subject_stats | length }} subjects; {{ screening.n_outliers }} outlier ratings \
({{ outlier_percent }}%); {{ screening.rejected_subjects | length }} subject(s) rejected\
{% if screening.rejected_subjects %} ({{ screening.rejected_subjects | join(", ") }}){% endif %}; \
{{ screening.n_removed }} ratings removed in all ({{ removed_percent }}%). Full report: `screening_report.json`.

{{ subject_table }}
{%- if more_subjects %}

({{ more_subjects }} more subjects in `screening_report.json`.)
{%- endif %}
{%- for warning in screening.warnings %}

> Warning: {{ warning }}
{%- endfor %}
{%- endif %}
{%- if warnings %}

## Build notes
{% for warning in warnings %}
- {{ warning }}
{%- endfor %}
{%- endif %}

## Raw layout this dataset was built from

```text
instances.jsonl  {"instance_id", "task", "instruction", "sources": [relative image paths]}
edits.jsonl      {"edit_id", "instance_id", "editing_model", "image": relative image path}
ratings.csv      subject_id,edit_id,dimension,rating   (dimension: visual_quality |
                 instruction_following | attribute_preservation; rating in [0, 5])
  or mos.csv     edit_id,mos_vq,mos_if,mos_ap[,std_*,n_*]   (already 0-100)
```
Rebuild: `miescore build-dataset mie-bench --raw RAW --out OUT` (or \
`python dataset_scripts/build_dataset.py mie-bench --raw RAW --out OUT`); shards are at most {{ max_shard }} \
(`--max-shard-bytes`). Builds are deterministic: the same raw release gives byte-identical files (with the same \
pyarrow version, which is recorded in the Parquet footer).

## License

`{{ license }}`{% if license == default_license %} (the builder's default){% else %} (set by whoever built this \
dataset, with `--license`){% endif %}. The MIEScore paper (Ethics Statement) releases MIE-Bench's edited images, \
prompts and source images under CC BY 4.0, and its annotators consented to the use of their annotations for \
non-commercial research only. The MOS columns are made from those annotations, so builds default to CC BY-NC 4.0 \
(`{{ default_license }}`), which honours both.
"""

CARD = CardSpec(MIE_BENCH_CARD_TEMPLATE, pretty_name="MIE-Bench", citation=MIESCORE_BIBTEX, columns=COLUMNS,
                repo_placeholder="your-username/mie-bench",
                tags=("image-editing", "image-quality-assessment", "multi-source-image-editing", "mos",
                      "human-ratings", "miescore"))


_SUMMARY_COLUMNS = {MOS_COLUMN_OF[key]: key.replace("_", " ") for key in SCORE_KEYS}  # mos_vq: visual quality
_SUBJECTS_SHOWN = 100


def _fmt(v, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _quantiles(xs) -> list:
    import numpy as np

    if not xs:
        return [None] * 7
    a = np.asarray(xs, dtype=float)
    return [float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else None, float(a.min()),
            *[float(q) for q in np.quantile(a, [0.25, 0.5, 0.75])], float(a.max())]


def _collect_stats(rows_by_split: dict, mos: dict) -> dict:
    """Counts per task / model / number of sources and the MOS values, over every split."""
    per_task = defaultdict(lambda: {"instances": set(), "edits": 0, "splits": defaultdict(set)})
    per_model = defaultdict(lambda: defaultdict(list))
    per_nsrc = defaultdict(lambda: {"instances": set(), "edits": 0})
    dims = defaultdict(list)
    n_counts = defaultdict(list)
    for split, rows in rows_by_split.items():
        for inst, edit in rows:
            per_task[inst.task]["splits"][split].add(inst.instance_id)
            m = mos[edit.edit_id]
            for group in (per_task[inst.task], per_nsrc[len(inst.sources)]):
                group["instances"].add(inst.instance_id)
                group["edits"] += 1
            for key in _SUMMARY_COLUMNS:
                if m[key] is not None:
                    per_model[edit.editing_model][key].append(m[key])
                    dims[key].append(m[key])
            per_model[edit.editing_model]["count"].append(1)
            for s in DIMENSION_ABBREVIATIONS.values():
                if m[f"n_{s}"] is not None:
                    n_counts[s].append(m[f"n_{s}"])
    return {"task": per_task, "model": per_model, "nsrc": per_nsrc, "dims": dims, "n": n_counts}


def _count_tables(stats: dict) -> dict[str, str]:
    tasks = [t for t in TASKS if t in stats["task"]]
    task_rows = [[t, TASK_CATEGORY[t], len(stats["task"][t]["instances"]), stats["task"][t]["edits"],
                  *(len(stats["task"][t]["splits"][s]) for s in MIE_SPLITS)] for t in tasks]
    category_rows = []
    for c in MIE_CATEGORIES:
        in_category = [t for t in tasks if TASK_CATEGORY[t] == c]
        category_rows.append([c, sum(len(stats["task"][t]["instances"]) for t in in_category),
                              sum(stats["task"][t]["edits"] for t in in_category)])
    models = stats["model"]
    best_first = sorted(models, key=lambda m: (-(_mean(models[m]["mos_overall"]) or 0.0), m))
    return {
        "task_table": md_table(["task", "category", "instances", "edited images",
                                *(f"{s} instances" for s in MIE_SPLITS)], task_rows),
        "category_table": md_table(["category", "instances", "edited images"], category_rows),
        "model_table": md_table(
            ["editing model", "edited images", "MOS VQ", "MOS IF", "MOS AP", "overall"],
            [[m, len(models[m]["count"])] + [_fmt(_mean(models[m][k])) for k in _SUMMARY_COLUMNS] for m in best_first],
        ),
        "sources_table": md_table(["sources", "instances", "edited images"],
                                  [[k, len(v["instances"]), v["edits"]] for k, v in sorted(stats["nsrc"].items())]),
        "mos_summary_table": md_table(
            ["dimension", "mean", "std", "min", "25%", "median", "75%", "max"],
            [[name] + [_fmt(v) for v in _quantiles(stats["dims"][k])] for k, name in _SUMMARY_COLUMNS.items()],
        ),
    }


def _screening_context(screening: dict | None) -> dict[str, Any]:
    if screening is None:
        return {"screening": None}
    subjects = screening["subject_stats"]
    shown = subjects[:_SUBJECTS_SHOWN]
    return {
        "screening": screening,
        "outlier_percent": f"{100 * screening['outlier_fraction']:.2f}",
        "removed_percent": f"{100 * screening['removed_fraction']:.2f}",
        "subject_table": md_table(
            ["subject", "ratings", "P", "Q", "(P+Q)/n", "|P−Q|/(P+Q)", "rejected"],
            [[s["subject"], s["n"], s["P"], s["Q"], _fmt(s["ratio"], 3), _fmt(s["asymmetry"], 2),
              "yes" if s["rejected"] else ""] for s in shown],
        ),
        "more_subjects": len(subjects) - len(shown),
    }


def card_context(build, split_info: dict) -> dict[str, Any]:
    """The variables of :data:`MIE_BENCH_CARD_TEMPLATE` for a :class:`~.mie_bench.MIEBenchBuilder` that has
    labelled and split its rows (besides the shared ``repo_id``, ``splits``, ``license``, ``max_shard`` and
    ``warnings``)."""
    stats = _collect_stats(build.rows_by_split, build.mos)
    return {
        "example_split": "test" if "test" in split_info else next(iter(split_info)),
        "split_method": build.split_method,
        "split_file": build.split_file.name if build.split_file else None,
        "n_rows": sum(v["num_examples"] for v in split_info.values()),
        "n_instances": sum(v["num_instances"] for v in split_info.values()),
        "n_models": len(stats["model"]),
        "n_tasks": len(stats["task"]),
        "salt": build.split_salt,
        "split_table": md_table(
            ["split", "instances", "edited images", "shards", "Parquet size"],
            [[k, v["num_instances"], v["num_examples"], len(v["files"]), format_bytes(v["file_bytes"])]
             for k, v in split_info.items()],
        ),
        **_count_tables(stats),
        "mos_source": build.source,
        "rule": build.rule,
        "valid_ratings": ", ".join(f"{s.upper()} {_fmt(_mean(v), 1)}" for s, v in stats["n"].items()),
        **_screening_context(build.screening),
    }
