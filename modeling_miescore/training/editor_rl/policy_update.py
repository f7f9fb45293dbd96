"""The update phase of one RL step: the step's samples become training units (a micro-batch of one group's
samples), shuffled and split into ``updates_per_step`` chunks; each chunk is one optimizer update whose gradient
is accumulated over its units and every trained step of each (Flow-GRPO: accumulation x trained timesteps).

Every process runs the same number of forward/backward passes (DDP, or FSDP2's reduce-scatter, syncs the last
backward of a chunk only; FSDP2 keeps the earlier micro-steps' unsharded gradients locally until then): units
without any advantage (failed samples, skipped or dropped groups) are removed, and a process with fewer units than
the others pads with a zero-weight copy of one of its units.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .editors import EditorAdapter
from .objective import step_loss, step_weights
from .policy_lora import reference_policy
from .rollout import GroupRollout
from .step_recompute import recompute_step

__all__ = ["UPDATE_STAT_KEYS", "TrainingUnit", "make_units", "run_updates", "update_figures"]

# the summed statistics run_updates returns (the trainer adds them up over processes)
UPDATE_STAT_KEYS = ("count", "ratio_sum", "clipped", "approx_kl_sum", "kl_sum", "policy_loss_sum")


class TrainingDivergedError(RuntimeError):
    """A non-finite loss or gradient: the run stops before the optimizer applies it."""


@dataclass
class TrainingUnit:
    """``rows`` of ``rollout``'s samples with their ``advantages`` and ``mask`` (B,), ``weight`` 0 for padding."""

    rollout: GroupRollout
    rows: slice
    advantages: torch.Tensor
    mask: torch.Tensor
    weight: float = 1.0


def make_units(rollouts: Sequence[GroupRollout], advantages: Sequence[Sequence[Optional[float]]],
               micro_batch: int, device) -> List[TrainingUnit]:
    """Units of ``micro_batch`` samples per group, those with at least one advantage."""
    units = []
    for rollout, values in zip(rollouts, advantages):
        for start in range(0, rollout.size, micro_batch):
            part = values[start:start + micro_batch]
            if all(a is None for a in part):
                continue
            mask = torch.tensor([a is not None for a in part], dtype=torch.float32, device=device)
            adv = torch.tensor([0.0 if a is None else a for a in part], dtype=torch.float32, device=device)
            units.append(TrainingUnit(rollout, slice(start, start + len(part)), adv, mask))
    return units


def pad_units(units: List[TrainingUnit], target: int, fallback: Optional[TrainingUnit]) -> List[TrainingUnit]:
    """``units`` padded to ``target`` with zero-weight copies (of ``fallback`` when ``units`` is empty)."""
    source = units[0] if units else fallback
    return units + [TrainingUnit(source.rollout, source.rows, source.advantages, source.mask, 0.0)
                    for _ in range(target - len(units))]


def _rows(unit: TrainingUnit) -> int:
    return unit.rows.stop - unit.rows.start


def _gradient_sync(model, accelerator, sync: bool):
    """No gradient sync on a chunk's non-final backward: DDP's ``no_sync``, or FSDP2's
    ``set_requires_gradient_sync(False)`` (set back before the final backward)."""
    if hasattr(model, "set_requires_gradient_sync"):  # an FSDP2-sharded module
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    return contextlib.nullcontext() if sync else accelerator.no_sync(model)


def _unit_loss(unit: TrainingUnit, index: int, model, raw_model, editor: EditorAdapter, settings, weight: float,
               reference_model=None):
    step = unit.rollout.steps[index]
    plan = unit.rollout.plan
    policy = recompute_step(model, editor, step, plan, unit.rows, detach_uncond=settings.detach_uncond)
    reference = None
    if settings.beta > 0:
        with torch.no_grad():
            if reference_model is not None:
                reference = recompute_step(reference_model, editor, step, plan, unit.rows)
            else:
                with reference_policy(raw_model):
                    reference = recompute_step(raw_model, editor, step, plan, unit.rows)
    old = step.sampled.log_prob[unit.rows]
    return step_loss(policy, old, unit.advantages, unit.mask, clip_range=(settings.clip_range_low,
                     settings.clip_range_high), beta=settings.beta, reference=reference,
                     kl_keep_dt=settings.kl_keep_dt, weight=weight)


def update_figures(passes: List[tuple], norm) -> Tuple[float, float]:
    """The update's loss (summed over its ``passes``, ``(loss, unit, step index)``) and gradient norm, read from the
    device in one host sync; raises :class:`TrainingDivergedError` when either is not finite (before the
    optimizer applies anything)."""
    losses = torch.stack([loss.float() for loss, _, _ in passes])
    if norm is None:
        loss, norm = float(losses.sum()), float("nan")
    else:
        norm = torch.as_tensor(norm).to(device=losses.device, dtype=torch.float32)
        loss, norm = torch.stack([losses.sum(), norm]).tolist()
    if not math.isfinite(loss):
        finite = torch.isfinite(losses).tolist()
        value, unit, index = passes[finite.index(False)]
        raise TrainingDivergedError(f"non-finite loss ({float(value)}) at trained step "
                                    f"{unit.rollout.steps[index].sampled.index} of group {unit.rollout.key}; "
                                    "lower learning_rate or use float32")
    if not math.isfinite(norm):
        raise TrainingDivergedError(f"non-finite gradient norm ({norm}); the update was not applied")
    return loss, norm


def run_updates(units: List[TrainingUnit], *, model, raw_model, editor: EditorAdapter, optimizer, lr_scheduler,
                accelerator, settings, rng: random.Random, params: Sequence[torch.Tensor],
                reference_model=None, on_optimizer_step: Optional[Callable[[], None]] = None) -> Dict[str, float]:
    """Shuffle ``units`` with ``rng``, split them into ``settings.updates_per_step`` chunks and run one optimizer
    update per chunk (``on_optimizer_step`` after each, e.g. the EMA); returns summed statistics plus ``loss`` and
    ``grad_norm`` (means over the updates).

    Nothing waits for the device inside an update: losses and statistics are added up there, and each update
    reads its loss and gradient norm once (:func:`update_figures`), the statistics once at the end."""
    order = list(units)
    rng.shuffle(order)
    chunks = [c for c in (order[i::settings.updates_per_step] for i in range(settings.updates_per_step)) if c]
    sums: Dict[str, torch.Tensor] = {}
    losses, norms = [], []
    for chunk in chunks:
        passes = sum(len(u.rollout.steps) for u in chunk)
        # every (sample, trained step) of the chunk weighs the same: a unit's per-sample mean weighs by its rows
        # (units are equal unless split groups give pieces of several sizes)
        sample_steps = sum(len(u.rollout.steps) * _rows(u) for u in chunk)
        done, chunk_passes = 0, []
        for unit in chunk:
            weights = step_weights([s.sampled for s in unit.rollout.steps], unit.rollout.plan.noise_levels,
                                   settings.step_weighting)
            for index, weight in enumerate(weights):
                done += 1
                sync = done == passes
                with _gradient_sync(model, accelerator, sync):
                    result = _unit_loss(unit, index, model, raw_model, editor, settings, weight, reference_model)
                    loss = result.loss * (unit.weight * _rows(unit) / sample_steps)
                    accelerator.backward(loss)
                chunk_passes.append((loss.detach(), unit, index))
                if unit.weight:
                    for key, value in result.sums.items():
                        sums[key] = sums[key] + value if key in sums else value
        norm = accelerator.clip_grad_norm_(params, settings.max_grad_norm)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # a DTensor for sharded grads
        chunk_loss, norm = update_figures(chunk_passes, norm)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if on_optimizer_step is not None:
            on_optimizer_step()
        losses.append(chunk_loss)
        norms.append(norm)
    totals = dict.fromkeys(UPDATE_STAT_KEYS, 0.0)
    if sums:
        totals.update(zip(sums, torch.stack([v.float() for v in sums.values()]).tolist()))
    totals["loss"] = sum(losses) / len(losses) if losses else float("nan")
    totals["grad_norm"] = sum(norms) / len(norms) if norms else float("nan")
    totals["updates"] = float(len(chunks))
    return totals
