"""A synthetic raw MIE-Bench release: multi-source instances from real photos, edits with planted faults, raters.

See the package docstring for the faults and the rater model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from ...data.schema import DIMENSIONS, GLOBAL_TASKS, TASKS
from .photos import (OBJECTS, PHOTOS, SCENES, WORDS, add_noise, colour_cast, colour_transfer, crop_box, jpeg_roundtrip,
                     paste, photo_pool, save_jpeg, scene_crop, text_card)

__all__ = ["MIE_EDITING_MODELS", "MIE_FAULTS", "make_raw_mie_bench"]

# MIEScore paper, Table 2 (ordered here roughly by the paper's overall results, best first).
MIE_EDITING_MODELS = (
    "GPT-Image-2", "Nano-Banana-Pro", "Wan2.7-Image", "Seedream5", "Seedream4", "UniPic3",
    "Qwen-Image-Edit", "HiDream", "OmniGen2", "UniCom", "DreamOmni2", "BAGEL",
)
MIE_FAULTS = ("blur", "jpeg", "noise", "pasted", "color_shift", "missing_source")
# Effect of each fault on the latent (VQ, IF, AP) at severity 1 (0-5 scale).
_FAULT_EFFECT = {
    "blur": (1.8, 0.0, 0.0),
    "jpeg": (1.6, 0.0, 0.0),
    "noise": (1.4, 0.0, 0.0),
    "pasted": (1.3, 0.3, 0.3),
    "color_shift": (0.3, 0.0, 1.6),
    "missing_source": (0.0, 2.0, 1.7),
}

_INSTRUCTIONS = {
    "attribute_transfer": "Give the {o1} in image 1 the colour and texture of the {o2} in image 2.",
    "character_composition": "Place the {o2} from image 2 next to the {o1} in image 1, keeping both identities.",
    "object_composition": "Combine the {objs} from the other images into the scene of image 1.",
    "object_replacement": "Replace the {o1} in image 1 with the {o2} from image 2, keeping the surroundings.",
    "pose_change": "Change the pose of the {o1} in image 1 to match the {o2} in image 2.",
    "text_composition": "Add the sign reading \"{word}\" from image 2 onto the {o1} scene of image 1.",
    "text_style": "Render the word \"{word}\" in image 1 in the lettering style shown in image 2.",
    "text_replacement": "Replace the text in image 1 with \"{word}\" from image 2, keeping layout and font.",
    "style_transfer": "Repaint image 1 in the visual style of image 2.",
    "background_transfer": "Put the {o1} from image 1 in front of the background of image 2.",
    "assisted_drawing": "Complete the drawing of image 1 following the guide in image 2.",
    "filter_composition": "Apply the colour grading of image 2 to the {o1} scene of image 1.",
    "spatial_composition": "Place the {o2} to the left of the {o1} and make it half as large.",
    "interaction": "Show the {o1} from image 1 interacting with the {o2} from image 2.",
    "physical_understanding": "Put the {o2} on the {o1} scene with consistent lighting and shadows.",
    "story_generation": "Tell a story in one frame: the {o1} discovers the {objs}.",
}
_TEXT_TASKS = {"text_composition", "text_style", "text_replacement"}  # their second source is a text card


@dataclass
class _Subject:
    sid: str
    bias: float
    scale: float
    noise: float
    unreliable: bool


@dataclass
class _Instance:
    instance_id: str
    task: str
    scene: Image.Image
    objects: list
    record: dict  # the instances.jsonl line


def _compose_base(task, scene, objects, missing, hard, rng, size):
    """The edit without image faults: the global transfer or the scene, then the other sources' objects pasted."""
    if task in GLOBAL_TASKS:
        ref = objects[0]
        if task == "background_transfer":
            canvas = ref.copy() if missing != 1 else scene.copy()
            if missing != 1:
                paste(canvas, scene, (size // 4, size // 4), size // 2, hard=hard, rng=rng)
        else:
            canvas = scene.copy() if missing == 1 else colour_transfer(scene, ref, 0.75)
            if task == "assisted_drawing" and missing != 1:
                canvas = Image.blend(canvas, canvas.filter(ImageFilter.CONTOUR), 0.35)
        rest = list(enumerate(objects[1:], start=2))
    else:
        canvas = scene.copy()
        rest = list(enumerate(objects, start=1))
    slots = [(0.05, 0.50), (0.50, 0.50), (0.05, 0.05), (0.50, 0.05)]
    order = rng.permutation(len(slots))
    for k, (j, obj) in enumerate(rest):
        if j == missing:
            continue
        frac = rng.uniform(0.34, 0.46)
        osz = max(8, int(size * frac))
        sx, sy = slots[order[k % len(slots)]]
        x = int(np.clip(sx * size + rng.uniform(-0.03, 0.03) * size, 0, size - osz))
        y = int(np.clip(sy * size + rng.uniform(-0.03, 0.03) * size, 0, size - osz))
        paste(canvas, obj, (x, y), osz, hard=hard, rng=rng)
    return canvas


def _compose_edit(task, scene, objects, nsrc, faults, severity, rng, size):
    """Make one edited image from the instance's sources, with the given faults."""
    missing = None
    if "missing_source" in faults:
        missing = int(rng.integers(1, nsrc))  # index of the source left out (never image 1)
    canvas = _compose_base(task, scene, objects, missing, "pasted" in faults, rng, size)
    if "color_shift" in faults:
        canvas = colour_cast(canvas, severity["color_shift"], rng)
    if "blur" in faults:
        canvas = canvas.filter(ImageFilter.GaussianBlur(0.6 + 2.2 * severity["blur"] * size / 128))
    if "noise" in faults:
        canvas = add_noise(canvas, 8 + 22 * severity["noise"], rng)
    if "jpeg" in faults:
        canvas = jpeg_roundtrip(canvas, max(4, int(round(28 - 22 * severity["jpeg"]))))
    return canvas, missing


def _editing_models(n_models: int, fault_rate: tuple[float, float] = (0.06, 0.24)):
    """Model names, their skill (latent offset, best first) and their per-fault probability (linear in rank, from
    ``fault_rate[0]`` for the best model to ``fault_rate[1]`` for the worst)."""
    models = list(MIE_EDITING_MODELS[:n_models]) + [f"EditModel-{k + 1:02d}" for k in range(12, n_models)]
    skill = np.linspace(0.7, -0.7, len(models)) if len(models) > 1 else np.zeros(1)
    p_fault = np.linspace(fault_rate[0], fault_rate[1], len(models)) if len(models) > 1 else np.array([fault_rate[0]])
    return models, skill, p_fault


def _make_subjects(rrng: np.random.Generator, n_subjects: int, n_unreliable: int, unreliable_noise: float = 1.0):
    """The rater pool: honest raters with a small bias/scale/noise, and a few unbiased but noisy ones."""
    subjects = []
    unreliable_idx = set(rrng.choice(n_subjects, size=n_unreliable, replace=False).tolist()) if n_unreliable else set()
    for k in range(n_subjects):
        if k in unreliable_idx:
            subjects.append(_Subject(f"S{k + 1:02d}", 0.0, 1.0, float(unreliable_noise), True))
        else:
            subjects.append(_Subject(f"S{k + 1:02d}", float(rrng.uniform(-0.25, 0.25)), float(rrng.uniform(0.9, 1.1)),
                                     float(rrng.uniform(0.15, 0.35)), False))
    return subjects


def _make_instance(i: int, rng: np.random.Generator, pool: dict, image_size: int, root: Path) -> _Instance:
    """Instance ``i``: a scene plus 1-3 object sources (or a text card), saved, and its instruction."""
    iid = f"mie-{i:05d}"
    task = TASKS[i % len(TASKS)]
    nsrc = int(rng.choice([2, 3, 4], p=[0.6, 0.3, 0.1]))
    scene_name = SCENES[int(rng.integers(len(SCENES)))]
    obj_names = [n for n in rng.permutation(OBJECTS) if n != scene_name][: nsrc - 1]
    scene = scene_crop(pool[scene_name], rng, image_size)
    objects = []
    word = WORDS[int(rng.integers(len(WORDS)))]
    for k, name in enumerate(obj_names):
        if task in _TEXT_TASKS and k == 0:
            objects.append(text_card(word, image_size, rng))
        else:
            objects.append(crop_box(pool[name], PHOTOS[name][1], rng).resize((image_size, image_size),
                                                                              Image.Resampling.BILINEAR))
    src_paths = []
    for k, img in enumerate([scene] + objects):
        rel = f"sources/{iid}_s{k + 1}.jpg"
        save_jpeg(img, root / rel, quality=92)
        src_paths.append(rel)
    nouns = [PHOTOS[scene_name][2]] + [PHOTOS[n][2] for n in obj_names]
    instruction = _INSTRUCTIONS[task].format(
        o1=nouns[0], o2=nouns[1] if len(nouns) > 1 else nouns[0], objs=", ".join(nouns[1:]) or nouns[0], word=word
    )
    record = {"instance_id": iid, "task": task, "instruction": instruction, "sources": src_paths}
    return _Instance(iid, task, scene, objects, record)


def _make_edits(inst: _Instance, models, skill, p_fault, rng: np.random.Generator, image_size: int, root: Path):
    """One edit per model (faults drawn with the model's rate), saved; returns ``(edit records, truth rows)``."""
    nsrc = len(inst.record["sources"])
    difficulty = rng.normal(0, 0.35)
    dim_offsets = rng.normal(0, 0.15, 3)
    edits, truth = [], []
    for m, model in enumerate(models):
        eid = f"{inst.instance_id}-m{m + 1:02d}"
        faults = [f for f in MIE_FAULTS if rng.random() < p_fault[m]]
        severity = {f: float(rng.uniform(0.4, 1.0)) for f in faults}
        if "missing_source" in severity:
            severity["missing_source"] = 1.0
        img, missing = _compose_edit(inst.task, inst.scene, inst.objects, nsrc, faults, severity, rng, image_size)
        rel = f"edits/{eid}.jpg"
        save_jpeg(img, root / rel, quality=90)
        edits.append({"edit_id": eid, "instance_id": inst.instance_id, "editing_model": model, "image": rel})
        latent = 3.2 + skill[m] + difficulty + dim_offsets + rng.normal(0, 0.2, 3)
        for f in faults:
            latent -= np.asarray(_FAULT_EFFECT[f]) * severity[f]
        latent = np.clip(latent, 0.3, 4.8)
        truth.append({
            "edit_id": eid, "instance_id": inst.instance_id, "editing_model": model, "task": inst.task,
            "num_sources": nsrc, "faults": ";".join(faults),
            "max_severity": round(max(severity.values()), 4) if severity else 0.0,
            "missing_source": missing if missing is not None else -1,
            "latent_vq": round(float(latent[0]), 4), "latent_if": round(float(latent[1]), 4),
            "latent_ap": round(float(latent[2]), 4),
        })
    return edits, truth


def _rating_table(truth_df, subjects, rater_rng: np.random.Generator, raters_per_edit: int):
    """Paper, "Subjective Experiment Setup": ``raters_per_edit`` raters per image, 0-5 scale, three dimensions."""
    import pandas as pd

    lat = truth_df[["latent_vq", "latent_if", "latent_ap"]].to_numpy()
    n_e = len(truth_df)
    picks = np.argsort(rater_rng.random((n_e, len(subjects))), axis=1)[:, :raters_per_edit]
    bias = np.array([s.bias for s in subjects])[picks]
    scale = np.array([s.scale for s in subjects])[picks]
    noise = np.array([s.noise for s in subjects])[picks]
    eps = rater_rng.standard_normal((n_e, raters_per_edit, 3))
    r = 2.5 + scale[..., None] * (lat[:, None, :] - 2.5) + bias[..., None] + noise[..., None] * eps
    r = np.round(np.clip(r, 0.0, 5.0), 1)
    sid = np.array([s.sid for s in subjects], dtype=object)[picks]
    return pd.DataFrame({
        "subject_id": np.repeat(sid.reshape(-1), 3),
        "edit_id": np.repeat(truth_df["edit_id"].to_numpy(dtype=object), raters_per_edit * 3),
        "dimension": np.tile(np.array(DIMENSIONS, dtype=object), n_e * raters_per_edit),
        "rating": r.reshape(-1),
    })


def _mos_table(truth_df, mrng: np.random.Generator):
    """MOS on 0-100 from the latent quality plus noise (for the ``mos.csv`` input of the builder)."""
    import pandas as pd

    lat = truth_df[["latent_vq", "latent_if", "latent_ap"]].to_numpy()
    mos = np.clip(20.0 * lat + mrng.normal(0, 1.5, lat.shape), 0, 100)
    return pd.DataFrame({"edit_id": truth_df["edit_id"], "mos_vq": mos[:, 0], "mos_if": mos[:, 1], "mos_ap": mos[:, 2]})


def _write_truth_json(root: Path, seed, image_size, models, skill, subjects, raters_per_edit) -> dict:
    meta = {
        "seed": seed,
        "image_size": image_size,
        "editing_models": {m: round(float(s), 4) for m, s in zip(models, skill)},
        "fault_effects": {f: list(v) for f, v in _FAULT_EFFECT.items()},
        "subjects": {s.sid: {"bias": round(s.bias, 4), "scale": round(s.scale, 4), "noise": round(s.noise, 4),
                             "unreliable": s.unreliable} for s in subjects},
        "unreliable_subjects": [s.sid for s in subjects if s.unreliable],
        "raters_per_edit": raters_per_edit,
    }
    (root / "truth.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return meta


def _write_records(root: Path, mode: str, instances: list, edits: list, truth: list):
    """Write (``mode`` "w") or append to (``mode`` "a") instances.jsonl, edits.jsonl and truth.csv; the new truth
    rows as a DataFrame."""
    import pandas as pd

    for name, records in (("instances.jsonl", instances), ("edits.jsonl", edits)):
        with open(root / name, mode, encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)
    truth_df = pd.DataFrame(truth)
    truth_df.to_csv(root / "truth.csv", mode=mode, header=mode == "w", index=False)
    return truth_df


def _check_arguments(rating_format: str, n_subjects: int, raters_per_edit: int, n_unreliable: int) -> None:
    if rating_format not in ("ratings", "mos", "both"):
        raise ValueError("rating_format must be 'ratings', 'mos' or 'both'")
    if raters_per_edit > n_subjects:
        raise ValueError("raters_per_edit cannot exceed n_subjects")
    if n_unreliable >= raters_per_edit:
        raise ValueError("n_unreliable must be smaller than raters_per_edit")


def make_raw_mie_bench(
    dir: str | os.PathLike,
    n_instances: int = 32,
    n_models: int = 12,
    seed: int = 0,
    image_size: int = 128,
    *,
    n_subjects: int = 20,
    raters_per_edit: int = 15,
    n_unreliable: int = 2,
    rating_format: str = "ratings",
    instance_offset: int = 0,
) -> dict:
    """Write a raw MIE-Bench release into ``dir`` and return its planted truth.

    Layout written (the builder's input, see :mod:`modeling_miescore.data.builders.mie_bench`)::

        instances.jsonl  edits.jsonl  ratings.csv (and/or mos.csv)  sources/*.jpg  edits/*.jpg
        truth.csv        one row per edit: faults, severity, latent_vq/if/ap (0-5), editing model, task
        truth.json       seed, subjects (bias/scale/noise), unreliable_subjects, models' skill

    Args:
        dir: output folder (created; existing files with the same names are overwritten).
        n_instances: number of instances; tasks cycle through the 16 MIE-Bench tasks.
        n_models: editing models per instance (the paper's 12; more get generic names).
        seed: everything is deterministic from it.
        image_size: side of the square source and edited images (small keeps fixtures fast).
        n_subjects: size of the rater pool; each edit is rated by ``raters_per_edit`` of them (paper: 15).
        n_unreliable: planted unreliable raters (unbiased, rating noise 1.0 on the 0-5 scale) that BT.500
            screening should reject; honest raters have noise 0.15-0.35, biases within ±0.25, scales 0.9-1.1.
        rating_format: ``"ratings"`` (ratings.csv), ``"mos"`` (mos.csv on 0-100, from the latent
            quality plus noise) or ``"both"``.
        instance_offset: first instance number, so that a second call can *add* instances
            (``mie-00032`` onwards) to an existing release (pass the same ``dir``; the JSONL/CSV
            files are then appended to).

    Returns:
        ``{"truth": pandas.DataFrame (truth.csv), "unreliable_subjects": [...], "subjects": {...},
        "dir": str}``.
    """
    import pandas as pd

    _check_arguments(rating_format, n_subjects, raters_per_edit, n_unreliable)
    root = Path(dir)
    for folder in ("sources", "edits"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    append = instance_offset > 0
    # Separate streams so that instances/images and raters do not shift each other.
    rng = np.random.default_rng([seed, instance_offset, 1])
    subjects = _make_subjects(np.random.default_rng([seed, 0, 2]), n_subjects, n_unreliable)
    pool = photo_pool()
    models, skill, p_fault = _editing_models(n_models)

    instances, edits, truth = [], [], []
    for i in range(instance_offset, instance_offset + n_instances):
        inst = _make_instance(i, rng, pool, image_size, root)
        instances.append(inst.record)
        for out, new in zip((edits, truth), _make_edits(inst, models, skill, p_fault, rng, image_size, root)):
            out += new

    mode = "a" if append else "w"
    truth_df = _write_records(root, mode, instances, edits, truth)
    if rating_format in ("ratings", "both"):
        ratings = _rating_table(truth_df, subjects, np.random.default_rng([seed, instance_offset, 3]), raters_per_edit)
        ratings.to_csv(root / "ratings.csv", mode=mode, header=not append, index=False, float_format="%.1f")
    if rating_format in ("mos", "both"):
        mos = _mos_table(truth_df, np.random.default_rng([seed, instance_offset, 4]))
        mos.to_csv(root / "mos.csv", mode=mode, header=not append, index=False, float_format="%.3f")

    meta = _write_truth_json(root, seed, image_size, models, skill, subjects, raters_per_edit)
    full_truth = pd.read_csv(root / "truth.csv", keep_default_na=False)
    return {"truth": full_truth, "unreliable_subjects": meta["unreliable_subjects"], "subjects": meta["subjects"],
            "dir": str(root)}
