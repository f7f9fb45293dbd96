"""The outputs of :class:`~.trainer.FlowGRPOEditorTrainer` besides ``metrics.jsonl``: the sample grids (each edit
with its reward, logged to the trackers), checkpoints, the adapter with its card, and the Hub upload. A mixin of
the trainer (it uses the trainer's ``config``, ``accelerator``, ``editor``, ``reward``, parameters and folder)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import torch

from .checkpoints import run_writes, save_checkpoint
from .group_schedule import derived_seed
from .policy_lora import lora_metadata, lora_state_dict, non_finite_tensors
from .policy_update import TrainingDivergedError
from .reward_types import EditGroup, group_key
from .run_outputs import GridRow, save_sample_grid
from .run_reporting import log_grid_image

__all__ = ["TrainerOutputs"]

logger = logging.getLogger(__name__.rsplit(".", 1)[0] + ".trainer")


class TrainerOutputs:
    """Grids, checkpoints, adapter + card, Hub upload (module docstring)."""

    last_grid: Optional[Path] = None

    def save_grid(self, step: int) -> Optional[Path]:
        """The sample grid of ``step`` (written by the main process; ODE sampling with a fixed seed, guided as
        ``sample_grid_schedule`` says: by default on the steps the rollouts guide), each edit with its reward, and
        logged to the trackers. A sharded transformer samples on every process (its forwards are collectives)."""
        from .sampling_schedule import sample_with_schedule

        cfg, main = self.config, self.accelerator.is_main_process
        if not self.grid_rows or not (main or self.sharded):
            return None
        if step == 0 and main:
            logger.info("sample grids (samples/step-N.png): %s", self.grid_schedule.describe(cfg.num_inference_steps))
        made = []
        with torch.no_grad():
            for k, row in enumerate(self.grid_rows):
                sources = row.load_sources()
                edits = sample_with_schedule(self.editor, sources, row.instruction, num_images=cfg.sample_grid_images,
                                             num_steps=cfg.num_inference_steps, schedule=self.grid_schedule,
                                             seed=derived_seed(cfg.seed, "grid", k))
                made.append((row, sources, edits))
        if not main:
            return None
        groups = [EditGroup(group_key(row.source_ids, row.instruction), tuple(sources), row.instruction,
                            tuple(edits), row.source_ids) for row, sources, edits in made]
        try:
            scores = self.reward.score_groups(groups)
        except Exception as error:  # noqa: BLE001 - a grid without rewards says why; the run goes on
            logger.warning("the sample grid of step %d has no rewards: %s: %s", step, type(error).__name__, error)
            scores = [None] * len(groups)
        rows = [GridRow(f"{row.id}: {row.instruction}", sources, edits, score.rewards if score else (),
                        score.failures if score else ("reward unavailable",) * len(edits))
                for (row, sources, edits), score in zip(made, scores)]
        with run_writes(f"the sample grid of step {step}", self.out):
            path = save_sample_grid(self.out / "samples" / f"step-{step:06d}.png", rows, step=step)
        self.last_grid = path
        if self.accelerator.trackers:
            log_grid_image(self.accelerator, path, step)
        return path

    def _checkpoint(self, step: int) -> None:
        acc = self.accelerator
        ema_state = None
        if self.ema is not None:
            ema_state = {"shadow": {n: p.detach().cpu()
                                    for n, p in zip(self._trainable_names(), self.ema.shadow_params)},
                         "step": self.ema.optimization_step}
        optimizer = self.optimizer
        if self.sharded:
            from .policy_fsdp import full_optimizer_state

            optimizer = full_optimizer_state(self.raw_model, self.optimizer)
        save_checkpoint(self.out, step, trainable=self._trainable_state(), optimizer=optimizer,
                        lr_scheduler=self.lr_scheduler, ema_state=ema_state, rank=acc.process_index,
                        is_main=acc.is_main_process, every=self._from_every_process)

    def save_adapter(self) -> Path:
        """The trained LoRA (EMA weights when enabled) or, with ``finetuning: full``, the transformer (a diffusers
        model folder ``transformer/``), and the card, in ``output_dir``."""
        if self.ema is not None:
            self.ema.store(self.params)
            self.ema.copy_to(self.params)
        try:
            full = None
            if self.sharded:
                from .policy_fsdp import full_model_state

                full = full_model_state(self.raw_model)  # every process gathers; the main one writes
            if self.accelerator.is_main_process:
                self._write_adapter(full)
        finally:
            if self.ema is not None:
                self.ema.restore(self.params)
        self.accelerator.wait_for_everyone()
        return self.out

    def _write_adapter(self, full) -> None:
        """The main process writes the adapter (or the transformer) and the card."""
        with run_writes("the trained adapter and its card", self.out):
            if full is not None:
                from .policy_fsdp import save_full_transformer

                save_full_transformer(self.raw_model, full, self.out / "transformer")
            elif self.config.finetuning == "lora":
                state = lora_state_dict(self.raw_model)
                bad = non_finite_tensors(state)
                if bad:  # never written: such an adapter edits black images without a word
                    raise TrainingDivergedError(f"the trained LoRA holds non-finite values (in {len(bad)} tensor(s), "
                                                f"e.g. {bad[0]}); lower learning_rate and resume from a checkpoint")
                self.editor.save_lora(self.out, state, lora_metadata(self.raw_model))
            elif hasattr(self.raw_model, "save_pretrained"):
                self.raw_model.save_pretrained(self.out / "transformer")
            else:
                from safetensors.torch import save_file

                save_file({k: v.detach().cpu().contiguous() for k, v in self.raw_model.state_dict().items()},
                          str(self.out / "transformer.safetensors"))
            self._write_card(repo_id=None)

    def _write_card(self, repo_id: Optional[str]) -> Path:
        from .adapter_card import write_adapter_card

        example = None
        if self.grid_rows or self.rows:
            row = (self.grid_rows or self.rows)[0]
            example = (row.load_sources(), row.instruction)
        grid = getattr(self, "last_grid", None)
        return write_adapter_card(self.out, config=self.config, editor=self.editor, metrics=self.metrics.read(),
                                  lora=lora_metadata(self.raw_model) if self.config.finetuning == "lora" else None,
                                  example=example, grid=grid.relative_to(self.out).as_posix() if grid else None,
                                  repo_id=repo_id)

    def push_to_hub(self) -> Optional[str]:
        """Upload the adapter, its card (naming the Hub repository), ``run.json``, ``metrics.jsonl`` and the
        sample grids in one commit (main process); the commit URL."""
        from .hub_upload import push_run

        url = None
        if self.accelerator.is_main_process:
            with run_writes("the card of the Hub repository", self.out):
                self._write_card(repo_id=self.hub_repo)
            url = push_run(self.out, self.hub_repo, private=self.config.hub_private_repo)
            logger.info("pushed the adapter to %s", url)
        self.accelerator.wait_for_everyone()
        return url
