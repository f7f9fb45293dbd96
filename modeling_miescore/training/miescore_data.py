"""MIE-Bench rows -> MIEScore training batches: labels (MOS / 100), exact sequence lengths for length-grouped
batches, over-long rows shrunk (smaller image budget) or dropped, never truncated, and the collator.

Paper: MIEScore, section "Multi-Dimensional Supervised Fine-Tuning" (sequences of at most 4096 tokens, images
of at most 1,048,576 pixels; supplement "Details of Training Configuration").
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..hub.backbone_families import GENERIC, QWEN_VL, family_of, min_image_budget, qwen_patch_factor
from ..data.schema import MOS_COLUMNS, MOS_SCALE
from ..hub.errors import MIEScoreInputError
from ..hub.image_io import resize_to_budget
from ..hub.miescore_score_heads import score_head_class
from ..hub.processing_miescore import EditSample, as_edit_sample, build_messages, image_prompt_tokens, prepare_inputs

logger = logging.getLogger(__name__)

__all__ = ["LABEL_COLUMNS", "MIEScoreCollator", "TrainingDataError", "count_tokens", "labels_of", "prepare_dataset",
           "row_to_sample"]

# MIE-Bench columns, in the head order (VQ, IF, AP) of `MIEScoreConfig.score_names`.
LABEL_COLUMNS = MOS_COLUMNS


class TrainingDataError(MIEScoreInputError):
    """A training/evaluation row cannot be used (missing column, bad MOS, no image); the message says which."""


def row_to_sample(row: Mapping[str, Any], where: str = "row") -> EditSample:
    """A MIE-Bench row (``source_images``, ``edited_image``, ``instruction``) -> :class:`EditSample` (not loaded)."""
    missing = [k for k in ("source_images", "edited_image", "instruction") if k not in row]
    if missing:
        raise TrainingDataError(f"{where} has no column(s) {', '.join(missing)}; the dataset must follow the MIE-Bench "
                                "schema (build it with `miescore build-dataset mie-bench`)")
    sample = {"sources": row["source_images"], "edited": row["edited_image"], "instruction": row["instruction"],
              "id": row.get("id")}
    return as_edit_sample(sample, where=where)


def labels_of(row: Mapping[str, Any], columns: Sequence[str] = LABEL_COLUMNS, scale: float = MOS_SCALE,
              where: str = "row") -> list[float]:
    """MOS of one row divided by ``scale`` -> list of ``len(columns)`` floats in [0, 1]."""
    out = []
    for col in columns:
        if col not in row:
            raise TrainingDataError(f"{where} has no column '{col}'; training needs {', '.join(columns)}")
        value = row[col]
        if value is None or not math.isfinite(float(value)):
            raise TrainingDataError(f"{where} has no valid '{col}' ({value!r}); drop the row or fix its MOS")
        v = float(value) / scale
        if not -1e-6 <= v <= 1.0 + 1e-6:
            raise TrainingDataError(f"{where}: '{col}' = {value} is outside 0..{scale:g}; MIE-Bench MOS are on the "
                                    "0-100 scale")
        out.append(min(max(v, 0.0), 1.0))
    return out


def _image_tokens(images, config, budget: int) -> int:
    """Prompt tokens of ``images`` with a per-image pixel budget (``processing_miescore.image_prompt_tokens``)."""
    return sum(image_prompt_tokens(*image.size, config, max_pixels=budget) for image in images)


def _text_tokens(sample: EditSample, processor, config) -> int:
    messages, _ = build_messages(len(sample.sources), sample.instruction, config)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # Each image placeholder (<|image_pad|>, <IMG_CONTEXT>) is one token before the processor expands it.
    return len(processor.tokenizer(text, add_special_tokens=False)["input_ids"]) - (len(sample.sources) + 1)


def count_tokens(sample: EditSample, processor, config, max_pixels: int | None = None) -> int:
    """Exact sequence length of one loaded sample after ``prepare_inputs`` (text + expanded image tokens).

    ``max_pixels`` overrides ``config.max_pixels`` for every image (used to find a budget that fits). Qwen-VL and
    InternVL backbones are counted from the image sizes; other families by running their processor. With the
    score head ``lm_digits`` the answer (about 20 tokens) comes on top.
    """
    if family_of(config) is GENERIC:
        return int(prepare_inputs(processor, [sample], config)["input_ids"].shape[1])
    budget = int(max_pixels or config.max_pixels)
    return _text_tokens(sample, processor, config) + _image_tokens([*sample.sources, sample.edited], config, budget)


def _fit_budget(sample: EditSample, processor, config, max_length: int) -> int | None:
    """Largest per-image pixel budget (<= config.max_pixels) whose sequence fits ``max_length``; None if none
    (also for backbone families whose pixel budget is not known: their rows are dropped)."""
    if family_of(config) is GENERIC:
        return None
    text = _text_tokens(sample, processor, config)
    images = [*sample.sources, sample.edited]

    def length(budget: int) -> int:
        return text + _image_tokens(images, config, budget)

    low, high = min_image_budget(config), int(config.max_pixels)  # one token (Qwen-VL) or tile (InternVL) each
    if length(low) > max_length:
        return None
    step = qwen_patch_factor(config) if family_of(config) is QWEN_VL else low  # InternVL: whole tiles
    while high - low > step:  # binary search on the pixel budget
        mid = (low + high) // 2
        if length(mid) <= max_length:
            low = mid
        else:
            high = mid
    return low


def prepare_dataset(dataset, processor, config, max_length: int | None = None, long_sequence_policy: str = "shrink",
                    num_proc: int | None = None):
    """Add the exact sequence length of every row (for length-grouped batches) and handle over-long rows.

    Sequences are never truncated (cutting inside an image's tokens corrupts the sample). A row longer than
    ``max_length`` tokens is, by ``long_sequence_policy``:

    * ``"shrink"`` (default): given a smaller per-image pixel budget (column ``max_pixels``, 0 = the config's)
      so that it fits; rows that cannot fit even at one token per image are dropped;
    * ``"drop"``: dropped;
    * ``"error"``: reported as a :class:`TrainingDataError`.

    The lengths are the column ``length`` (``TrainingArguments.length_column_name``'s default). Returns
    ``(dataset, report)`` with ``report = {"rows", "shrunk", "dropped", "max_length",
    "longest"}``; the counts are also logged.
    """
    if long_sequence_policy not in ("shrink", "drop", "error"):
        raise ValueError(f"long_sequence_policy must be 'shrink', 'drop' or 'error', got {long_sequence_policy!r}")

    def measure(row, idx):
        sample = row_to_sample(row, where=f"row {idx}").load(max(int(config.max_pixels) * 16, 1 << 26))
        n = count_tokens(sample, processor, config)
        budget = 0
        if max_length and n > max_length:
            if long_sequence_policy == "shrink":
                fit = _fit_budget(sample, processor, config, max_length)
                budget = -1 if fit is None else fit
            else:
                budget = -1
        return {"length": n, "max_pixels": budget}

    cols = ["source_images", "edited_image", "instruction"] + (["id"] if "id" in dataset.column_names else [])
    lengths = dataset.select_columns(cols).map(measure, with_indices=True, remove_columns=cols,
                                               num_proc=num_proc, desc="measuring sequence lengths")
    n_col, b_col = np.asarray(lengths["length"]), np.asarray(lengths["max_pixels"])
    for name in ("length", "max_pixels"):
        if name in dataset.column_names:
            dataset = dataset.remove_columns(name)
    dataset = dataset.add_column("length", n_col.tolist()).add_column("max_pixels", b_col.tolist())
    too_long = np.flatnonzero(b_col != 0)
    dropped = np.flatnonzero(b_col < 0)
    if long_sequence_policy == "error" and len(too_long):
        raise TrainingDataError(f"{len(too_long)} row(s) are longer than max_length={max_length} tokens (longest "
                                f"{int(n_col.max())}); raise max_length, lower max_pixels, or use "
                                "long_sequence_policy='shrink' or 'drop'")
    if len(dropped):
        keep = np.flatnonzero(b_col >= 0)
        dataset = dataset.select(keep.tolist())
    report = {"rows": int(len(n_col)), "shrunk": int(len(too_long) - len(dropped)), "dropped": int(len(dropped)),
              "max_length": max_length, "longest": int(n_col.max()) if len(n_col) else 0}
    if report["shrunk"] or report["dropped"]:
        logger.warning("%d of %d rows exceed max_length=%s tokens: %d get a smaller image budget, %d are dropped",
                       len(too_long), len(n_col), max_length, report["shrunk"], report["dropped"])
    return dataset, report


class _ConfigView:
    """Read-only view of a config with a few fields replaced (the model's config itself is left alone)."""

    def __init__(self, base, **overrides):
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._base, name)


def _resized_to_budgets(samples: Sequence[EditSample], budgets: Sequence[int], config) -> list[EditSample]:
    """Qwen-VL: every image of the batch resized to its final grid (the shrunk rows to their own budget), so that
    one processor call with ``min_pixels`` = one token gives each row its own budget."""
    factor = qwen_patch_factor(config)
    resized = []
    for sample, budget in zip(samples, budgets):
        cap = budget if budget > 0 else int(config.max_pixels)
        fit = lambda im: resize_to_budget(im, cap, min(int(config.min_pixels), cap), factor)  # noqa: E731
        resized.append(EditSample([fit(s) for s in sample.sources], fit(sample.edited), sample.instruction, sample.id))
    return resized


# per-token inputs of a processor output and the value their padding gets (input_ids: the pad token)
_PER_TOKEN_PAD = {"attention_mask": 0, "mm_token_type_ids": 0, "token_type_ids": 0}


def _prepare_rows_apart(processor, samples: Sequence[EditSample], budgets: Sequence[int], config) -> dict:
    """InternVL: each row through the processor with its own tile budget, then padded into one batch (the tile
    count, not the image size, sets an InternVL image's length, so the Qwen-VL resize trick does not apply)."""
    rows = [prepare_inputs(processor, [sample], _ConfigView(config, max_pixels=budget) if budget > 0 else config)
            for sample, budget in zip(samples, budgets)]
    width = max(int(row["input_ids"].shape[1]) for row in rows)
    pad_values = {"input_ids": processor.tokenizer.pad_token_id or 0, **_PER_TOKEN_PAD}
    batch = {}
    for key in rows[0].keys():
        if key not in pad_values:  # pixel_values (tiles): concatenated in row order
            batch[key] = torch.cat([row[key] for row in rows])
            continue
        padded = []
        for row in rows:
            pad = row[key].new_full((1, width - row[key].shape[1]), pad_values[key])
            padded.append(torch.cat([pad, row[key]] if config.padding_side == "left" else [row[key], pad], dim=1))
        batch[key] = torch.cat(padded)
    return batch


class MIEScoreCollator:
    """List of MIE-Bench rows -> model inputs plus ``labels`` (B, 3) = MOS / 100 in [0, 1].

    Uses :func:`processing_miescore.prepare_inputs`, so training sees exactly the prompt and image budget
    that scoring uses. Output: the backbone processor's inputs (Qwen-VL: ``input_ids`` / ``attention_mask`` /
    ``mm_token_type_ids`` (B, L), ``pixel_values`` (patches, C*T*P*P), ``image_grid_thw`` (images, 3); InternVL:
    ``input_ids`` / ``attention_mask``, ``pixel_values`` (tiles, C, H, W)), ``labels`` (B, 3) float32 and, for the
    score head ``lm_digits``, ``answer_digits`` (B, 3): the labels rounded onto 0..lm_score_max, written into the
    teacher-forced answer. A row with a positive ``max_pixels`` (set by :func:`prepare_dataset` for over-long rows)
    gets that image budget.
    """

    def __init__(self, processor, config, label_columns: Sequence[str] = LABEL_COLUMNS, label_scale: float = MOS_SCALE,
                 max_image_pixels: int | None = None):
        self.processor = processor
        self.config = config
        self.label_columns = tuple(label_columns)
        self.label_scale = float(label_scale)
        # Decoding limit for images handed over as paths (PIL decompression-bomb guard).
        self.max_image_pixels = max_image_pixels or max(int(config.max_pixels) * 16, 1 << 26)
        if len(self.label_columns) != len(config.score_names):
            raise ValueError(f"{len(self.label_columns)} label columns for {len(config.score_names)} score names")

    def __call__(self, rows: Sequence[Mapping[str, Any]]):
        if not rows:
            raise TrainingDataError("empty batch")
        samples, labels, budgets = [], [], []
        for i, row in enumerate(rows):
            where = f"row {row.get('id', i)!s}"
            samples.append(row_to_sample(row, where=where).load(self.max_image_pixels))
            labels.append(labels_of(row, self.label_columns, self.label_scale, where=where))
            budgets.append(int(row.get("max_pixels") or 0))
        config = self.config
        if not any(b > 0 for b in budgets):
            batch = prepare_inputs(self.processor, samples, config)
        elif family_of(config) is QWEN_VL:
            # stop the processor from upscaling the resized images back to config.min_pixels
            batch = prepare_inputs(self.processor, _resized_to_budgets(samples, budgets, config),
                                   _ConfigView(config, min_pixels=qwen_patch_factor(config) ** 2))
        else:
            batch = _prepare_rows_apart(self.processor, samples, budgets, config)
        batch["labels"] = torch.tensor(labels, dtype=torch.float32)
        batch.update(score_head_class(config.score_head).training_inputs(batch["labels"], config))
        return batch
