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

from ..data.schema import MOS_COLUMNS, MOS_SCALE
from ..image_io import MIEScoreInputError
from ..processing_miescore import (EditSample, as_edit_sample, build_messages, num_image_tokens, prepare_inputs,
                                   resized_image_size)

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
        raise TrainingDataError(
            f"{where} has no column(s) {', '.join(missing)}; the dataset must follow the MIE-Bench schema "
            "(build it with `miescore build-dataset mie-bench`)"
        )
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
            raise TrainingDataError(
                f"{where}: '{col}' = {value} is outside 0..{scale:g}; MIE-Bench MOS are on the 0-100 scale"
            )
        out.append(min(max(v, 0.0), 1.0))
    return out


def _patch_factor(processor) -> int:
    ip = processor.image_processor
    return int(getattr(ip, "patch_size", 16)) * int(getattr(ip, "merge_size", 2))


def _image_tokens(images, factor: int, min_pixels: int, budget: int) -> int:
    """Visual tokens of ``images`` when each is resized into ``[min(min_pixels, budget), budget]`` pixels."""
    return sum(num_image_tokens(*image.size, min_pixels=min(min_pixels, budget), max_pixels=budget, factor=factor)
               for image in images)


def _text_tokens(sample: EditSample, processor, config) -> int:
    messages, _ = build_messages(len(sample.sources), sample.instruction, config)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # Each image placeholder is one <|image_pad|> token before the processor expands it.
    return len(processor.tokenizer(text, add_special_tokens=False)["input_ids"]) - (len(sample.sources) + 1)


def count_tokens(sample: EditSample, processor, config, max_pixels: int | None = None) -> int:
    """Exact sequence length of one loaded sample after ``prepare_inputs`` (text + expanded image tokens).

    ``max_pixels`` overrides ``config.max_pixels`` for every image (used to find a budget that fits).
    """
    budget = int(max_pixels or config.max_pixels)
    return _text_tokens(sample, processor, config) + _image_tokens(
        [*sample.sources, sample.edited], _patch_factor(processor), int(config.min_pixels), budget)


def _fit_budget(sample: EditSample, processor, config, max_length: int) -> int | None:
    """Largest per-image pixel budget (<= config.max_pixels) whose sequence fits ``max_length``; None if none."""
    factor = _patch_factor(processor)
    text = _text_tokens(sample, processor, config)
    images = [*sample.sources, sample.edited]

    def length(budget: int) -> int:
        return text + _image_tokens(images, factor, int(config.min_pixels), budget)

    low, high = factor * factor, int(config.max_pixels)  # one token per image is the floor
    if length(low) > max_length:
        return None
    while high - low > factor:  # binary search on the pixel budget
        mid = (low + high) // 2
        if length(mid) <= max_length:
            low = mid
        else:
            high = mid
    return low


def prepare_dataset(
    dataset,
    processor,
    config,
    max_length: int | None = None,
    long_sequence_policy: str = "shrink",
    length_column: str = "length",
    num_proc: int | None = None,
):
    """Add the exact sequence length of every row (for length-grouped batches) and handle over-long rows.

    Sequences are never truncated (cutting inside an image's tokens corrupts the sample). A row longer than
    ``max_length`` tokens is, by ``long_sequence_policy``:

    * ``"shrink"`` (default): given a smaller per-image pixel budget (column ``max_pixels``, 0 = the config's)
      so that it fits; rows that cannot fit even at one token per image are dropped;
    * ``"drop"``: dropped;
    * ``"error"``: reported as a :class:`TrainingDataError`.

    Returns ``(dataset, report)`` with ``report = {"rows", "shrunk", "dropped", "max_length",
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
        return {length_column: n, "max_pixels": budget}

    cols = ["source_images", "edited_image", "instruction"] + (["id"] if "id" in dataset.column_names else [])
    lengths = dataset.select_columns(cols).map(measure, with_indices=True, remove_columns=cols,
                                               num_proc=num_proc, desc="measuring sequence lengths")
    n_col, b_col = np.asarray(lengths[length_column]), np.asarray(lengths["max_pixels"])
    for name in (length_column, "max_pixels"):
        if name in dataset.column_names:
            dataset = dataset.remove_columns(name)
    dataset = dataset.add_column(length_column, n_col.tolist()).add_column("max_pixels", b_col.tolist())
    too_long = np.flatnonzero(b_col != 0)
    dropped = np.flatnonzero(b_col < 0)
    if long_sequence_policy == "error" and len(too_long):
        raise TrainingDataError(
            f"{len(too_long)} row(s) are longer than max_length={max_length} tokens (longest {int(n_col.max())}); "
            "raise max_length, lower max_pixels, or use long_sequence_policy='shrink' or 'drop'"
        )
    if len(dropped):
        keep = np.flatnonzero(b_col >= 0)
        dataset = dataset.select(keep.tolist())
    report = {"rows": int(len(n_col)), "shrunk": int(len(too_long) - len(dropped)), "dropped": int(len(dropped)),
              "max_length": max_length, "longest": int(n_col.max()) if len(n_col) else 0}
    if report["shrunk"] or report["dropped"]:
        logger.warning(
            "%d of %d rows exceed max_length=%s tokens: %d get a smaller image budget, %d are dropped",
            len(too_long), len(n_col), max_length, report["shrunk"], report["dropped"],
        )
    return dataset, report


class _ConfigView:
    """Read-only view of a config with a few fields replaced (the model's config itself is left alone)."""

    def __init__(self, base, **overrides):
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._base, name)


def _shrink_to_budget(image, budget: int, factor: int, min_pixels: int):
    h, w = resized_image_size(*image.size, min_pixels=min(min_pixels, budget), max_pixels=budget, factor=factor)
    if (w, h) == image.size:
        return image
    from PIL import Image

    return image.resize((w, h), Image.Resampling.BICUBIC)


class MIEScoreCollator:
    """List of MIE-Bench rows -> model inputs plus ``labels`` (B, 3) = MOS / 100 in [0, 1].

    Uses :func:`processing_miescore.prepare_inputs`, so training sees exactly the prompt and image budget
    that scoring uses. Output: ``input_ids`` / ``attention_mask`` / ``mm_token_type_ids`` (B, L),
    ``pixel_values`` (patches, C*T*P*P), ``image_grid_thw`` (images, 3), ``labels`` (B, 3) float32.
    A row with a positive ``max_pixels`` (set by :func:`prepare_dataset` for over-long rows) has its images
    resized to that budget first.
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
        if any(b > 0 for b in budgets):
            # Resize every image of the batch to its final grid here (the shrunk rows to their own budget) and
            # stop the processor from upscaling them back to config.min_pixels; the others keep their usual size.
            factor = _patch_factor(self.processor)
            resized = []
            for sample, budget in zip(samples, budgets):
                cap = budget if budget > 0 else int(config.max_pixels)
                fit = lambda im: _shrink_to_budget(im, cap, factor, int(config.min_pixels))  # noqa: E731
                resized.append(EditSample([fit(s) for s in sample.sources], fit(sample.edited), sample.instruction,
                                          sample.id))
            samples = resized
            config = _ConfigView(config, min_pixels=factor * factor)
        batch = prepare_inputs(self.processor, samples, config)
        batch["labels"] = torch.tensor(labels, dtype=torch.float32)
        return batch

