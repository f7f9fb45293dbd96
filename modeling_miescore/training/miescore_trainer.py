"""MIEScore regression fine-tuning: data collator, LoRA setup, ``Trainer`` subclass, metrics and export.

Paper: MIEScore, section "Multi-Dimensional Supervised Fine-Tuning" and the supplement "Details of Training
Configuration". The recipe (``trainers/train_miescore.py`` + ``trainers/configs/*.yaml``) is a thin entry
point over this module:

    model, processor = load_base_model("Qwen/Qwen3-VL-8B-Instruct", max_pixels=1_048_576)
    model = apply_lora(model, make_lora_config())                       # LM-only LoRA, head fully trained
    train = prepare_dataset(ds["train"], processor, model.config, max_length=4096)
    trainer = MIEScoreTrainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                              data_collator=MIEScoreCollator(processor, model.config),
                              compute_metrics=compute_correlation_metrics)
    trainer.train(resume_from_checkpoint=True)   # queues + loss stage are restored with the checkpoint
    export_model(base, adapter_dir, out_dir, card=...)                  # merged/ (Hub-native) + adapter/

Not a Hub file: it imports peft/datasets/huggingface_hub and is never copied into checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..data.schema import MOS_COLUMNS, MOS_SCALE
from ..image_io import MIEScoreInputError
from .losses import LossConfig, MIEScoreLoss
from ..processing_miescore import EditSample, as_edit_sample, build_messages, prepare_inputs

logger = logging.getLogger(__name__)

__all__ = [
    "LABEL_COLUMNS",
    "DIM_NAMES",
    "LM_LORA_TARGETS",
    "LOSS_STATE_NAME",
    "TrainingDataError",
    "MIEScoreCollator",
    "MIEScoreTrainer",
    "ModelCardInfo",
    "apply_lora",
    "compute_correlation_metrics",
    "count_tokens",
    "export_model",
    "load_base_model",
    "load_loss_state",
    "loss_state_filename",
    "save_loss_state",
    "labels_of",
    "make_lora_config",
    "prepare_dataset",
    "render_model_card",
    "resolve_checkpoint",
    "row_to_sample",
]

# MIE-Bench columns, in the head order (VQ, IF, AP) of `MIEScoreConfig.score_names`.
LABEL_COLUMNS = MOS_COLUMNS
DIM_NAMES = ("vq", "if", "ap")

# Supplement "Details of Training Configuration": LoRA on the attention and MLP projections of the language
# model only; the vision tower stays frozen. The regex is matched with re.fullmatch against module names such
# as "backbone.language_model.layers.3.self_attn.q_proj" (under PEFT, with a "base_model.model." prefix).
LM_LORA_TARGETS = r".*backbone\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"

LOSS_STATE_NAME = "loss_state.safetensors"


class TrainingDataError(MIEScoreInputError):
    """A training/evaluation row cannot be used (missing column, bad MOS, no image); the message says which."""


# ----------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------
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


def _image_grid(size: tuple[int, int], factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) in pixels after the Qwen-VL resize rule (multiples of ``factor`` inside the budget)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    width, height = size
    return smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)


def _text_tokens(sample: EditSample, processor, config) -> int:
    messages, _ = build_messages(len(sample.sources), sample.instruction, config)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # Each image placeholder is one <|image_pad|> token before the processor expands it.
    return len(processor.tokenizer(text, add_special_tokens=False)["input_ids"]) - (len(sample.sources) + 1)


def count_tokens(sample: EditSample, processor, config, max_pixels: int | None = None) -> int:
    """Exact sequence length of one loaded sample after ``prepare_inputs`` (text + expanded image tokens).

    ``max_pixels`` overrides ``config.max_pixels`` for every image (used to find a budget that fits).
    """
    factor = _patch_factor(processor)
    budget = int(max_pixels or config.max_pixels)
    total = _text_tokens(sample, processor, config)
    for image in [*sample.sources, sample.edited]:
        h, w = _image_grid(image.size, factor, min(config.min_pixels, budget), budget)
        total += (h // factor) * (w // factor)
    return total


def _fit_budget(sample: EditSample, processor, config, max_length: int) -> int | None:
    """Largest per-image pixel budget (<= config.max_pixels) whose sequence fits ``max_length``; None if none."""
    factor = _patch_factor(processor)
    text = _text_tokens(sample, processor, config)
    images = [*sample.sources, sample.edited]

    def length(budget: int) -> int:
        return text + sum(
            (h // factor) * (w // factor)
            for h, w in (_image_grid(im.size, factor, min(config.min_pixels, budget), budget) for im in images)
        )

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
    h, w = _image_grid(image.size, factor, min(min_pixels, budget), budget)
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


# ----------------------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------------------
def _correlations(pred: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """(SRCC, PLCC) from ``evaluation.metrics.correlation.correlations``; NaN when either side is constant."""
    from ..evaluation.metrics.correlation import correlations

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant predictions early in training: NaN, reported as such
        c = correlations(pred, target, logistic=False)
    return float(c["srcc"]), float(c["plcc"])


def compute_correlation_metrics(eval_pred, dim_names: Sequence[str] = DIM_NAMES) -> dict[str, float]:
    """``Trainer`` ``compute_metrics``: per-dimension SRCC / PLCC of predictions (N, 3) vs labels (N, 3).

    Returns ``srcc_vq``, ``plcc_vq``, ... ``srcc_mean``, ``plcc_mean`` and ``mean_corr`` (the mean of all six,
    the default ``metric_for_best_model``). An undefined correlation (constant predictions) is NaN in the
    per-dimension entries and counts as 0 in the means, so that the best-checkpoint comparison stays defined.
    """
    preds, labels = eval_pred.predictions, eval_pred.label_ids
    if isinstance(preds, (tuple, list)):
        preds = preds[0]
    preds = np.asarray(preds, dtype=np.float64).reshape(len(labels), -1)
    labels = np.asarray(labels, dtype=np.float64).reshape(len(labels), -1)
    out: dict[str, float] = {}
    srccs, plccs = [], []
    for d, name in enumerate(dim_names):
        if len(labels) < 3:
            s, p = float("nan"), float("nan")
        else:
            s, p = _correlations(preds[:, d], labels[:, d])
        out[f"srcc_{name}"], out[f"plcc_{name}"] = s, p
        srccs.append(0.0 if math.isnan(s) else s)
        plccs.append(0.0 if math.isnan(p) else p)
    out["srcc_mean"] = float(np.mean(srccs))
    out["plcc_mean"] = float(np.mean(plccs))
    out["mean_corr"] = float(np.mean(srccs + plccs))
    return out


# ----------------------------------------------------------------------------------------------------------
# model and LoRA
# ----------------------------------------------------------------------------------------------------------
def load_base_model(name_or_path: str, dtype: torch.dtype | str | None = None, attn_implementation: str | None = None,
                    **config_kwargs):
    """``(MIEScoreModel, processor)`` from a MIEScore checkpoint, or a fresh scorer from a plain Qwen3-VL one.

    ``config_kwargs`` (``max_pixels``, ``min_pixels``, ``head_hidden_size``, ...) override/define config fields.
    The package's own class is used, so ``save_pretrained`` copies the Hub files (``auto_map``) into exports.
    """
    from transformers import AutoProcessor

    from ..scoring.loading import read_checkpoint_config
    from ..modeling_miescore import MIEScoreModel

    if isinstance(dtype, str):
        dtype = None if dtype == "auto" else getattr(torch, dtype)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model_type = read_checkpoint_config(os.fspath(name_or_path)).get("model_type")
    if model_type == "miescore":
        model = MIEScoreModel.from_pretrained(name_or_path, **kwargs)
        for key, value in config_kwargs.items():
            setattr(model.config, key, value)
        model.config.validate_scoring_fields()
        processor = AutoProcessor.from_pretrained(name_or_path, trust_remote_code=True)
    elif model_type in ("qwen3_vl", "qwen3_vl_moe"):
        processor = AutoProcessor.from_pretrained(name_or_path)
        model = MIEScoreModel.from_backbone(name_or_path, processor=processor, dtype=dtype, **config_kwargs)
        if attn_implementation:
            model.set_attn_implementation(attn_implementation)
    else:
        raise MIEScoreInputError(
            f"'{name_or_path}' has model_type={model_type!r}; pass a MIEScore checkpoint or a Qwen3-VL checkpoint "
            "(e.g. Qwen/Qwen3-VL-8B-Instruct)"
        )
    model.processor = processor
    return model, processor


def make_lora_config(r: int = 64, alpha: int = 32, dropout: float = 0.0, target_modules: str = LM_LORA_TARGETS,
                     modules_to_save: Sequence[str] = ("head",)):
    """PEFT ``LoraConfig`` of the paper (supplement: r = 64, alpha = 32, dropout 0, LM projections only).

    The regression head is in ``modules_to_save``: trained in full and stored in the adapter.
    """
    from peft import LoraConfig

    return LoraConfig(r=int(r), lora_alpha=int(alpha), lora_dropout=float(dropout), target_modules=target_modules,
                      modules_to_save=list(modules_to_save), bias="none")


def apply_lora(model, lora_config):
    """Wrap ``model`` with PEFT; returns the ``PeftModel``. Checks that only the intended modules train."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config)
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    if not any("lora_" in n for n in names):
        raise ValueError(f"LoRA matched no module with target_modules={lora_config.target_modules!r}")
    return peft_model


# ----------------------------------------------------------------------------------------------------------
# loss state files (never pickle: safetensors, one file per data-parallel rank)
# ----------------------------------------------------------------------------------------------------------
def loss_state_filename(rank: int = 0, world_size: int = 1) -> str:
    """``loss_state.safetensors`` on one process; ``loss_state_rank{k}.safetensors`` per rank under DDP
    (each rank keeps its own memory queues)."""
    return LOSS_STATE_NAME if world_size <= 1 else f"loss_state_rank{rank}.safetensors"


def save_loss_state(loss_fn: MIEScoreLoss, path: str | os.PathLike) -> None:
    from safetensors.torch import save_file

    tensors = {k: torch.as_tensor(v).detach().cpu().contiguous() for k, v in loss_fn.state_dict().items()}
    save_file(tensors, os.fspath(path), metadata={"format": "pt", "kind": "MIEScoreLoss state"})


def load_loss_state(loss_fn: MIEScoreLoss, path: str | os.PathLike) -> None:
    from safetensors.torch import load_file

    loss_fn.load_state_dict(load_file(os.fspath(path)))


def resolve_checkpoint(resume_from_checkpoint: str | bool | None, output_dir: str) -> str | None:
    """``True`` -> the last ``checkpoint-*`` in ``output_dir`` (error if none); a path -> itself; else None."""
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in ("true", "last", "auto"):
        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise MIEScoreInputError(
                f"resume_from_checkpoint asks for the last checkpoint but {output_dir} has no checkpoint-* folder"
            )
        return last
    path = os.fspath(resume_from_checkpoint)
    if not os.path.isdir(path):
        raise MIEScoreInputError(f"checkpoint folder {path} not found; pass an existing checkpoint-* folder")
    return path


# ----------------------------------------------------------------------------------------------------------
# trainer
# ----------------------------------------------------------------------------------------------------------
class MIEScoreTrainer(Trainer):
    """``Trainer`` with the MIEScore loss (eq. 9/13): Huber + rank + PLCC against cross-batch memory queues.

    * The final-stage switch (rank/PLCC weights x ``final_stage_factor``) follows training progress:
      ``global_step / max_steps``, compared with ``loss_config.final_stage_start`` (0.8 = the start of the
      last of 5 epochs, supplement "Supervised Fine-Tuning").
    * The queues and the stage are saved in every checkpoint folder (``loss_state*.safetensors``) and restored
      by ``train(resume_from_checkpoint=...)`` (``True`` = the last checkpoint in ``output_dir``).
    * Evaluation uses a queue-free copy of the loss (the training queues are left untouched) and returns the
      scores (N, 3) as predictions, so ``compute_correlation_metrics`` can score them.
    * The loss is a per-micro-batch mean; the Trainer divides it by the accumulation steps.
    """

    loss_is_scaled_for_ga = False

    def __init__(self, *args, loss_config: LossConfig | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if self.args.remove_unused_columns:
            logger.info("remove_unused_columns=True would drop the image columns; setting it to False")
            self.args.remove_unused_columns = False
        if not self.args.label_names:
            self.args.label_names = ["labels"]
        self.label_names = self.args.label_names
        # The model's forward takes **kwargs, which would make Trainer count "items" from the float labels.
        self.model_accepts_loss_kwargs = False
        self.loss_config = loss_config or LossConfig()
        self.loss_fn = MIEScoreLoss(self.loss_config)
        eval_cfg = LossConfig.from_dict({**self.loss_config.to_dict(), "rank_queue_size": 0, "plcc_queue_size": 0,
                                         "final_stage_start": None})
        self.eval_loss_fn = MIEScoreLoss(eval_cfg)
        self._component_sums: dict[str, float] = defaultdict(float)
        self._component_count = 0

    # -- loss ----------------------------------------------------------------------------------------------
    def training_progress(self) -> float:
        """Fraction of training done, in [0, 1], counted in optimizer steps."""
        total = self.state.max_steps or 0
        return float(self.state.global_step) / total if total > 0 else 0.0

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        inputs.pop("max_pixels", None)
        inputs.pop("length", None)
        outputs = model(**inputs)
        scores = outputs["scores"] if isinstance(outputs, Mapping) else outputs[0]
        if model.training:
            # Tolerance: progress 0.8 computed as 8/10 must count as the final stage.
            self.loss_fn.update(self.training_progress() + 1e-9)
            loss, logs = self.loss_fn(scores, labels)
            for key in ("huber", "rank", "plcc", "final_stage", "rank_queue_len"):
                self._component_sums[key] += logs[key]
            self._component_count += 1
        else:
            loss, _ = self.eval_loss_fn(scores, labels, update_queues=False)
        return (loss, {"scores": scores.detach().float()}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._component_count:
            for key, total in self._component_sums.items():
                logs[f"loss_{key}"] = round(total / self._component_count, 6)
            self._component_sums.clear()
            self._component_count = 0
        super().log(logs, start_time)

    # -- checkpoints ---------------------------------------------------------------------------------------
    def _loss_state_file(self, folder: str) -> str:
        return os.path.join(folder, loss_state_filename(self.args.process_index, self.args.world_size))

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if os.path.isdir(folder):
            save_loss_state(self.loss_fn, self._loss_state_file(folder))

    def load_loss_state_from(self, checkpoint: str) -> bool:
        """Restore the queues/stage saved in ``checkpoint``; returns False (with a warning) if none is there."""
        path = self._loss_state_file(checkpoint)
        if not os.path.isfile(path) and os.path.isfile(os.path.join(checkpoint, LOSS_STATE_NAME)):
            path = os.path.join(checkpoint, LOSS_STATE_NAME)  # e.g. resumed on a different number of processes
        if not os.path.isfile(path):
            logger.warning("no loss state in %s: the memory queues start empty", checkpoint)
            return False
        load_loss_state(self.loss_fn, path)
        return True

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        checkpoint = resolve_checkpoint(resume_from_checkpoint, self.args.output_dir)
        self.loss_fn = MIEScoreLoss(self.loss_config)
        if checkpoint is not None:
            self.load_loss_state_from(checkpoint)
        return super().train(resume_from_checkpoint=checkpoint, trial=trial, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# export and model card
# ----------------------------------------------------------------------------------------------------------
@dataclass
class ModelCardInfo:
    """What the generated model card states. ``metrics`` holds eval metrics (``eval_srcc_vq``, ...)."""

    model_name: str = "MIEScore"
    base_model: str | None = None
    dataset: str | None = None
    dataset_split_sizes: dict[str, int] = field(default_factory=dict)
    eval_split: str = "validation"
    metrics: dict[str, float] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    license: str = "apache-2.0"
    tags: list[str] = field(default_factory=lambda: ["miescore", "image-editing", "image-quality-assessment",
                                                     "reward-model", "multi-image"])
    notes: str = ""


def _card_metadata(info: ModelCardInfo, adapter: bool):
    from huggingface_hub import EvalResult, ModelCardData

    results = []
    for dim, label in zip(DIM_NAMES, ("visual quality", "instruction following", "attribute preservation")):
        for metric in ("srcc", "plcc"):
            value = info.metrics.get(f"eval_{metric}_{dim}", info.metrics.get(f"{metric}_{dim}"))
            if value is None or not math.isfinite(float(value)):
                continue
            results.append(EvalResult(
                task_type="image-text-to-text", task_name="Multi-source image edit assessment",
                dataset_type=info.dataset or "mie-bench", dataset_name="MIE-Bench", dataset_split=info.eval_split,
                metric_type=metric, metric_value=round(float(value), 4), metric_name=f"{metric.upper()} ({label})",
            ))
    tags = list(info.tags) + (["lora", "peft"] if adapter else [])
    if adapter and info.base_model:
        tags.append(f"base_model:adapter:{info.base_model}")
    return ModelCardData(
        license=info.license,
        library_name="peft" if adapter else "transformers",
        # No Hub task means "scores an image-text input"; image-text-to-text is the closest input modality.
        pipeline_tag="image-text-to-text",
        base_model=info.base_model,
        datasets=[info.dataset] if info.dataset else None,
        tags=tags,
        metrics=["spearmanr", "pearsonr"],
        model_name=info.model_name,
        eval_results=results or None,
    )


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list, tuple)):
        return "`" + json.dumps(v) + "`"
    return f"`{v}`" if isinstance(v, str) else str(v)


def render_model_card(info: ModelCardInfo, adapter: bool = False) -> str:
    """Model card (README.md) text: YAML metadata (license, library, pipeline tag, base model, datasets, tags,
    model-index) followed by usage, training data, hyper-parameters and validation metrics."""
    from huggingface_hub import ModelCard

    data = _card_metadata(info, adapter)
    lines = [f"# {info.model_name}", ""]
    lines.append(
        "A MIEScore evaluator for multi-source image editing: a Qwen3-VL backbone with a 3-output regression head "
        "predicting visual quality (VQ), instruction following (IF) and attribute preservation (AP) on the 0-100 "
        "MOS scale, plus the overall score VQ^0.3 * IF^0.4 * AP^0.3 (MIEScore paper, eq. 2)."
    )
    lines.append("")
    lines.append("## Usage")
    lines.append("")
    if adapter:
        lines += [
            "This folder is a PEFT LoRA adapter (the regression head is stored in full). Load the base scorer with",
            "`trust_remote_code=True`, then the adapter (`AutoPeftModel` cannot resolve the remote class):",
            "",
            "```python",
            "from peft import PeftModel",
            "from transformers import AutoModel",
            f"base = AutoModel.from_pretrained({(info.hyperparameters.get('base_checkpoint') or info.base_model)!r}, "
            "trust_remote_code=True)",
            "model = PeftModel.from_pretrained(base, 'path/to/this/adapter').merge_and_unload()",
            "```",
        ]
    else:
        lines += [
            "```python",
            "from transformers import AutoModel",
            "model = AutoModel.from_pretrained('path/or/repo', trust_remote_code=True)",
            "print(model.score(['source1.jpg', 'source2.jpg'], 'edited.jpg', 'Put the cat from image 2 on the sofa'))",
            "# {'visual_quality': ..., 'instruction_following': ..., 'attribute_preservation': ..., 'overall': ...}",
            "```",
            "",
            "Or with the `miescore` package: `miescore score --model path/or/repo --source s1.jpg --source s2.jpg "
            "--edited e.jpg --instruction '...'`.",
        ]
    lines += ["", "## Training data", ""]
    if info.dataset:
        lines.append(f"Fine-tuned on `{info.dataset}` (MIE-Bench format: MOS per dimension from 15 raters, "
                     "BT.500-screened; labels are MOS / 100).")
    if info.dataset_split_sizes:
        lines.append("")
        lines.append("| split | rows |")
        lines.append("|---|---|")
        for split, n in info.dataset_split_sizes.items():
            lines.append(f"| {split} | {n} |")
    lines += ["", "## Training procedure", ""]
    lines.append(
        "Multi-dimensional supervised fine-tuning (MIEScore paper, section \"Multi-Dimensional Supervised "
        "Fine-Tuning\"): L = lambda_h * Huber + lambda_r * rank + lambda_p * (1 - PLCC) per dimension, the rank and "
        "PLCC terms computed against cross-batch memory queues; the rank/PLCC weights are raised in the final stage."
    )
    if info.hyperparameters:
        lines += ["", "### Hyper-parameters", "", "| parameter | value |", "|---|---|"]
        for key, value in info.hyperparameters.items():
            lines.append(f"| {key} | {_fmt_value(value)} |")
    lines += ["", f"## Evaluation ({info.eval_split} split)", ""]
    shown = {k: v for k, v in info.metrics.items() if isinstance(v, (int, float))}
    if shown:
        lines += ["| dimension | SRCC | PLCC |", "|---|---|---|"]
        for dim, label in zip(DIM_NAMES, ("visual quality", "instruction following", "attribute preservation")):
            s = shown.get(f"eval_srcc_{dim}", shown.get(f"srcc_{dim}"))
            p = shown.get(f"eval_plcc_{dim}", shown.get(f"plcc_{dim}"))
            lines.append(f"| {label} | {_fmt_value(float(s)) if s is not None else '-'} | "
                         f"{_fmt_value(float(p)) if p is not None else '-'} |")
        others = {k: v for k, v in shown.items() if "srcc_" not in k and "plcc_" not in k}
        if others:
            lines += ["", "Other metrics: " + ", ".join(f"{k} = {_fmt_value(float(v))}" for k, v in others.items())]
    else:
        lines.append("No evaluation metrics were recorded.")
    if info.notes:
        lines += ["", "## Notes", "", info.notes]
    lines += ["", "## Citation", "", "MIEScore / MIE-Bench (multi-source image editing evaluation).", ""]
    card = ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n{{ body }}\n",
                                   body="\n".join(lines))
    return str(card)


def export_model(base_model: str, adapter_dir: str | os.PathLike | None, output_dir: str | os.PathLike, *,
                 card: ModelCardInfo | None = None, dtype: torch.dtype | str | None = None,
                 base_config_overrides: Mapping[str, Any] | None = None, merged_name: str = "merged",
                 adapter_name: str = "adapter") -> dict[str, str]:
    """Write ``output_dir/merged`` (a Hub-native MIEScore checkpoint: weights, config with ``auto_map``, code,
    processor, README.md) and, for LoRA runs, ``output_dir/adapter`` (the PEFT adapter + README.md).

    ``adapter_dir`` is a folder written by ``PeftModel.save_pretrained`` / ``trainer.save_model`` (LoRA run) or
    a full MIEScore checkpoint (full fine-tuning; then no adapter folder is written). The base is re-loaded on
    CPU from ``base_model`` so that the merge is the same on one GPU or under DeepSpeed ZeRO-3, where the
    in-memory weights are partitioned. Returns ``{"merged": path, "adapter": path or None}``.
    """
    from peft import PeftModel

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged_dir, adapter_out = out / merged_name, out / adapter_name
    card = card or ModelCardInfo(base_model=base_model)
    adapter_dir = Path(adapter_dir) if adapter_dir is not None else None
    is_adapter = adapter_dir is not None and (adapter_dir / "adapter_config.json").is_file()
    overrides = dict(base_config_overrides or {})
    if is_adapter:
        with _outside_zero3_init():
            model, processor = load_base_model(base_model, dtype=dtype, **overrides)
            model = PeftModel.from_pretrained(model, os.fspath(adapter_dir)).merge_and_unload()
        if adapter_out.exists():
            shutil.rmtree(adapter_out)
        shutil.copytree(adapter_dir, adapter_out, ignore=shutil.ignore_patterns(
            "optimizer.pt", "scheduler.pt", "rng_state*", "trainer_state.json", "training_args.bin", "loss_state*"))
        (adapter_out / "README.md").write_text(render_model_card(card, adapter=True), encoding="utf-8")
    else:
        source = adapter_dir if adapter_dir is not None else base_model
        with _outside_zero3_init():
            model, processor = load_base_model(os.fspath(source), dtype=dtype, **overrides)
    model.processor = processor
    if merged_dir.exists():
        shutil.rmtree(merged_dir)
    model.save_pretrained(merged_dir)
    (merged_dir / "README.md").write_text(render_model_card(card, adapter=False), encoding="utf-8")
    return {"merged": str(merged_dir), "adapter": str(adapter_out) if is_adapter else None}


@contextlib.contextmanager
def _outside_zero3_init():
    """Load whole (unpartitioned) weights on this process even while a ZeRO-3 run is active.

    Under ZeRO-3 the training arguments register their DeepSpeed config globally, and ``from_pretrained`` then
    builds every model inside ``deepspeed.zero.Init``, which leaves each process only its shard (empty tensors on
    the others). The export re-loads the base from disk, so it hides that registration while it loads.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    registered = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = registered


def trainable_parameter_summary(model) -> dict[str, int]:
    """Counts of trainable / total parameters (for logs and the model card)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable": int(trainable), "total": int(total)}

