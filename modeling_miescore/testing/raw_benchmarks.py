"""Synthetic *raw* MIE-Bench and MER-Bench releases, built from real photos, with a planted truth.

The builders in :mod:`modeling_miescore.data.builders` turn raw releases into Parquet datasets. To test
them end to end (and anything downstream: metrics, training smoke tests) without the real data, these
functions write raw releases in exactly the documented layouts:

* :func:`make_raw_mie_bench`: multi-source instances composed from scikit-image's bundled photos
  (astronaut, coffee, chelsea, rocket, camera, ...; only loaders that work offline), 12 "editing
  models" whose edits carry **controlled faults**, and 15 simulated raters per edit whose ratings
  follow the planted latent quality (paper: 15 raters per image, 0–5 scale, three dimensions).
* :func:`make_raw_mer_bench`: one source photo + multi-operation instruction + 6 candidate edits per
  sample, each judged by 5 annotators on three tiers (overall / SC / PQ), with a few candidates
  planted without a 3-of-5 majority (SpatialReward paper, section 4 and appendix A.1).

Planted faults and the dimension each one lowers (MIE-Bench; effects on the 0–5 latent scale, times
the fault's severity in [0.4, 1]):

===================  ===========================================================  ====================
fault                what happens to the edited image                              lowers
===================  ===========================================================  ====================
``blur``             Gaussian blur                                                 VQ (strongly)
``jpeg``             heavy JPEG re-compression                                     VQ
``noise``            additive Gaussian noise                                       VQ
``pasted``           objects pasted as hard rectangles with mismatched brightness  VQ, a little IF/AP
``color_shift``      global colour cast                                            AP, a little VQ
``missing_source``   one source's object (or the global transfer) is left out      IF and AP
===================  ===========================================================  ====================

Raters: ``rating = clip(2.5 + scale·(latent − 2.5) + bias + noise, 0, 5)``, rounded to 0.1, with a
per-subject bias, scale and noise level. A few *unreliable* raters (ids in ``truth.json``) are unbiased
but noisy — not wild: with 15 raters per item a single extreme rating pushes the item's kurtosis above
4, where BT.500's √20·σ bound can never be reached, so wild raters would escape screening.

Everything is deterministic from ``seed`` (numpy ``PCG64`` + Pillow operations + JPEG encoding).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

__all__ = [
    "MER_CATEGORIES",
    "MER_SUBTASKS",
    "MER_SYSTEMS",
    "MIE_EDITING_MODELS",
    "MIE_FAULTS",
    "make_raw_mer_bench",
    "make_raw_mie_bench",
]

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

# SpatialReward paper section 4.2: 11 generation systems; 3 categories with 15 subtasks at 2:1:1.
MER_SYSTEMS = (
    "Step1X-v1.0", "Step1X-v1.1", "Qwen-Edit", "Qwen-Edit-2509", "OmniGen", "OmniGen2",
    "FLUX-Dev", "FLUX-Pro", "Bagel", "Seedream-4.0", "Seedream-4.5",
)
MER_CATEGORIES = ("general", "human_basic", "human_fine")
MER_SUBTASKS = {
    "general": ("color_change", "object_addition", "object_removal", "material_change",
                "background_change", "count_change", "text_change"),
    "human_basic": ("pose_change", "clothing_change", "hair_change", "accessory_change"),
    "human_fine": ("expression_change", "makeup", "skin_texture", "gaze_change"),
}
_TIERS = ("poor", "medium", "good")  # index = rank (0 worst)

# Photos that ship with scikit-image and load offline (no pooch download).
# name -> (loader, salient object box as fractions (x0, y0, x1, y1), object noun)
_PHOTOS = {
    "astronaut": ("astronaut", (0.25, 0.02, 0.80, 0.62), "astronaut"),
    "coffee": ("coffee", (0.15, 0.05, 0.85, 0.95), "coffee cup"),
    "chelsea": ("chelsea", (0.22, 0.02, 0.78, 0.98), "cat"),
    "rocket": ("rocket", (0.36, 0.00, 0.66, 0.92), "rocket"),
    "camera": ("camera", (0.20, 0.05, 0.72, 0.95), "photographer"),
    "clock": ("clock", (0.12, 0.05, 0.88, 0.95), "clock"),
    "coins": ("coins", (0.05, 0.05, 0.95, 0.95), "coins"),
    "colorwheel": ("colorwheel", (0.05, 0.05, 0.95, 0.95), "colour wheel"),
    "motorcycle": ("stereo_motorcycle", (0.10, 0.15, 0.90, 0.92), "motorcycle"),
    "logo": ("logo", (0.05, 0.05, 0.95, 0.95), "logo"),
    "tissue": ("immunohistochemistry", (0.0, 0.0, 1.0, 1.0), "tissue sample"),
    "hubble": ("hubble_deep_field", (0.0, 0.0, 1.0, 1.0), "galaxy field"),
    "brick": ("brick", (0.0, 0.0, 1.0, 1.0), "brick wall"),
    "grass": ("grass", (0.0, 0.0, 1.0, 1.0), "lawn"),
    "gravel": ("gravel", (0.0, 0.0, 1.0, 1.0), "gravel path"),
    "moon": ("moon", (0.0, 0.0, 1.0, 1.0), "moon surface"),
    "retina": ("retina", (0.1, 0.1, 0.9, 0.9), "retina scan"),
    "page": ("page", (0.0, 0.0, 1.0, 1.0), "printed page"),
}
_OBJECTS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "clock", "coins", "colorwheel", "motorcycle", "logo")
_SCENES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "motorcycle", "tissue", "hubble", "brick",
           "grass", "gravel", "moon", "retina", "clock")
_WORDS = ("OPEN", "SALE", "CAFE", "EXIT", "HELLO", "NASA", "STOP", "SPACE", "MOON", "ART", "TAXI", "BOOKS")
_COLOURS = {"red": (220, 40, 40), "blue": (40, 70, 220), "green": (40, 170, 60), "yellow": (235, 210, 40),
            "purple": (140, 50, 190), "orange": (240, 140, 30), "white": (240, 240, 240), "black": (20, 20, 20)}


@lru_cache(maxsize=1)
def _photo_pool(short_side: int = 256) -> dict:
    """RGB photos from skimage.data, downscaled once so that the short side is ``short_side``."""
    from skimage import data

    pool = {}
    for name, (loader, _, _) in _PHOTOS.items():
        arr = getattr(data, loader)()
        if isinstance(arr, tuple):  # stereo_motorcycle -> (left, right, disparity)
            arr = arr[0]
        arr = np.asarray(arr)
        if arr.dtype == bool:
            arr = arr.astype(np.uint8) * 255
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        arr = arr[..., :3].astype(np.uint8)
        img = Image.fromarray(arr, "RGB")
        scale = short_side / min(img.size)
        if scale < 1:
            img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.Resampling.LANCZOS)
        pool[name] = img
    return pool


def _crop_box(img: Image.Image, box, rng: np.random.Generator, jitter: float = 0.06, square: bool = True) -> Image.Image:
    w, h = img.size
    x0, y0, x1, y1 = box
    j = rng.uniform(-jitter, jitter, 4)
    x0, x1 = sorted((np.clip(x0 + j[0], 0, 1), np.clip(x1 + j[1], 0, 1)))
    y0, y1 = sorted((np.clip(y0 + j[2], 0, 1), np.clip(y1 + j[3], 0, 1)))
    bx = [x0 * w, y0 * h, max(x1 * w, x0 * w + 8), max(y1 * h, y0 * h + 8)]
    if square:
        cx, cy = (bx[0] + bx[2]) / 2, (bx[1] + bx[3]) / 2
        side = min(max(bx[2] - bx[0], bx[3] - bx[1]), w, h)
        cx = np.clip(cx, side / 2, w - side / 2)
        cy = np.clip(cy, side / 2, h - side / 2)
        bx = [cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2]
    return img.crop(tuple(int(round(v)) for v in bx))


def _scene_crop(img: Image.Image, rng: np.random.Generator, size: int) -> Image.Image:
    w, h = img.size
    side = int(min(w, h) * rng.uniform(0.7, 1.0))
    x = int(rng.integers(0, w - side + 1))
    y = int(rng.integers(0, h - side + 1))
    return img.crop((x, y, x + side, y + side)).resize((size, size), Image.Resampling.BILINEAR)


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # very old Pillow
        return ImageFont.load_default()


def _text_card(word: str, size: int, rng: np.random.Generator) -> Image.Image:
    bg = tuple(int(v) for v in rng.integers(150, 256, 3))
    fg = tuple(int(v) for v in rng.integers(0, 90, 3))
    img = Image.new("RGB", (size, size), bg)
    draw = ImageDraw.Draw(img)
    font = _font(max(10, size // 5))
    left, top, right, bottom = draw.textbbox((0, 0), word, font=font)
    draw.text(((size - (right - left)) / 2 - left, (size - (bottom - top)) / 2 - top), word, fill=fg, font=font)
    return img


@lru_cache(maxsize=64)
def _feather_mask(w: int, h: int) -> Image.Image:
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).ellipse((w * 0.06, h * 0.06, w * 0.94, h * 0.94), fill=255)
    return mask.filter(ImageFilter.GaussianBlur(max(1.0, min(w, h) / 10)))


def _paste(canvas: Image.Image, obj: Image.Image, pos, size: int, *, hard: bool, rng: np.random.Generator) -> None:
    obj = obj.resize((size, size), Image.Resampling.BILINEAR)
    if hard:
        # "pasted without blending": a hard rectangle with a brightness mismatch.
        arr = np.asarray(obj, dtype=np.float32) * rng.uniform(1.25, 1.45)
        canvas.paste(Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)), pos)
    else:
        canvas.paste(obj, pos, _feather_mask(size, size))


def _colour_transfer(img: Image.Image, ref: Image.Image, weight: float) -> Image.Image:
    """Reinhard-style per-channel mean/std transfer (a stand-in for style/filter transfer)."""
    a = np.asarray(img, dtype=np.float32)
    b = np.asarray(ref, dtype=np.float32)
    am, asd = a.mean((0, 1)), a.std((0, 1)) + 1e-3
    bm, bsd = b.mean((0, 1)), b.std((0, 1)) + 1e-3
    out = (a - am) / asd * bsd + bm
    out = (1 - weight) * a + weight * out
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8))


def _jpeg_roundtrip(img: Image.Image, quality: int) -> Image.Image:
    import io

    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def _add_noise(img: Image.Image, sigma: float, rng: np.random.Generator) -> Image.Image:
    a = np.asarray(img, dtype=np.float32) + rng.normal(0, sigma, (img.height, img.width, 3)).astype(np.float32)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _colour_cast(img: Image.Image, severity: float, rng: np.random.Generator) -> Image.Image:
    gains = 1.0 + severity * 0.45 * rng.choice([-1.0, 1.0], 3) * rng.uniform(0.6, 1.0, 3)
    a = np.asarray(img, dtype=np.float32) * gains + severity * rng.uniform(-25, 25, 3)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _save_jpeg(img: Image.Image, path: Path, quality: int = 90) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="JPEG", quality=quality, optimize=False)


# ============================================================================================
# MIE-Bench
# ============================================================================================

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
_GLOBAL = {"style_transfer", "background_transfer", "assisted_drawing", "filter_composition"}
_TEXT = {"text_composition", "text_style", "text_replacement"}


@dataclass
class _Subject:
    sid: str
    bias: float
    scale: float
    noise: float
    unreliable: bool


def _compose_edit(task, scene, objects, nsrc, faults, severity, rng, size):
    """Make one edited image from the instance's sources, with the given faults."""
    missing = None
    if "missing_source" in faults:
        missing = int(rng.integers(1, nsrc))  # index of the source left out (never image 1)
    hard = "pasted" in faults
    if task in _GLOBAL:
        ref = objects[0]
        if task == "background_transfer":
            canvas = ref.copy() if missing != 1 else scene.copy()
            if missing != 1:
                _paste(canvas, scene, (size // 4, size // 4), size // 2, hard=hard, rng=rng)
        else:
            canvas = scene.copy() if missing == 1 else _colour_transfer(scene, ref, 0.75)
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
        _paste(canvas, obj, (x, y), osz, hard=hard, rng=rng)
    if "color_shift" in faults:
        canvas = _colour_cast(canvas, severity["color_shift"], rng)
    if "blur" in faults:
        canvas = canvas.filter(ImageFilter.GaussianBlur(0.6 + 2.2 * severity["blur"] * size / 128))
    if "noise" in faults:
        canvas = _add_noise(canvas, 8 + 22 * severity["noise"], rng)
    if "jpeg" in faults:
        canvas = _jpeg_roundtrip(canvas, max(4, int(round(28 - 22 * severity["jpeg"]))))
    return canvas, missing


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
    unreliable_noise: float = 1.0,
    rating_format: str = "ratings",
    instance_offset: int = 0,
    fault_rate: tuple[float, float] = (0.06, 0.24),
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
        n_unreliable: planted unreliable raters (noisy, unbiased) that BT.500 screening should reject.
        unreliable_noise: their rating noise (0-5 scale); honest raters have 0.15-0.35, biases within ±0.25
            and scales 0.9-1.1.
        rating_format: ``"ratings"`` (ratings.csv), ``"mos"`` (mos.csv on 0-100, from the latent
            quality plus noise) or ``"both"``.
        instance_offset: first instance number, so that a second call can *add* instances
            (``mie-00032`` onwards) to an existing release (pass the same ``dir``; the JSONL/CSV
            files are then appended to).
        fault_rate: per-fault probability for the best and the worst model (linear in between).

    Returns:
        ``{"truth": pandas.DataFrame (truth.csv), "unreliable_subjects": [...], "subjects": {...},
        "dir": str}``.
    """
    import pandas as pd

    from ..data.schema import TASKS

    if rating_format not in ("ratings", "mos", "both"):
        raise ValueError("rating_format must be 'ratings', 'mos' or 'both'")
    if raters_per_edit > n_subjects:
        raise ValueError("raters_per_edit cannot exceed n_subjects")
    if n_unreliable >= raters_per_edit:
        raise ValueError("n_unreliable must be smaller than raters_per_edit")
    root = Path(dir)
    (root / "sources").mkdir(parents=True, exist_ok=True)
    (root / "edits").mkdir(parents=True, exist_ok=True)
    append = instance_offset > 0
    # Separate streams so that instances/images and raters do not shift each other.
    rng = np.random.default_rng([seed, instance_offset, 1])
    rrng = np.random.default_rng([seed, 0, 2])  # subjects depend on the seed only
    pool = _photo_pool()

    models = list(MIE_EDITING_MODELS[:n_models]) + [f"EditModel-{k + 1:02d}" for k in range(12, n_models)]
    skill = np.linspace(0.7, -0.7, len(models)) if len(models) > 1 else np.zeros(1)
    p_fault = np.linspace(fault_rate[0], fault_rate[1], len(models)) if len(models) > 1 else np.array([fault_rate[0]])

    subjects = []
    unreliable_idx = set(rrng.choice(n_subjects, size=n_unreliable, replace=False).tolist()) if n_unreliable else set()
    for k in range(n_subjects):
        if k in unreliable_idx:
            subjects.append(_Subject(f"S{k + 1:02d}", 0.0, 1.0, float(unreliable_noise), True))
        else:
            subjects.append(_Subject(f"S{k + 1:02d}", float(rrng.uniform(-0.25, 0.25)), float(rrng.uniform(0.9, 1.1)),
                                     float(rrng.uniform(0.15, 0.35)), False))

    instances, edits, truth = [], [], []
    for i in range(instance_offset, instance_offset + n_instances):
        iid = f"mie-{i:05d}"
        task = TASKS[i % len(TASKS)]
        nsrc = int(rng.choice([2, 3, 4], p=[0.6, 0.3, 0.1]))
        scene_name = _SCENES[int(rng.integers(len(_SCENES)))]
        obj_names = [n for n in rng.permutation(_OBJECTS) if n != scene_name][: nsrc - 1]
        scene = _scene_crop(pool[scene_name], rng, image_size)
        objects = []
        word = _WORDS[int(rng.integers(len(_WORDS)))]
        for k, name in enumerate(obj_names):
            if task in _TEXT and k == 0:
                objects.append(_text_card(word, image_size, rng))
            else:
                objects.append(_crop_box(pool[name], _PHOTOS[name][1], rng).resize((image_size, image_size), Image.Resampling.BILINEAR))
        src_paths = []
        for k, img in enumerate([scene] + objects):
            rel = f"sources/{iid}_s{k + 1}.jpg"
            _save_jpeg(img, root / rel, quality=92)
            src_paths.append(rel)
        nouns = [_PHOTOS[scene_name][2]] + [_PHOTOS[n][2] for n in obj_names]
        instruction = _INSTRUCTIONS[task].format(
            o1=nouns[0], o2=nouns[1] if len(nouns) > 1 else nouns[0], objs=", ".join(nouns[1:]) or nouns[0], word=word
        )
        instances.append({"instance_id": iid, "task": task, "instruction": instruction, "sources": src_paths})

        difficulty = rng.normal(0, 0.35)
        dim_offsets = rng.normal(0, 0.15, 3)
        for m, model in enumerate(models):
            eid = f"{iid}-m{m + 1:02d}"
            faults = [f for f in MIE_FAULTS if rng.random() < p_fault[m]]
            severity = {f: float(rng.uniform(0.4, 1.0)) for f in faults}
            if "missing_source" in severity:
                severity["missing_source"] = 1.0
            img, missing = _compose_edit(task, scene, objects, nsrc, faults, severity, rng, image_size)
            rel = f"edits/{eid}.jpg"
            _save_jpeg(img, root / rel, quality=90)
            edits.append({"edit_id": eid, "instance_id": iid, "editing_model": model, "image": rel})
            latent = 3.2 + skill[m] + difficulty + dim_offsets + rng.normal(0, 0.2, 3)
            for f in faults:
                latent -= np.asarray(_FAULT_EFFECT[f]) * severity[f]
            latent = np.clip(latent, 0.3, 4.8)
            truth.append({
                "edit_id": eid, "instance_id": iid, "editing_model": model, "task": task, "num_sources": nsrc,
                "faults": ";".join(faults), "max_severity": round(max(severity.values()), 4) if severity else 0.0,
                "missing_source": missing if missing is not None else -1,
                "latent_vq": round(float(latent[0]), 4), "latent_if": round(float(latent[1]), 4),
                "latent_ap": round(float(latent[2]), 4),
            })

    mode = "a" if append else "w"
    with open(root / "instances.jsonl", mode, encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in instances)
    with open(root / "edits.jsonl", mode, encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in edits)
    truth_df = pd.DataFrame(truth)
    truth_df.to_csv(root / "truth.csv", mode=mode, header=not append, index=False)

    # ---- raters (paper: 15 per image, 0-5 continuous scale, three dimensions) ----
    lat = truth_df[["latent_vq", "latent_if", "latent_ap"]].to_numpy()
    n_e = len(truth_df)
    if rating_format in ("ratings", "both"):
        rater_rng = np.random.default_rng([seed, instance_offset, 3])
        picks = np.argsort(rater_rng.random((n_e, n_subjects)), axis=1)[:, :raters_per_edit]
        bias = np.array([s.bias for s in subjects])[picks]
        scale = np.array([s.scale for s in subjects])[picks]
        noise = np.array([s.noise for s in subjects])[picks]
        eps = rater_rng.standard_normal((n_e, raters_per_edit, 3))
        r = 2.5 + scale[..., None] * (lat[:, None, :] - 2.5) + bias[..., None] + noise[..., None] * eps
        r = np.round(np.clip(r, 0.0, 5.0), 1)
        sid = np.array([s.sid for s in subjects], dtype=object)[picks]
        dims = np.array(["visual_quality", "instruction_following", "attribute_preservation"], dtype=object)
        df = pd.DataFrame({
            "subject_id": np.repeat(sid.reshape(-1), 3),
            "edit_id": np.repeat(truth_df["edit_id"].to_numpy(dtype=object), raters_per_edit * 3),
            "dimension": np.tile(dims, n_e * raters_per_edit),
            "rating": r.reshape(-1),
        })
        df.to_csv(root / "ratings.csv", mode=mode, header=not append, index=False, float_format="%.1f")
    if rating_format in ("mos", "both"):
        mrng = np.random.default_rng([seed, instance_offset, 4])
        mos = np.clip(20.0 * lat + mrng.normal(0, 1.5, lat.shape), 0, 100)
        mdf = pd.DataFrame({"edit_id": truth_df["edit_id"], "mos_vq": mos[:, 0], "mos_if": mos[:, 1], "mos_ap": mos[:, 2]})
        mdf.to_csv(root / "mos.csv", mode=mode, header=not append, index=False, float_format="%.3f")

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
    full_truth = pd.read_csv(root / "truth.csv", keep_default_na=False)
    return {"truth": full_truth, "unreliable_subjects": meta["unreliable_subjects"], "subjects": meta["subjects"],
            "dir": str(root)}


# ============================================================================================
# MER-Bench
# ============================================================================================

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
# (SC, PQ) tier pairs compatible with each overall tier (2 good, 1 medium, 0 poor).
_SUBTIERS = {2: ((2, 2), (2, 1), (1, 2)), 1: ((1, 1), (2, 1), (1, 2), (1, 0), (2, 0)), 0: ((0, 0), (0, 1), (1, 0), (0, 2))}


def _votes(true_tier: int, rng: np.random.Generator, n: int, p_correct: float) -> list[int]:
    """n votes whose majority (>= 3 of 5) is ``true_tier``."""
    need = n // 2 + 1
    while True:
        v = []
        for _ in range(n):
            if rng.random() < p_correct:
                v.append(true_tier)
            else:
                others = [t for t in (0, 1, 2) if t != true_tier and abs(t - true_tier) == 1] or [t for t in (0, 1, 2) if t != true_tier]
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


def _mer_candidate_image(original, boxes, colours, sc, pq, rng, size):
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
        img = _colour_cast(img, 0.8, rng)
    if pq == 1:
        img = _add_noise(img.filter(ImageFilter.GaussianBlur(0.9)), 6, rng)
    elif pq == 0:
        img = _jpeg_roundtrip(_add_noise(img.filter(ImageFilter.GaussianBlur(2.0)), 22, rng), 8)
    return img


def make_raw_mer_bench(
    dir: str | os.PathLike,
    n_samples: int = 40,
    seed: int = 0,
    image_size: int = 128,
    *,
    n_candidates: int = 6,
    n_annotators: int = 5,
    annotator_pool: int = 8,
    p_no_majority: float = 0.06,
    p_correct_vote: float = 0.8,
) -> dict:
    """Write a raw MER-Bench release into ``dir`` and return its planted truth.

    Layout written (the builder's input, see :mod:`modeling_miescore.data.builders.mer_bench`)::

        samples.jsonl     {"sample_id", "instruction", "original_image", "category", "subtask"}
        candidates.jsonl  {"candidate_id", "sample_id", "editing_model", "image"}
        annotations.csv   annotator_id,candidate_id,overall,sc,pq   (tiers good / medium / poor)
        originals/*.jpg   candidates/*.jpg
        truth.csv         candidate_id, sample_id, editing_model, overall, sc, pq (true tiers),
                          no_majority (planted candidates whose overall votes split 2-2-1)

    Categories cycle general, general, human_basic, human_fine (the paper's 2:1:1); each sample has
    ``n_candidates`` edits (paper: 6) from distinct systems of the paper's 11, judged by
    ``n_annotators`` (paper: 5) annotators drawn from a pool.
    """
    import pandas as pd

    if n_annotators > annotator_pool:
        raise ValueError("n_annotators cannot exceed annotator_pool")
    root = Path(dir)
    (root / "originals").mkdir(parents=True, exist_ok=True)
    (root / "candidates").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 11])
    pool = _photo_pool()
    general_scenes = [n for n in _SCENES if n not in ("astronaut",)]
    annotators = [f"A{k + 1}" for k in range(annotator_pool)]
    samples, candidates, annotations, truth = [], [], [], []
    cat_cycle = ("general", "general", "human_basic", "human_fine")
    for i in range(n_samples):
        sid = f"mer-{i:05d}"
        category = cat_cycle[i % 4]
        subtask = MER_SUBTASKS[category][int(rng.integers(len(MER_SUBTASKS[category])))]
        if category == "general":
            original = _scene_crop(pool[general_scenes[int(rng.integers(len(general_scenes)))]], rng, image_size)
        else:
            original = _crop_box(pool["astronaut"], (0.2, 0.0, 0.85, 0.7), rng).resize((image_size, image_size), Image.Resampling.BILINEAR)
        n_ops = int(rng.integers(2, 6))  # paper: 2-5 operations per instruction
        regions = sorted(rng.choice(len(_REGION_BOXES), size=n_ops, replace=False).tolist())
        colour_names = [list(_COLOURS)[int(rng.integers(len(_COLOURS)))] for _ in regions]
        ops = [_MER_OPS[subtask].format(r=_REGION_NAMES[r], c=c) for r, c in zip(regions, colour_names)]
        instruction = "; ".join(ops[:-1]) + ("; and " if len(ops) > 1 else "") + ops[-1] + "."
        instruction = instruction[0].upper() + instruction[1:]
        orel = f"originals/{sid}.jpg"
        _save_jpeg(original, root / orel, quality=92)
        samples.append({"sample_id": sid, "instruction": instruction, "original_image": orel,
                        "category": category, "subtask": subtask})

        if rng.random() < 0.75:
            overall = [2, 2, 1, 1, 0, 0][:n_candidates] + [int(rng.integers(3)) for _ in range(max(0, n_candidates - 6))]
            overall = [int(t) for t in rng.permutation(overall)]
        else:
            overall = [int(rng.integers(3)) for _ in range(n_candidates)]
        systems = rng.choice(len(MER_SYSTEMS), size=min(n_candidates, len(MER_SYSTEMS)), replace=False).tolist()
        for j in range(n_candidates):
            cid = f"{sid}-c{j + 1}"
            o = overall[j]
            sc, pq = _SUBTIERS[o][int(rng.integers(len(_SUBTIERS[o])))]
            img = _mer_candidate_image(original, [_REGION_BOXES[r] for r in regions],
                                       [_COLOURS[c] for c in colour_names], sc, pq, rng, image_size)
            crel = f"candidates/{cid}.jpg"
            _save_jpeg(img, root / crel, quality=90)
            model = MER_SYSTEMS[systems[j % len(systems)]]
            candidates.append({"candidate_id": cid, "sample_id": sid, "editing_model": model, "image": crel})
            no_majority = bool(rng.random() < p_no_majority)
            v_o = _split_votes(o, rng, n_annotators) if no_majority else _votes(o, rng, n_annotators, p_correct_vote)
            v_sc = _votes(sc, rng, n_annotators, p_correct_vote)
            v_pq = _votes(pq, rng, n_annotators, p_correct_vote)
            who = rng.choice(annotator_pool, size=n_annotators, replace=False).tolist()
            for a, x, y, z in zip(who, v_o, v_sc, v_pq):
                annotations.append({"annotator_id": annotators[a], "candidate_id": cid,
                                    "overall": _TIERS[x], "sc": _TIERS[y], "pq": _TIERS[z]})
            truth.append({"candidate_id": cid, "sample_id": sid, "editing_model": model, "overall": _TIERS[o],
                          "sc": _TIERS[sc], "pq": _TIERS[pq], "no_majority": no_majority})

    with open(root / "samples.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in samples)
    with open(root / "candidates.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in candidates)
    with open(root / "annotations.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["annotator_id", "candidate_id", "overall", "sc", "pq"])
        w.writeheader()
        w.writerows(annotations)
    truth_df = pd.DataFrame(truth)
    truth_df.to_csv(root / "truth.csv", index=False)
    return {"truth": truth_df, "no_majority": truth_df.loc[truth_df["no_majority"], "candidate_id"].tolist(),
            "dir": str(root)}
