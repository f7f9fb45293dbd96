"""A synthetic raw MER-Bench release: one photo + multi-operation instruction, 6 tiered candidates, 5 annotators.

SpatialReward paper, section 4 and appendix A.1; a few candidates are planted without a 3-of-5 majority.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from ...data.mer_construction.instruction_prompts import MER_SUBTASKS as _SUBTASKS
from ...data.schema import MER_TIER_DIMENSIONS, TIERS
from .photos import COLOURS, SCENES, add_noise, colour_cast, crop_box, jpeg_roundtrip, photo_pool, save_jpeg, scene_crop

__all__ = ["MER_SUBTASKS", "MER_SYSTEMS", "make_raw_mer_bench"]

# SpatialReward paper section 4.2: 11 generation systems; 3 categories with 15 subtasks at 2:1:1.
MER_SYSTEMS = (
    "Step1X-v1.0", "Step1X-v1.1", "Qwen-Edit", "Qwen-Edit-2509", "OmniGen", "OmniGen2",
    "FLUX-Dev", "FLUX-Pro", "Bagel", "Seedream-4.0", "Seedream-4.5",
)
# the construction pipeline's taxonomy (our names: the paper gives the count, not the names)
MER_SUBTASKS = {category: tuple(names) for category, names in _SUBTASKS.items()}
_CATEGORY_CYCLE = ("general", "general", "human_basic", "human_fine")  # the paper's 2:1:1

_MER_OPS = {
    "color_change": "make the {r} {c}",
    "object_addition": "add a {c} box on the {r}",
    "object_removal": "remove the object on the {r}",
    "material_change": "turn the {r} into {c} metal",
    "background_change": "paint the {r} background {c}",
    "count_change": "duplicate the object on the {r}",
    "text_change": "write the word on the {r} in {c}",
    "pose_change": "raise the arm on the {r}",
    "clothing_change": "make the clothing on the {r} {c}",
    "hair_change": "dye the hair on the {r} {c}",
    "accessory_change": "add a {c} hat on the {r}",
    "expression_change": "make the face on the {r} smile",
    "makeup": "add {c} lipstick on the {r}",
    "skin_texture": "add freckles on the {r}",
    "gaze_change": "make the eyes on the {r} look left",
}
_REGION_NAMES = ("upper left", "upper right", "lower left", "lower right", "centre")
_REGION_BOXES = ((0.05, 0.05, 0.45, 0.45), (0.55, 0.05, 0.95, 0.45), (0.05, 0.55, 0.45, 0.95),
                 (0.55, 0.55, 0.95, 0.95), (0.32, 0.32, 0.68, 0.68))
# (SC, PQ) tier pairs compatible with each overall tier (2 good, 1 medium, 0 poor; rank = index in TIERS).
_SUBTIERS = {2: ((2, 2), (2, 1), (1, 2)), 1: ((1, 1), (2, 1), (1, 2), (1, 0), (2, 0)),
             0: ((0, 0), (0, 1), (1, 0), (0, 2))}


def _votes(true_tier: int, rng: np.random.Generator, n: int, p_correct: float) -> list[int]:
    """n votes whose majority (>= 3 of 5) is ``true_tier``."""
    need = n // 2 + 1
    while True:
        v = []
        for _ in range(n):
            if rng.random() < p_correct:
                v.append(true_tier)
            else:
                others = ([t for t in (0, 1, 2) if t != true_tier and abs(t - true_tier) == 1]
                          or [t for t in (0, 1, 2) if t != true_tier])
                v.append(int(rng.choice(others)))
        if v.count(true_tier) >= need:
            return v


def _split_votes(true_tier: int, rng: np.random.Generator, n: int) -> list[int]:
    """n votes with no tier reaching a majority (e.g. 2-2-1)."""
    others = [t for t in (0, 1, 2) if t != true_tier]
    second = int(rng.choice(others))
    third = [t for t in others if t != second][0]
    counts = {true_tier: n // 2, second: n // 2, third: n - 2 * (n // 2)}
    v = [t for t, c in counts.items() for _ in range(c)]
    return [int(x) for x in rng.permutation(v)]


def _candidate_image(original, boxes, colours, sc, pq, rng, size):
    """SC decides how many operations are done (all, half, none + an unrelated change); PQ adds degradations."""
    img = original.copy()
    draw = ImageDraw.Draw(img)
    n_ops = len(boxes)
    if sc == 2:
        done = list(range(n_ops))
    elif sc == 1:
        done = sorted(rng.choice(n_ops, size=max(1, n_ops // 2), replace=False).tolist())
    else:
        done = []
    for k in done:
        x0, y0, x1, y1 = (int(v * size) for v in boxes[k])
        draw.rectangle((x0 + 3, y0 + 3, x1 - 3, y1 - 3), fill=colours[k])
    if sc == 0:
        # over-editing: something unrelated changes
        img = colour_cast(img, 0.8, rng)
    if pq == 1:
        img = add_noise(img.filter(ImageFilter.GaussianBlur(0.9)), 6, rng)
    elif pq == 0:
        img = jpeg_roundtrip(add_noise(img.filter(ImageFilter.GaussianBlur(2.0)), 22, rng), 8)
    return img


def _make_sample(i: int, rng: np.random.Generator, pool: dict, image_size: int, root: Path):
    """Sample ``i``: the original image (saved), its 2-5 operations; returns ``(record, original, boxes, colours)``."""
    sid = f"mer-{i:05d}"
    category = _CATEGORY_CYCLE[i % 4]
    subtask = MER_SUBTASKS[category][int(rng.integers(len(MER_SUBTASKS[category])))]
    if category == "general":
        general_scenes = [n for n in SCENES if n not in ("astronaut",)]
        original = scene_crop(pool[general_scenes[int(rng.integers(len(general_scenes)))]], rng, image_size)
    else:
        original = crop_box(pool["astronaut"], (0.2, 0.0, 0.85, 0.7), rng).resize((image_size, image_size),
                                                                                   Image.Resampling.BILINEAR)
    n_ops = int(rng.integers(2, 6))  # paper: 2-5 operations per instruction
    regions = sorted(rng.choice(len(_REGION_BOXES), size=n_ops, replace=False).tolist())
    colour_names = [list(COLOURS)[int(rng.integers(len(COLOURS)))] for _ in regions]
    ops = [_MER_OPS[subtask].format(r=_REGION_NAMES[r], c=c) for r, c in zip(regions, colour_names)]
    instruction = "; ".join(ops[:-1]) + ("; and " if len(ops) > 1 else "") + ops[-1] + "."
    instruction = instruction[0].upper() + instruction[1:]
    orel = f"originals/{sid}.jpg"
    save_jpeg(original, root / orel, quality=92)
    record = {"sample_id": sid, "instruction": instruction, "original_image": orel, "category": category,
              "subtask": subtask, "num_edits": n_ops}
    return record, original, [_REGION_BOXES[r] for r in regions], [COLOURS[c] for c in colour_names]


# Paper sec. 4.2: 6 candidates per sample from distinct systems, 5 annotators each (drawn from a pool of 8). Planted
# here: 6 % of the candidates get overall votes split 2-2-1; a vote is the candidate's true tier with chance 0.8.
N_CANDIDATES, N_ANNOTATORS, ANNOTATOR_POOL, P_NO_MAJORITY, P_CORRECT_VOTE = 6, 5, 8, 0.06, 0.8


def _overall_tiers(rng: np.random.Generator) -> list[int]:
    """Mostly two of each tier (shuffled); sometimes random tiers."""
    if rng.random() < 0.75:
        return [int(t) for t in rng.permutation([2, 2, 1, 1, 0, 0])]
    return [int(rng.integers(3)) for _ in range(N_CANDIDATES)]


def _make_candidates(sample: dict, original, boxes, colours, rng: np.random.Generator, size: int, root: Path):
    """The sample's candidates (saved) with their annotations; returns ``(candidates, annotations, truth)``."""
    sid, n = sample["sample_id"], N_ANNOTATORS
    overall = _overall_tiers(rng)
    systems = rng.choice(len(MER_SYSTEMS), size=N_CANDIDATES, replace=False).tolist()
    candidates, annotations, truth = [], [], []
    for j in range(N_CANDIDATES):
        cid = f"{sid}-c{j + 1}"
        o = overall[j]
        sc, pq = _SUBTIERS[o][int(rng.integers(len(_SUBTIERS[o])))]
        crel = f"candidates/{cid}.jpg"
        save_jpeg(_candidate_image(original, boxes, colours, sc, pq, rng, size), root / crel, quality=90)
        model = MER_SYSTEMS[systems[j % len(systems)]]
        candidates.append({"candidate_id": cid, "sample_id": sid, "editing_model": model, "image": crel})
        no_majority = bool(rng.random() < P_NO_MAJORITY)
        v_o = _split_votes(o, rng, n) if no_majority else _votes(o, rng, n, P_CORRECT_VOTE)
        v_sc = _votes(sc, rng, n, P_CORRECT_VOTE)
        v_pq = _votes(pq, rng, n, P_CORRECT_VOTE)
        who = rng.choice(ANNOTATOR_POOL, size=n, replace=False).tolist()
        for a, x, y, z in zip(who, v_o, v_sc, v_pq):
            annotations.append({"annotator_id": f"A{a + 1}", "candidate_id": cid,
                                "overall": TIERS[x], "sc": TIERS[y], "pq": TIERS[z]})
        truth.append({"candidate_id": cid, "sample_id": sid, "editing_model": model, "overall": TIERS[o],
                      "sc": TIERS[sc], "pq": TIERS[pq], "no_majority": no_majority})
    return candidates, annotations, truth


def make_raw_mer_bench(dir: str | os.PathLike, n_samples: int = 40, seed: int = 0, image_size: int = 128) -> dict:
    """Write a raw MER-Bench release into ``dir`` and return its planted truth.

    Layout written (the builder's input, see :mod:`modeling_miescore.data.builders.mer_bench`)::

        samples.jsonl     {"sample_id", "instruction", "original_image", "category", "subtask"}
        candidates.jsonl  {"candidate_id", "sample_id", "editing_model", "image"}
        annotations.csv   annotator_id,candidate_id,overall,sc,pq   (tiers good / medium / poor)
        originals/*.jpg   candidates/*.jpg
        truth.csv         candidate_id, sample_id, editing_model, overall, sc, pq (true tiers),
                          no_majority (planted candidates whose overall votes split 2-2-1)

    Categories cycle general, general, human_basic, human_fine (the paper's 2:1:1); each sample has 6 edits from
    distinct systems of the paper's 11, judged by 5 annotators drawn from a pool (``N_CANDIDATES``, ...).
    ``image_size``: side of the square images (small keeps fixtures fast).
    """
    import pandas as pd

    root = Path(dir)
    (root / "originals").mkdir(parents=True, exist_ok=True)
    (root / "candidates").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 11])
    pool = photo_pool()
    samples, candidates, annotations, truth = [], [], [], []
    for i in range(n_samples):
        sample, original, boxes, colours = _make_sample(i, rng, pool, image_size, root)
        samples.append(sample)
        made = _make_candidates(sample, original, boxes, colours, rng, image_size, root)
        for out, new in zip((candidates, annotations, truth), made):
            out += new

    for name, records in (("samples.jsonl", samples), ("candidates.jsonl", candidates)):
        with open(root / name, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)
    with open(root / "annotations.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["annotator_id", "candidate_id", *MER_TIER_DIMENSIONS])
        w.writeheader()
        w.writerows(annotations)
    truth_df = pd.DataFrame(truth)
    truth_df.to_csv(root / "truth.csv", index=False)
    return {"truth": truth_df, "no_majority": truth_df.loc[truth_df["no_majority"], "candidate_id"].tolist(),
            "dir": str(root)}
