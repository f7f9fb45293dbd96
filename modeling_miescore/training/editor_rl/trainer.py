"""The Flow-GRPO loop for image editors (SpatialReward paper sec. 5.3 / B.2; Flow-GRPO arXiv 2505.05470).

One step, on every process (``accelerate launch`` for several):

1. **rollout**: the process's ``rollout_batches_per_step`` batches of groups (:mod:`.schedule`; pieces of
   groups when a batch is not whole groups), G edits each, by the stock pipeline under the group's step plan
   (:func:`~.rollout.sample_group`, :mod:`.schedule`); each rollout batch goes to the reward worker as soon as it
   is made, so rewards of batch ``b`` are computed while batch ``b + 1`` samples
   (:class:`~modeling_miescore.rewards.worker.RewardWorker`): the overlap exists only across the batches of one step;
2. **reward**: wait for the scores (``reward_timeout``); a reward that raises (down after its retries) or times
   out stops the run with a clear error before anything is updated;
3. **advantages**: every process's rewards are gathered, then normalised per group key (:mod:`.objective`);
   failed samples are counted and excluded, and a step whose failure rate exceeds ``max_reward_failure_rate``
   stops the run;
4. **update**: :func:`~.objective.run_updates` (clipped ratio, TempFlow-weighted per step, + beta KL to the
   LoRA-disabled reference, or to a frozen copy with ``finetuning: full``), the EMA after each optimizer step
   (:mod:`.policy`);
5. log (``metrics.jsonl``, trackers, progress bar; every ``save_rollouts_steps`` the step's edits with their
   rewards and advantages, :mod:`.outputs`), sample grid (guided as ``sample_grid_schedule`` says,
   :mod:`.schedule`), checkpoint (:mod:`.checkpoints`; the outputs are :mod:`.publishing`);
   ``--resume`` restores the last checkpoint first (:mod:`.checkpoints`).

After the last step the adapter (``pytorch_lora_weights.safetensors``, EMA weights when ``ema_decay > 0``) and its
card are written to ``output_dir`` (with ``finetuning: full``, the transformer: ``output_dir/transformer/``).

With ``fsdp: true`` (full fine-tuning only) the transformer and its frozen reference are sharded by torch's FSDP2
(:mod:`.policy`), whose forwards and backwards are collectives: every process samples the same number of
groups, every group of a step shares one step plan (drawn from the step's seed, so the trained steps and the
guided calls are the same everywhere), the update pads units to the same count, and the sample grid is computed
by every process (the main one writes it).
"""

from __future__ import annotations

import concurrent.futures
import copy
import logging
import random
import time
from pathlib import Path
from typing import List, Optional

import torch

from ...hub.errors import MIEScoreInputError
from ...rewards.groups import EditGroup, EditorReward, GroupScores, RewardUnavailableError, group_key
from ...rewards.worker import RewardWorker, reward_error
from .checkpoints import TrainerResume, check_run_folder, latest_checkpoint, run_writes
from .config import FlowGRPOConfig
from .editors import EditorAdapter, load_editor
from .evaluation import TrainerEvaluation
from .objective import UPDATE_STAT_KEYS, group_advantages, make_units, pad_units, run_updates
from .outputs import (MetricsLog, RolloutLog, check_output_dir, component_means, component_totals, prepare_output_dir,
                      sampling_record, step_line, training_summary)
from .policy import OptimizerStepEMA, add_lora
from .publishing import TrainerOutputs
from .rollout import GroupRollout, sample_group
from .schedule import PIPELINE_SCHEDULE, GroupSchedule, Piece, SamplingSchedule, derived_seed, make_step_plan
from ...data.editing_inputs import read_editing_inputs
from ...rewards.specs import build_reward
from ...scoring.loading import resolve_dtype

__all__ = ["FlowGRPOEditorTrainer", "RewardUnavailableError", "TrainingInterrupted"]

logger = logging.getLogger(__name__)

def _has_accelerator() -> bool:
    mps = getattr(torch.backends, "mps", None)
    xpu = getattr(torch, "xpu", None)
    return torch.cuda.is_available() or bool(mps and mps.is_available()) or bool(xpu and xpu.is_available())


class FlowGRPOEditorTrainer(TrainerEvaluation, TrainerResume, TrainerOutputs):
    """Train ``config.editor`` with ``config.reward`` (module docstring). ``reward`` / ``editor``: prebuilt
    objects instead of the config's specs (tests, Python use). ``reward_worker_class``: what runs the reward
    (a subclass whose ``submit`` waits gives the sequential baseline ``benchmarks/bench_editor_rl.py`` measures
    the overlap against)."""

    reward_worker_class = RewardWorker

    def __init__(self, config: FlowGRPOConfig, *, reward: Optional[EditorReward] = None,
                 editor: Optional[EditorAdapter] = None, accelerator=None):
        from accelerate import Accelerator, PartialState

        self.config = config
        # on a machine without an accelerator, `accelerate launch` processes meet over gloo only with cpu=True
        cpu = not _has_accelerator()
        # once, with the number of processes, before the Accelerator: its trackers and project folder come from it
        config.validate((accelerator or PartialState(cpu=cpu)).num_processes)
        self.accelerator = accelerator or Accelerator(log_with=config.trackers(), project_dir=config.output_dir or None,
                                                      cpu=cpu)
        self._reward, self._editor = reward, editor

    # ---------------------------------------------------------------------------------------------- setup
    def _setup(self):
        """Check and load everything the run needs, then claim ``output_dir``: nothing is written there (and no
        tracker started) before the inputs, the editor, the reward and a ``--push_to_hub`` have been checked."""
        cfg, acc = self.config, self.accelerator
        if acc.distributed_type.name in ("FSDP", "DEEPSPEED"):
            raise MIEScoreInputError(
                f"accelerate's {acc.distributed_type.name} plugin is not used by this trainer (it shards only what "
                "accelerator.prepare wraps): launch with plain DDP (trainers/configs/accelerate_ddp.yaml) and set "
                "finetuning: full + fsdp: true in the config, which shards the transformer with torch's FSDP2")
        self.sharded = cfg.fsdp and acc.num_processes > 1  # one process: nothing to shard over
        self.rows = self.split_eval_rows(read_editing_inputs(cfg.dataset, cfg.dataset_split, cfg.max_train_rows))
        check_output_dir(cfg, [*self.rows, *self.eval_rows])  # apart from every input; created only once all is loaded
        self.out = Path(cfg.output_dir)
        # read-only: refuse another run's folder (or an existing run without --resume / --overwrite) up front
        self.resume_from, self.resuming = check_run_folder(self.out, cfg.identity(), resume=cfg.resume_target,
                                                           overwrite=cfg.overwrite_output_dir, is_main=False)
        self.hub_repo = None
        if cfg.push_to_hub:
            from .publishing import check_run_push

            self.hub_repo = check_run_push(cfg)
        self.editor = self._editor or load_editor(cfg.editor, cfg.model_name_or_path, device=acc.device,
                                                  dtype=resolve_dtype(cfg.dtype, str(acc.device)),
                                                  options=cfg.editor_options)
        if cfg.cfg_scale is not None:
            self.editor.cfg_scale = float(cfg.cfg_scale)
        for row in [*self.rows, *self.eval_rows]:
            self.editor.check_sources(row.sources, f"request {row.id!r}")
        self.reward_from_spec = self._reward is None
        if self._reward is None:
            try:
                self._reward = build_reward(cfg.reward, **{"device": str(acc.device), **cfg.reward_options})
            except ValueError as error:
                raise MIEScoreInputError(f"--reward {cfg.public_dict()['reward']!r}: {error}") from None
        self.reward = self._reward
        self.reward_name = getattr(self.reward, "name", type(self.reward).__name__)
        self.grid_schedule = (SamplingSchedule.trained(cfg.to_dict()) if cfg.sample_grid_schedule == "trained"
                              else PIPELINE_SCHEDULE)
        self.build_eval_rewards()
        self._claim_output_dir()
        self._setup_policy()
        self.schedule = GroupSchedule(len(self.rows), cfg.per_device_batch_size, cfg.rollout_batches_per_step,
                                      cfg.num_generations, acc.num_processes, cfg.seed)
        if cfg.dtype in ("bfloat16", "float16") and (cfg.train_batch_size or cfg.num_generations) < cfg.num_generations:
            logger.warning("train_batch_size %d is smaller than the rollout's batch of %d: in %s the recomputed "
                           "log-probs differ from the rollout's, so the on-policy ratio is not exactly 1 (flow_grpo "
                           "FAQ; DanceGRPO #57); leave train_batch_size unset to train at the rollout's batch",
                           cfg.train_batch_size, cfg.num_generations, cfg.dtype)
        self.metrics = MetricsLog(self.out / "metrics.jsonl", acc if acc.is_main_process else None)
        self.rollout_log = RolloutLog(self.out, cfg.save_rollouts_steps)
        self.grid_rows = self.rows[:cfg.sample_grid_groups]
        if acc.is_main_process and cfg.trackers():
            acc.init_trackers("flow_grpo_editor", config={k: v for k, v in cfg.public_dict().items()
                                                           if isinstance(v, (int, float, str, bool))})

    def _claim_output_dir(self) -> None:
        """Create ``output_dir``; the main process writes ``run.json`` (the run's identity and how it samples) for
        a fresh run, replacing an old run's outputs only with ``overwrite_output_dir`` (a resumed run's folder and
        checkpoint were checked in :meth:`_setup`: nothing is written for it here, nothing read again)."""
        cfg, acc = self.config, self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            prepare_output_dir(cfg, self.rows)  # created, writable
            if not self.resuming:
                check_run_folder(self.out, cfg.identity(), resume=None, overwrite=cfg.overwrite_output_dir,
                                 is_main=True, settings=cfg.public_dict(),
                                 record={**sampling_record(cfg, self.editor), **self.evaluation_record()})
        acc.wait_for_everyone()

    def _setup_policy(self):
        from transformers import get_constant_schedule_with_warmup

        cfg, acc = self.config, self.accelerator
        transformer = self.editor.transformer
        self.reference_model = None
        if cfg.finetuning == "lora":
            with torch.random.fork_rng(devices=[]):  # the LoRA's Gaussian init depends on the seed only
                torch.manual_seed(derived_seed(cfg.seed, "lora") % (2 ** 62))
                add_lora(transformer, rank=cfg.lora_rank, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout,
                         targets=cfg.lora_targets or self.editor.lora_targets, editor=self.editor.name)
        else:
            if cfg.beta > 0:
                self.reference_model = copy.deepcopy(transformer).requires_grad_(False).eval()
            transformer.requires_grad_(True)
            if self.sharded:
                from .policy import shard_transformer

                for model in filter(None, (transformer, self.reference_model)):
                    blocks = shard_transformer(model, acc.device.type)
                if acc.is_main_process:
                    logger.info("FSDP2: the transformer%s is sharded over %d processes (%d blocks, then the root)",
                                " and its reference" if self.reference_model is not None else "",
                                acc.num_processes, len(blocks))
        if cfg.gradient_checkpointing and hasattr(transformer, "enable_gradient_checkpointing"):
            transformer.enable_gradient_checkpointing()
        self.params = [p for p in transformer.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           weight_decay=cfg.weight_decay, eps=cfg.adam_epsilon)
        self.lr_scheduler = get_constant_schedule_with_warmup(self.optimizer, cfg.warmup_steps * cfg.updates_per_step)
        # FSDP2 syncs the sharded gradients itself: never wrapped in DDP
        self.model = acc.prepare_model(transformer) if acc.num_processes > 1 and not self.sharded else transformer
        self.raw_model = transformer
        self.ema = None
        if cfg.ema_decay > 0:  # flow_grpo's EMA, counted in optimizer steps (ema.py)
            self.ema = OptimizerStepEMA(self.params, decay=cfg.ema_decay, update_interval=cfg.ema_update_interval)

    # ---------------------------------------------------------------------------------------------- one step
    def _from_every_process(self, value) -> list:
        """Every process's ``value``, in process order (``[value]`` on one process; a collective otherwise)."""
        if self.accelerator.num_processes == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])

    def _plan(self, step: int, index: int):
        cfg = self.config
        # fsdp: one plan per step for every group, so every process calls the sharded transformer as often
        plan_seed = derived_seed(cfg.seed, "step-plan", step) if cfg.fsdp else derived_seed(cfg.seed, "plan", index)
        return make_step_plan(cfg.num_inference_steps, random.Random(plan_seed), noise_level=cfg.noise_level,
                              train_steps=cfg.train_steps, train_fraction=cfg.train_fraction,
                              window_size=cfg.window_size, window_range=(cfg.window_start, cfg.window_end),
                              cfg_fraction=cfg.cfg_fraction, sde_type=cfg.sde_type, last_step=cfg.last_step,
                              shared_noise=cfg.same_latent, iteration=step,
                              mixgrpo_shift_interval=cfg.mixgrpo_shift_interval, mixgrpo_stride=cfg.mixgrpo_stride)

    def _rollout_group(self, step: int, piece: Piece) -> GroupRollout:
        """The rollout of one piece of a group (the whole group unless groups are split across processes). A
        whole group keeps its seeds; a piece's own noise is keyed by its first member, and a shared initial noise
        is the group's, whichever process samples the piece."""
        cfg = self.config
        index = self.schedule.group_index(step, piece.group)
        row = self.rows[self.schedule.row_of(step, piece.group)]
        whole = piece.size == cfg.num_generations
        group_seed = derived_seed(cfg.seed, "noise", index) % (2 ** 62)
        piece_seed = group_seed if whole else derived_seed(cfg.seed, "noise", index, piece.first) % (2 ** 62)
        rollout = sample_group(self.editor, key=group_key(row.source_ids, row.instruction), sources=row.load_sources(),
                               source_ids=row.source_ids, instruction=row.instruction, num_images=piece.size,
                               plan=self._plan(step, index), seed=group_seed if cfg.same_latent else piece_seed,
                               shared_noise=cfg.same_latent, sde_seed=None if whole else piece_seed + 1_000_003,
                               keep_means=cfg.grpo_guard)
        rollout.first_member = piece.first
        return rollout

    def _collect_scores(self, futures, step: int):
        """The groups' scores in order, and the seconds the reward ran; stops the run when the reward raised
        (down after its retries, a wrong number of rewards, any ``BaseException`` of its own) or did not answer
        within ``reward_timeout``."""
        scores: List[GroupScores] = []
        deadline = time.monotonic() + self.config.reward_timeout
        for future in futures:
            try:
                scores.extend(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except BaseException as error:  # noqa: BLE001 - the reward's own, or a real Ctrl-C (re-raised)
                failure = self._reward_failure(future, error, step)
                if failure is None:
                    raise
                raise failure from error
        return scores, sum(f.reward_seconds or 0.0 for f in futures)

    def _reward_failure(self, future, error: BaseException, step: int) -> Optional[RewardUnavailableError]:
        """What ``future.result()`` raising ``error`` means: the reward failed (its own exception, whatever its
        class, or no answer in time), or None when the error is this process's own (a Ctrl-C while waiting)."""
        if not future.done():
            if isinstance(error, concurrent.futures.TimeoutError):
                return RewardUnavailableError(self.reward_name, (
                    f"gave no scores within reward_timeout={self.config.reward_timeout:g}s at step {step}; the run "
                    "stopped before updating (rerun with --resume once it answers)"))
            return None
        what = reward_error(future, error)
        if what is None:
            return None
        if isinstance(error, RewardUnavailableError):  # the reward's own message, with the step: said once
            return RewardUnavailableError(error.reward, (
                f"{error.detail} (at step {step}; the run stopped before updating: rerun with --resume once it "
                "answers)"))
        return RewardUnavailableError(self.reward_name, (
            f"failed at step {step}: {what}; the run stopped before updating (fix the reward, then rerun with "
            "--resume)"))

    def _stop_together(self, failure: Optional[RewardUnavailableError]) -> None:
        """Every process learns whether any process's reward failed, and all stop with that process's message
        (a failure on one rank would otherwise leave the others waiting in the next collective until the
        backend's timeout). Raises the failure; a no-op on one process."""
        acc = self.accelerator
        if acc.num_processes > 1:
            told = failure and (failure.reward, failure.detail, acc.process_index)
            every = [t for t in self._from_every_process(told) if t]
            if every:
                reward, detail, rank = every[0]
                raise RewardUnavailableError(reward, f"{detail} [process {rank} of {acc.num_processes}]")
        if failure is not None:
            raise failure

    def _sample_and_score(self, step: int, worker: RewardWorker):
        """This process's rollout batches of ``step``, each sent to the reward worker as soon as it is made (its
        rewards are computed while the next batch samples: overlap exists only across rollout batches of a
        step); the rollouts (pieces of groups, in order), their scores and the phase seconds."""
        rollouts, futures, rollout_seconds = [], [], 0.0
        self.raw_model.eval()
        for pieces in self.schedule.batches(step, self.accelerator.process_index):
            began = time.perf_counter()
            batch = [self._rollout_group(step, piece) for piece in pieces]
            rollout_seconds += time.perf_counter() - began
            rollouts.extend(batch)
            futures.append(worker.submit([EditGroup(r.key, r.sources, r.instruction, tuple(r.images), r.source_ids)
                                          for r in batch]))
        began = time.perf_counter()
        scores, reward_seconds, failure = [], 0.0, None
        try:
            scores, reward_seconds = self._collect_scores(futures, step)
        except RewardUnavailableError as error:
            failure = error
        self._stop_together(failure)  # every process stops together, with the failing process's message
        return rollouts, scores, {"rollout": rollout_seconds, "reward": reward_seconds,
                                  "reward_wait": time.perf_counter() - began}

    def _advantages(self, rollouts, scores, step: int):
        acc, cfg = self.accelerator, self.config
        local = [(r.key, list(s.rewards)) for r, s in zip(rollouts, scores)]
        every = self._from_every_process(local)
        flat = [group for part in every for group in part]
        result = group_advantages(flat, std_level=cfg.std_level, clip=cfg.advantage_clip,
                                  drop_zero_std=cfg.drop_zero_std_groups)
        total = sum(len(rewards) for _, rewards in flat)
        if total and result.failures / total > cfg.max_reward_failure_rate:
            reasons = sorted({f for s in scores for f in s.failures if f})
            raise RewardUnavailableError(self.reward_name, (
                f"{result.failures} of {total} rewards failed at step {step} ({result.failures / total:.0%} > "
                f"max_reward_failure_rate {cfg.max_reward_failure_rate:.0%}; reasons on this process: "
                f"{', '.join(reasons) or 'see the other processes'}); the run stopped before updating"))
        offset = sum(len(part) for part in every[:acc.process_index])
        return result, result.advantages[offset:offset + len(rollouts)]

    def _log_rollouts(self, step: int, rollouts, scores, advantages) -> None:
        acc = self.accelerator
        pieces = [p for batch in self.schedule.batches(step, acc.process_index) for p in batch]
        groups = [self.schedule.group_index(step, p.group) for p in pieces]
        requests = [self.rows[self.schedule.row_of(step, p.group)].id for p in pieces]
        records = self.rollout_log.records(step, acc.process_index, rollouts, scores, advantages, groups, requests)
        every = self._from_every_process(records)
        if acc.is_main_process:
            with run_writes(f"the rollouts of step {step}", self.out):
                self.rollout_log.append([record for part in every for record in part])

    def _update(self, rollouts, advantages, step: int) -> dict:
        cfg, acc = self.config, self.accelerator
        micro = cfg.train_batch_size or cfg.num_generations
        units = make_units(rollouts, advantages, micro, acc.device)
        counts = self._from_every_process(len(units))
        if max(counts) == 0:
            return {"updates": 0.0}
        fallback = make_units(rollouts[:1], [[0.0] * rollouts[0].size], micro, acc.device)[0]
        units = pad_units(units, max(counts), fallback)
        self.raw_model.train()
        stats = run_updates(units, model=self.model, raw_model=self.raw_model, editor=self.editor,
                            optimizer=self.optimizer, lr_scheduler=self.lr_scheduler, accelerator=acc, settings=cfg,
                            rng=random.Random(derived_seed(cfg.seed, "shuffle", step, acc.process_index)),
                            params=self.params, reference_model=self.reference_model,
                            on_optimizer_step=None if self.ema is None else lambda: self.ema.optimizer_step(self.params))
        self.raw_model.eval()
        return stats

    def _step_record(self, step, result, stats, seconds, scores) -> dict:
        every = self._from_every_process(stats)
        totals = component_totals(scores)
        components = component_means(self._from_every_process(totals))
        total = {k: sum(s.get(k, 0.0) for s in every) for k in UPDATE_STAT_KEYS}
        n = total["count"] or float("nan")
        updated = [s for s in every if s.get("updates")]  # processes that ran an update: theirs are the means

        def mean_over_updated(key: str) -> float:
            return sum(s[key] for s in updated) / len(updated) if updated else float("nan")

        record = {"step": step, "reward_mean": result.reward_mean, "reward_std": result.reward_std,
                  "kl": total["kl_sum"] / n if self.config.beta > 0 else None, "ratio_mean": total["ratio_sum"] / n,
                  "clipfrac": total["clipped"] / n, "approx_kl": total["approx_kl_sum"] / n,
                  "policy_loss": total["policy_loss_sum"] / n, "loss": mean_over_updated("loss"),
                  "grad_norm": mean_over_updated("grad_norm"), "lr": self.lr_scheduler.get_last_lr()[0],
                  "zero_std_groups": result.zero_std_groups, "skipped_groups": result.skipped_groups,
                  "reward_failures": result.failures, "reward_components": components}
        record.update({f"seconds_{k}": round(v, 4) for k, v in seconds.items()})
        return record

    # ---------------------------------------------------------------------------------------------- loop
    def train(self) -> dict:
        """Run (or resume) the training; returns ``{"step", "metrics"}`` (and ``"hub_url"`` after a push)."""
        cfg, acc = self.config, self.accelerator
        self._setup()
        try:
            start = self._resume()
            self.restore_evaluation(start)
            result = self._train_from(start)
        except BaseException:  # stopped (the reward, the disk, a Ctrl-C): its trackers are closed, not left open
            self._finish_trackers()
            raise
        finally:
            self.close_eval_rewards()
        if cfg.trackers():
            acc.end_training()
        return result

    def _finish_trackers(self) -> None:
        """Finish the trackers of a run that stopped (a W&B or MLflow run is closed, not left running; TensorBoard
        also flushes at each log) without hiding why it stopped; the process group is left to the caller."""
        for tracker in self.accelerator.trackers:
            try:
                tracker.finish()
            except Exception as error:  # noqa: BLE001 - the run's own error is the one to report
                logger.warning("the %s tracker did not close: %s", getattr(tracker, "name", "?"), error)

    def _train_from(self, start: int) -> dict:
        """The steps after ``start``, then the adapter (and the push); ``train``'s result."""
        cfg, acc = self.config, self.accelerator
        if acc.is_main_process:
            logger.info("%s", training_summary(cfg, num_processes=acc.num_processes, num_requests=len(self.rows),
                                               trained_steps=len(self._plan(start + 1, 0).trained), start_step=start))
        progress = None
        if cfg.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            progress = tqdm(total=cfg.max_steps, initial=start, desc="flow-grpo", unit="step")
        step = start + 1  # the step under way (for the message of a Ctrl-C)
        stop = None
        try:
            if start == 0 and cfg.sample_grid_steps:
                self.save_grid(0)
            if self.eval_due(start):  # step 0, or an eval a kill cut off before it was scored
                self.start_eval(start)
                if start == 0 and self.keeps_eval_checkpoint(0):
                    self._checkpoint(0)  # the untrained adapter, a candidate for the best
                if not self.eval_remote:
                    self.collect_evals()
            with self.reward_worker_class(self.reward) as worker:
                for step in range(start + 1, cfg.max_steps + 1):
                    stop = self._step_and_report(step, worker, progress)
                    if stop:
                        break
            stop = stop or self.collect_evals()
        except KeyboardInterrupt:
            raise TrainingInterrupted(self.out, step) from None
        finally:
            if progress is not None:
                progress.close()
        self.load_best_for_export()
        self.save_adapter()
        result = {"step": step, "metrics": self.metrics.read() if acc.is_main_process else [],
                  "hacking_alarms": self.hacking_alarms, "best_model": self.best_model, "stopped": stop}
        if self.hub_repo:
            result["hub_url"] = self.push_to_hub()
        return result

    def _step_and_report(self, step: int, worker: RewardWorker, progress) -> Optional[dict]:
        """One step, its progress (bar or log line), its eval and its checkpoint; the reason to stop (a hacking
        alarm with ``stop_on_hacking``) or None."""
        cfg, acc = self.config, self.accelerator
        record = self._train_step(step, worker)
        stop = self.collect_evals()  # the previous eval's scores, computed while this step trained
        if not stop and self.eval_due(step):
            self.start_eval(step)
        if progress is not None:
            progress.update(1)
            shown = {"reward": f"{record['reward_mean']:.4f}"}
            if record["kl"] is not None:  # beta 0: no KL is computed
                shown["kl"] = f"{record['kl']:.2e}"
            progress.set_postfix(shown)
        elif acc.is_main_process:
            logger.info("%s", step_line(record, cfg.max_steps))
        if step % cfg.save_steps == 0 or step == cfg.max_steps or self.keeps_eval_checkpoint(step):
            self._checkpoint(step)
            self.after_checkpoint()
        if not self.eval_remote:  # scored at once: logged now (after its checkpoint, a candidate for the best)
            stop = stop or self.collect_evals()
        return stop

    def _train_step(self, step: int, worker: RewardWorker) -> dict:
        """One step (module docstring): rollouts, rewards, advantages, update, grid; its ``metrics.jsonl`` record."""
        cfg = self.config
        began = time.perf_counter()
        rollouts, scores, seconds = self._sample_and_score(step, worker)
        result, advantages = self._advantages(rollouts, scores, step)
        if self.rollout_log.due(step):
            self._log_rollouts(step, rollouts, scores, advantages)
        update_began = time.perf_counter()
        stats = self._update(rollouts, advantages, step)
        seconds["update"] = time.perf_counter() - update_began
        if cfg.sample_grid_steps and step % cfg.sample_grid_steps == 0:
            self.save_grid(step)
        seconds["step"] = time.perf_counter() - began
        record = self._step_record(step, result, stats, seconds, scores)
        if self.accelerator.is_main_process:
            with run_writes(f"metrics.jsonl (step {step})", self.out):
                self.metrics.write(record)
        return record


class TrainingInterrupted(KeyboardInterrupt):
    """A Ctrl-C (``KeyboardInterrupt`` in the trainer's own thread) stopped the run; the message says at which step,
    from which checkpoint a ``--resume`` continues (only complete checkpoints are kept) and how."""

    def __init__(self, output_dir, step: int):
        last = latest_checkpoint(output_dir)
        where = f"--resume continues from '{last}'" if last else "no checkpoint was written yet (--resume starts over)"
        super().__init__(f"interrupted during step {step}; only complete files were kept and {where}: rerun the "
                         "same command with --resume to continue")
