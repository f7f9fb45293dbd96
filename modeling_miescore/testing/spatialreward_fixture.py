"""A synthetic, offline SpatialReward training fixture (test data, not a training set): raw rows in the schema of
:mod:`modeling_miescore.data.spatialreward_chat_examples`, made from the scikit-image photos of
:func:`example_edits`, with a few deliberately broken interleavings (:data:`BAD_KINDS`).

The boxes, reasonings and scores are synthetic (they describe the composed edits only roughly); they exist to
exercise data preparation, the interleaving check and the training recipes, not to teach a model anything.
:func:`write_spatialreward_dataset` writes them as a Parquet dataset folder for the tiny CPU recipes.
"""

from __future__ import annotations

import random
from typing import Optional

from ..data.example_edits import example_edits

# Instructions for single-source variants of the examples (the originals refer to "image 2").
_SINGLE_SOURCE_INSTRUCTIONS = {
    "cat-coffee": "Add a cat sitting on the table next to the coffee cup.",
    "astronaut-rocket": "Add an astronaut standing in front of the rocket launch.",
    "cat-astronaut-coffee": "Add a cat and an astronaut sitting at the coffee table.",
    "cat-coffee-failed": "Add a cat sitting on the table next to the coffee cup.",
    "camera-palette": "Recolour the photo with a warm sepia palette.",
}
_LABELS = ["cat", "astronaut", "coffee cup", "table surface", "rocket plume", "sky"]

# Deliberately broken interleavings and the check's issue code for each (appendix D.2.3 rules).
BAD_KINDS = (
    "missing_global_token",        # single-source SC without <|global|>
    "bbox_token_without_region",   # cites <|bbox_5|> but there is no region 5
    "region_without_bbox_token",   # region 1 is never cited
    "global_token_repeated",       # <|global|> twice
    "unexpected_grounding_token",  # a PQ reasoning with a <|bbox_0|> token
)


def _boxes(rng: random.Random, k: int) -> list[list[int]]:
    boxes = []
    for _ in range(k):
        x1, y1 = rng.randrange(0, 600), rng.randrange(0, 600)
        boxes.append([x1, y1, x1 + rng.randrange(80, 400), y1 + rng.randrange(80, 400)])
    return boxes


def _sc_row(example: dict, rng: random.Random, single: bool, bad: Optional[str], index: int) -> dict:
    sources = example["sources"][:1] if single else list(example["sources"])
    instruction = _SINGLE_SOURCE_INSTRUCTIONS.get(example["id"], example["instruction"]) if single \
        else example["instruction"]
    failed = "failed" in example["id"]
    k = 0 if failed else (1 if single else min(2, len(sources) - 1))
    if bad in ("bbox_token_without_region", "region_without_bbox_token"):
        k = max(k, 2)
    regions = [{"id": i, "label": _LABELS[(index + i) % len(_LABELS)], "bbox_2d": box}
               for i, box in enumerate(_boxes(rng, k))]
    cited = regions[:1] if bad == "region_without_bbox_token" else regions
    parts = [f"<|bbox_{r['id']}|> The {r['label']} appears where the instruction asks." for r in cited]
    if bad == "bbox_token_without_region":
        parts.append("<|bbox_5|> Something else changed.")
    if failed:
        parts.append("The requested element is missing and the scene is blurred.")
    use_global = single or rng.random() < 0.5  # D.1.2 (several sources) does not require <|global|>
    if bad == "missing_global_token":
        use_global = False
    if use_global:
        parts.append("<|global|> The rest of the scene is preserved with minor changes.")
    if bad == "global_token_repeated":
        parts.append("<|global|> Lighting is consistent.")
    s_if = 3.0 if failed else float(rng.randrange(14, 25))
    s_con = float(rng.randrange(8, 25))
    return {"id": f"sc-{index}-{example['id']}", "task": "sc", "sources": sources, "edited": example["edited"],
            "instruction": instruction, "regions": regions, "reasoning": " ".join(parts),
            "scores": [s_if, s_con], "expected_drop": bad}


def _pq_row(example: dict, rng: random.Random, bad: Optional[str], index: int) -> dict:
    blurred = "failed" in example["id"]
    reasoning = ("The image is blurred overall but free of distortions." if blurred
                 else "Lighting and shadows are plausible; the pasted subject has slightly soft edges.")
    if bad == "unexpected_grounding_token":
        reasoning = "<|bbox_0|> " + reasoning
    return {"id": f"pq-{index}-{example['id']}", "task": "pq", "sources": [], "edited": example["edited"],
            "instruction": "", "regions": [], "reasoning": reasoning,
            "scores": [float(rng.randrange(10, 25)), float(rng.randrange(10, 25))], "expected_drop": bad}


def make_spatialreward_sft_rows(n: int = 12, seed: int = 0, num_bad: Optional[int] = None,
                                max_side: int = 96) -> list[dict]:
    """``n`` training rows cycling through single-source SC, multi-source SC and PQ rows.

    ``num_bad`` rows (default ``n // 4``, at most ``len(BAD_KINDS)`` distinct kinds, cycled) carry a broken
    interleaving; their ``expected_drop`` field holds the issue code the interleaving check must report
    (None for good rows). ``max_side`` bounds the image sides. Deterministic for a given ``seed``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    examples = example_edits(max_side=max_side)
    num_bad = n // 4 if num_bad is None else num_bad
    if not 0 <= num_bad <= n:
        raise ValueError(f"num_bad must be in [0, n], got {num_bad}")
    bad_at = dict(zip(sorted(rng.sample(range(n), num_bad)), (BAD_KINDS[i % len(BAD_KINDS)]
                                                            for i in range(num_bad))))
    rows = []
    for index in range(n):
        example = examples[index % len(examples)]
        bad = bad_at.get(index)
        # The row kind follows the defect it must carry; good rows cycle sc-single, sc-multi, pq.
        if bad == "unexpected_grounding_token":
            kind = "pq"
        elif bad in ("missing_global_token", "global_token_repeated"):
            kind = "sc-single"
        elif bad is not None:
            kind = "sc-multi"
        else:
            kind = ("sc-single", "sc-multi", "pq")[index % 3]
        if kind == "pq":
            rows.append(_pq_row(example, rng, bad, index))
        else:
            rows.append(_sc_row(example, rng, kind == "sc-single", bad, index))
    return rows


def write_spatialreward_dataset(path, n: int = 12, seed: int = 0, num_bad: Optional[int] = None,
                                max_side: int = 96):
    """Write :func:`make_spatialreward_sft_rows` as a Parquet dataset folder (``load_dataset(path)`` -> split
    ``train``), e.g. for ``trainers/configs/*_tiny_cpu.yaml``. Returns the folder path."""
    from pathlib import Path

    from datasets import Dataset

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    rows = make_spatialreward_sft_rows(n, seed=seed, num_bad=num_bad, max_side=max_side)
    for row in rows:
        row["expected_drop"] = row["expected_drop"] or ""  # a string column, not an all-null one
    Dataset.from_list(rows).to_parquet(str(folder / "train-00000-of-00001.parquet"))
    return folder
