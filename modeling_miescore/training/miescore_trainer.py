"""The MIEScore regression ``Trainer``: the loss of eq. 9/13 with cross-batch memory queues, its state saved in
every checkpoint (safetensors, one file per data-parallel rank) and restored on resume, and the per-dimension
SRCC / PLCC metrics of evaluation.

Paper: MIEScore, section "Multi-Dimensional Supervised Fine-Tuning" and the supplement "Details of Training
Configuration". The recipe (``trainers/train_miescore.py`` + ``trainers/configs/*.yaml``) is a thin entry
point over this package::

    model, processor = load_base_model("Qwen/Qwen3-VL-8B-Instruct", max_pixels=1_048_576)   # miescore_model
    model = apply_lora(model, make_lora_config())                       # LM-only LoRA, head fully trained
    train, report = prepare_dataset(ds["train"], processor, model.config, max_length=4096)  # miescore_data
    trainer = MIEScoreTrainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                              data_collator=MIEScoreCollator(processor, model.config),
                              compute_metrics=compute_correlation_metrics)
    trainer.train(resume_from_checkpoint=True)   # queues + loss stage are restored with the checkpoint
    export_model(base, adapter_dir, out_dir, card=...)   # miescore_export: merged/ (Hub-native) + adapter/

Not a Hub file: it imports transformers' Trainer and is never copied into checkpoints.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np
import torch
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..data.schema import DIMENSION_ABBREVIATIONS, DIMENSIONS
from ..hub.errors import MIEScoreInputError
from ..utils.atomic_files import write_bytes_atomic
from .losses import LossConfig, MIEScoreLoss

logger = logging.getLogger(__name__)

__all__ = ["DIM_NAMES", "LOSS_STATE_NAME", "MIEScoreTrainer", "compute_correlation_metrics", "load_loss_state",
           "loss_state_filename", "resolve_checkpoint", "save_loss_state"]

DIM_NAMES = tuple(DIMENSION_ABBREVIATIONS[d] for d in DIMENSIONS)  # ("vq", "if", "ap"), the head order
LOSS_STATE_NAME = "loss_state.safetensors"


def _correlations(pred: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """(SRCC, PLCC) from ``evaluation.metrics.correlation.correlations``; NaN when either side is constant."""
    from ..evaluation.metrics.correlation import correlations  # deferred: loads scipy

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



def loss_state_filename(rank: int = 0, world_size: int = 1) -> str:
    """``loss_state.safetensors`` on one process; ``loss_state_rank{k}.safetensors`` per rank under DDP
    (each rank keeps its own memory queues)."""
    return LOSS_STATE_NAME if world_size <= 1 else f"loss_state_rank{rank}.safetensors"


def save_loss_state(loss_fn: MIEScoreLoss, path: str | os.PathLike) -> None:
    """Write the loss queues and stage as safetensors (atomically; never a pickle)."""
    from safetensors.torch import save

    tensors = {k: torch.as_tensor(v).detach().cpu().contiguous() for k, v in loss_fn.state_dict().items()}
    write_bytes_atomic(path, save(tensors, metadata={"format": "pt", "kind": "MIEScoreLoss state"}))


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

