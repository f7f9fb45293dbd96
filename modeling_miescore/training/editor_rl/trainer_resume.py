"""How :class:`~.trainer.FlowGRPOEditorTrainer` restores a run: its trained parameters by name (the full tensors
of a sharded transformer), checked against a checkpoint's and loaded from it on ``--resume`` with the optimizer,
the learning-rate schedule and the EMA, and the run folder cut back to the checkpoint's step (``metrics.jsonl``,
the rollout records, later checkpoints). A mixin of the trainer (it uses the trainer's ``config``,
``accelerator``, parameters, optimizer and folder)."""

from __future__ import annotations

import logging
from typing import List

import torch

from .checkpoints import CheckpointDamage, drop_checkpoints_after, load_checkpoint, record_resume, truncate_metrics
from .config import RESUMABLE_FIELDS

__all__ = ["TrainerResume"]

logger = logging.getLogger(__name__.rsplit(".", 1)[0] + ".trainer")


class TrainerResume:
    """The trained parameters by name and ``--resume`` (module docstring)."""

    def _trainable_names(self) -> List[str]:
        """The names of ``self.params``, in order."""
        names = {id(p): n for n, p in self.raw_model.named_parameters()}
        return [names[id(p)] for p in self.params]

    def _trainable_state(self) -> dict:
        """The trained parameters by name (sharded: their full tensors on the main process; a collective)."""
        if self.sharded:
            from .policy_fsdp import full_model_state

            full = full_model_state(self.raw_model)
            return {n: full[n] for n in self._trainable_names()} if full else {}
        return {n: p.detach() for n, p in zip(self._trainable_names(), self.params)}

    def _load_trainable(self, state: dict) -> None:
        """The checkpoint's trained parameters: exactly this run's, each of its shape (else the file is named)."""
        named = dict(self.raw_model.named_parameters())
        where = self.resume_from / "trainable.safetensors"
        unknown = [n for n in state if n not in named]
        missing = [n for n in self._trainable_names() if n not in state]
        wrong = [f"{n} {tuple(state[n].shape)} (the model's: {tuple(named[n].shape)})" for n in state
                 if n in named and tuple(state[n].shape) != tuple(named[n].shape)]
        for problem, names in (("holds parameters this editor's transformer does not have", unknown),
                               (f"lacks {len(missing)} of this run's {len(self.params)} trained parameters", missing),
                               ("holds tensors of another shape", wrong)):
            if names:
                raise CheckpointDamage(where, f"{problem}: {', '.join(names[:3])}")
        if self.sharded:
            from .policy_fsdp import load_full_model_state

            return load_full_model_state(self.raw_model, state)
        with torch.no_grad():
            for name, value in state.items():
                named[name].copy_(value.to(named[name].device, named[name].dtype))

    def _resume(self) -> int:
        cfg, main = self.config, self.accelerator.is_main_process
        if self.resume_from is None:
            if self.resuming and main:
                truncate_metrics(self.out / "metrics.jsonl", 0)  # killed before its first checkpoint: start over
                self.rollout_log.truncate(0)
                logger.info("No checkpoint in %s yet: the run starts again from step 0", self.out)
            return 0
        optimizer = self.optimizer
        if self.sharded:
            from .policy_fsdp import load_full_optimizer_state

            def optimizer(state):
                load_full_optimizer_state(self.raw_model, self.optimizer, state)
        state = load_checkpoint(self.resume_from, optimizer=optimizer, lr_scheduler=self.lr_scheduler,
                                rank=self.accelerator.process_index)
        self._load_trainable(state["trainable"])
        if self.ema is not None and state["ema"] is not None:
            missing = [n for n in self._trainable_names() if n not in state["ema"]["shadow"]]
            if missing:
                raise CheckpointDamage(self.resume_from / "ema.safetensors", f"lacks {', '.join(missing[:3])}")
            self.ema.shadow_params = [state["ema"]["shadow"][n].to(p.device)
                                      for n, p in zip(self._trainable_names(), self.params)]
            self.ema.optimization_step = state["ema"]["step"]
        self.accelerator.wait_for_everyone()  # every process has read the checkpoint before later ones go
        if main:
            truncate_metrics(self.out / "metrics.jsonl", state["step"])
            self.rollout_log.truncate(state["step"])
            dropped = drop_checkpoints_after(self.out, state["step"])
            record_resume(self.out, self.config.public_dict(), RESUMABLE_FIELDS, state["step"])
            logger.info("Resuming from %s (step %d of %d)%s", self.resume_from.name, state["step"], cfg.max_steps,
                        f"; dropped the later {', '.join(dropped)}" if dropped else "")
        return state["step"]
