"""The Flow-GRPO objective of editor RL: group advantages, the clipped per-step loss, a recorded step re-run at
train time, and the update phase of one RL step.

**Advantages** (:func:`group_advantages`): ``A_i = (r_i - mean_group) / (std + eps)``, clipped to
``[-clip, clip]`` (SpatialReward B.2.1: advantage clip 5).

- Groups are keyed by :func:`~modeling_miescore.rewards.groups.group_key` (source ids + instruction); rollouts of
  the same key in one step (on any rank) share their statistics.
- ``std_level="group"``: the group's population std (OmniGen2-RL ``process_grpo_rewards``, its default);
  ``"batch"``: the population std of every valid reward of the step (flow_grpo ``global_std``; OmniGen2-RL
  ``std_level: batch``). ``eps = 1e-8`` as OmniGen2-RL (flow_grpo uses 1e-4).
- A failed sample (``None`` reward) is excluded from its group's statistics and gets no advantage; a group with
  fewer than 2 valid samples is skipped (no advantage for any of its samples).
- A group whose valid rewards are all equal ("zero std") has advantage 0 everywhere: counted, and with
  ``drop_zero_std`` its samples get no advantage either (flow_grpo drops zero-advantage samples).

**The loss** of one trained step of a micro-batch (:func:`step_loss`; Flow-GRPO eq. GRPO; OmniGen2-RL
``compute_single_step_ppo_loss``):

``L = mean_i max(-A_i r_i, -A_i clip(r_i, 1 - eps_low, 1 + eps_high)) + beta * mean_i KL_i``

with ``r_i = exp(log p_theta - log p_old)`` per sample (log-probs are per-element means, :mod:`.rollout`), the same
advantage at every trained step, and ``KL_i`` the closed-form KL to the reference on the step means
(:func:`~.rollout.gaussian_kl_on_means`). Only samples with an advantage (``mask``) count. Logged (flow_grpo
``train_sd3.py``): ``approx_kl = 1/2 mean(dlogp^2)``, ``clipfrac`` (samples whose ratio is outside the clip
range), ``ratio_mean``.

TempFlow step reweighting (TempFlow-GRPO, arXiv 2508.04324; ``step_weighting``, :data:`STEP_WEIGHTINGS`), with
``s_k = sigma_t sqrt(|dt|)`` the noise std of trained step ``k`` and ``K`` the number of trained steps of the
rollout (noisier, early steps weigh more):

- ``"tempflow"`` (EditScore OmniGen2-RL ``policy_loss_reweighting: true``, ``examples/OmniGen2-RL/train.py``
  @6e0f1b9, l. 749-763 and 900-901: ``policy_loss * sample_steps * (sigma_ts[idx] / sigma_ts.mean())``, added to
  ``beta * KL`` unweighted): ``w_k = K s_k / mean_j s_j``. The weights average ``K``, so the policy term is ``K``
  times what it is without reweighting while the KL term is not;
- ``"tempflow_mean_one"``: ``w_k = s_k / mean_j s_j``, the same shape averaging 1 (``beta`` then pulls ``K``
  times harder than in OmniGen2-RL);
- ``"none"``: ``w_k = 1`` (OmniGen2-RL ``policy_loss_reweighting: false``, flow_grpo).

**Recompute** (:func:`recompute_step`): the transformer on the recorded keyword inputs, the pipeline's CFG
combination (:meth:`~.editors.EditorAdapter.combine`), then the same SDE step as the rollout with the recorded
``x_{t+1}``, so the log-prob of the rollout's own sample comes out of one code path: fully on-policy in fp32 the
ratio is exactly 1. ``detach_uncond``: the unconditional branch runs without gradients (flow_grpo SD3,
``scripts/train_sd3.py`` @ac4c86e ``compute_log_prob``, l. 189-190); by default gradients flow through both
branches (OmniGen2-RL ``forward_logprob``, flow_grpo's Qwen-Image-Edit trainer).

**The update phase** (:func:`run_updates`): the step's samples become training units (a micro-batch of one group's
samples), shuffled and split into ``updates_per_step`` chunks; each chunk is one optimizer update whose gradient
is accumulated over its units and every trained step of each (Flow-GRPO: accumulation x trained timesteps).
Every process runs the same number of forward/backward passes (DDP, or FSDP2's reduce-scatter, syncs the last
backward of a chunk only): units without any advantage (failed samples, skipped or dropped groups) are removed,
and a process with fewer units than the others pads with a zero-weight copy of one of its units.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .editors import EditorAdapter
from .policy import reference_policy
from .rollout import GroupRollout, StepStats, TrainedStep, gaussian_kl_on_means, noise_std, sde_step, slice_calls
from .schedule import StepPlan

__all__ = ["STD_LEVELS", "StepAdvantages", "group_advantages", "STEP_WEIGHTINGS", "StepLoss", "step_loss",
           "step_weights", "tempflow_weights", "recompute_step", "UPDATE_STAT_KEYS", "TrainingUnit", "make_units",
           "run_updates", "update_figures"]


STD_LEVELS = ("group", "batch")


_LARGE = 1e150  # above this magnitude sums and squares can overflow: the statistics are taken on scaled values


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """Population mean and std, without overflow for finite values of any size (up to ~1.8e308)."""
    scale = max(map(abs, values))
    if scale <= _LARGE or not math.isfinite(scale):
        mean = sum(values) / len(values)
        return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    mean, std = _mean_std([v / scale for v in values])
    return mean * scale, std * scale


def _normalised(reward: float, mean: float, std: float, eps: float) -> float:
    """``(reward - mean) / (std + eps)``; for huge rewards the difference is taken on halves (it would overflow:
    1.7e308 - (-1.7e308)), which changes nothing else (a ratio of halves is the same ratio)."""
    if abs(reward) <= _LARGE and abs(mean) <= _LARGE:
        return (reward - mean) / (std + eps)
    return (reward / 2 - mean / 2) / (std / 2 + eps / 2)


@dataclass
class StepAdvantages:
    """Advantages of a step's rollouts, aligned with the input: ``advantages[j][i]`` for rollout ``j``'s sample
    ``i``, ``None`` where the sample takes no part in the policy loss (failed, skipped or dropped group)."""

    advantages: List[List[Optional[float]]]
    failures: int = 0
    zero_std_groups: int = 0
    skipped_groups: int = 0
    reward_mean: float = float("nan")
    reward_std: float = float("nan")
    group_stats: Dict[str, Tuple[float, float, int]] = field(default_factory=dict)


def group_advantages(groups: Sequence[Tuple[str, Sequence[Optional[float]]]], *, std_level: str = "group",
                     clip: float = 5.0, eps: float = 1e-8, drop_zero_std: bool = False) -> StepAdvantages:
    """Advantages for ``groups``: ``(key, rewards)`` per rollout, rewards ``None`` where the sample failed.

    Counts are per distinct key: ``zero_std_groups`` (all valid rewards equal), ``skipped_groups`` (< 2 valid);
    ``failures`` counts failed samples; ``reward_mean`` / ``reward_std`` are over every valid reward."""
    if std_level not in STD_LEVELS:
        raise ValueError(f"std_level must be one of {STD_LEVELS}, got {std_level!r}")
    if not math.isfinite(clip) or clip <= 0:
        raise ValueError(f"the advantage clip must be a finite number > 0, got {clip}")
    by_key: Dict[str, List[float]] = {}
    failures = 0
    for key, rewards in groups:
        valid = [float(r) for r in rewards if r is not None]
        failures += len(rewards) - len(valid)
        by_key.setdefault(key, []).extend(valid)
    every = [r for values in by_key.values() for r in values]
    result = StepAdvantages([], failures=failures)
    if every:
        result.reward_mean, result.reward_std = _mean_std(every)
    batch_std = result.reward_std if every else 0.0
    for key, values in by_key.items():
        if len(values) < 2:
            result.skipped_groups += 1
            continue
        mean, std = _mean_std(values)
        result.group_stats[key] = (mean, std, len(values))
        if std < 1e-12:
            result.zero_std_groups += 1
    for key, rewards in groups:
        stats = result.group_stats.get(key)
        zero = stats is not None and stats[1] < 1e-12
        if stats is None or (zero and drop_zero_std):
            result.advantages.append([None] * len(rewards))
            continue
        std = stats[1] if std_level == "group" else batch_std
        result.advantages.append([None if r is None else max(-clip, min(clip, _normalised(float(r), stats[0], std,
                                                                                            eps)))
                                  for r in rewards])
    return result


STEP_WEIGHTINGS = ("none", "tempflow", "tempflow_mean_one")


@dataclass
class StepLoss:
    """``loss``: 0-d tensor with gradients; ``sums``: detached 0-d tensors on the loss's device (sums over the
    masked samples, with ``count``) for logging, added up there so an update reads them once (no host sync per
    step); ``stats``: the same as floats."""

    loss: torch.Tensor
    sums: Dict[str, torch.Tensor]

    @property
    def stats(self) -> Dict[str, float]:
        return {key: float(value) for key, value in self.sums.items()}


def step_loss(policy: StepStats, old_log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
              clip_range: Tuple[float, float], beta: float = 0.0, reference: StepStats = None,
              kl_keep_dt: bool = False, weight: float = 1.0, old_mean: Optional[torch.Tensor] = None) -> StepLoss:
    """One trained step. ``advantages``/``mask``: (B,) (mask 1 where the sample has an advantage);
    ``reference``: the reference policy's stats of the same step (needed when ``beta > 0``); ``old_mean``: the
    rollout's step means, for GRPO-Guard's normalised ratio (:func:`guard_log_ratio`)."""
    count = mask.sum()
    denominator = count.clamp(min=1)
    log_ratio = policy.log_prob - old_log_prob.detach()
    if old_mean is not None:
        log_ratio = guard_log_ratio(log_ratio, policy.mean, old_mean, policy.std)
    ratio = torch.exp(log_ratio)
    low, high = clip_range
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    policy_term = (torch.maximum(unclipped, clipped) * mask).sum() / denominator
    loss = weight * policy_term
    stats = {"count": count.detach(), "ratio_sum": (ratio.detach() * mask).sum(),
             "clipped": (((ratio.detach() < 1 - low) | (ratio.detach() > 1 + high)).float() * mask).sum(),
             "approx_kl_sum": (0.5 * log_ratio.detach() ** 2 * mask).sum(),
             "policy_loss_sum": policy_term.detach() * count}
    if beta > 0:
        if reference is None:
            raise ValueError("beta > 0 needs the reference policy's step statistics")
        kl = gaussian_kl_on_means(policy.mean, reference.mean.detach(), policy.sigma_t, policy.std, kl_keep_dt)
        kl_term = (kl * mask).sum() / denominator
        loss = loss + beta * kl_term
        stats["kl_sum"] = kl_term.detach() * count
    return StepLoss(loss, stats)


def guard_log_ratio(log_ratio: torch.Tensor, mean: torch.Tensor, old_mean: torch.Tensor,
                    std: torch.Tensor) -> torch.Tensor:
    """GRPO-Guard's normalised log-ratio of one step (arXiv 2510.22319, RatioNorm with its gradient reweighting;
    X-GenGroup/Flow-Factory ``src/flow_factory/trainers/rl/grpo.py`` @b30dc00, ``GRPOGuardTrainer._guard_ratio``):
    ``s * (log p - log p_old) + mean_elems((mu - mu_old)^2) / (2 s)`` with ``s`` the step's noise std
    (``sigma_t sqrt(|dt|)``). For the per-element-mean Gaussian log-density this is ``mean_elems((mu - mu_old)
    (x' - mu_old)) / s``: the ``-|mu - mu_old|^2 / (2 s^2)`` term that drags the plain ratio's mean below 1 (most at
    the low-noise steps) is gone, and the step's gradient is scaled by ``s``, so every step's ratio has mean 1 and a
    spread set by how far the mean moved in noise units, not by the step's noise level. ``log_ratio``: the plain one
    (B,); ``mean`` / ``old_mean``: (B, ...) the policy's and the rollout's step means."""
    mse = (mean - old_mean.detach().to(mean.dtype)).flatten(1).pow(2).mean(dim=1)
    return log_ratio * std + mse / (2 * std)


def tempflow_weights(steps: Sequence, noise_levels: Sequence[float], *, mean_one: bool = False) -> list:
    """TempFlow weights of trained steps (module docstring): ``K s_k / mean s`` (OmniGen2-RL), or with
    ``mean_one`` ``s_k / mean s``; ``steps`` carry ``sigma``, ``sigma_next``, ``sigma_max`` and ``index``
    (:class:`~.rollout.SampledStep`)."""
    stds = []
    for s in steps:
        sigma = torch.tensor(s.sigma)
        std = noise_std(sigma, s.sigma_max, noise_levels[s.index]) * torch.sqrt(sigma - s.sigma_next)
        stds.append(float(std))
    mean = sum(stds) / len(stds)
    scale = 1.0 if mean_one else float(len(stds))
    return [scale * x / mean if mean > 0 else scale for x in stds]


def step_weights(steps: Sequence, noise_levels: Sequence[float], mode: str) -> list:
    """The policy-loss weight of each trained step under ``step_weighting`` ``mode`` (:data:`STEP_WEIGHTINGS`)."""
    if mode == "none":
        return [1.0] * len(steps)
    if mode not in STEP_WEIGHTINGS:
        raise ValueError(f"step_weighting must be one of {STEP_WEIGHTINGS}, got {mode!r}")
    return tempflow_weights(steps, noise_levels, mean_one=mode == "tempflow_mean_one")


def _velocity(model: torch.nn.Module, editor: EditorAdapter, calls, num_tokens: int,
              detach_uncond: bool = False) -> torch.Tensor:
    cond = model(**calls[0])[0][:, :num_tokens]
    if len(calls) == 1:
        return cond
    with torch.no_grad() if detach_uncond else contextlib.nullcontext():
        uncond = model(**calls[1])[0][:, :num_tokens]
    return editor.combine(cond, uncond)


def recompute_step(model: torch.nn.Module, editor: EditorAdapter, step: TrainedStep, plan: StepPlan,
                   rows: Optional[slice] = None, *, detach_uncond: bool = False) -> StepStats:
    """The policy's statistics of ``step`` for batch ``rows`` (all when ``None``): ``log_prob`` (B,) of the
    recorded next latents, ``mean`` for the KL. ``model`` is the (possibly wrapped) transformer; gradients flow
    unless the caller disables them."""
    sampled = step.sampled
    sample = sampled.sample if rows is None else sampled.sample[rows]
    target = sampled.next_sample if rows is None else sampled.next_sample[rows]
    calls = slice_calls(step.calls, editor.batched_kwargs, rows)
    velocity = _velocity(model, editor, calls, sample.shape[1], detach_uncond)
    return sde_step(velocity, sample, sampled.sigma, sampled.sigma_next, noise_level=plan.noise_levels[sampled.index],
                    sigma_max=sampled.sigma_max, sde_type=plan.sde_type, next_sample=target)


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
    old_mean = step.sampled.mean[unit.rows] if getattr(settings, "grpo_guard", False) else None
    return step_loss(policy, old, unit.advantages, unit.mask, clip_range=(settings.clip_range_low,
                     settings.clip_range_high), beta=settings.beta, reference=reference,
                     kl_keep_dt=settings.kl_keep_dt, weight=weight, old_mean=old_mean)


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
