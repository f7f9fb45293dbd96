"""The Flow-GRPO objective of one trained step of a micro-batch (Flow-GRPO eq. GRPO; OmniGen2-RL
``compute_single_step_ppo_loss``):

``L = mean_i max(-A_i r_i, -A_i clip(r_i, 1 - eps_low, 1 + eps_high)) + beta * mean_i KL_i``

with ``r_i = exp(log p_theta - log p_old)`` per sample (log-probs are per-element means, :mod:`.sde_step`), the same
advantage at every trained step, and ``KL_i`` the closed-form KL to the reference on the step means
(:func:`~.sde_step.gaussian_kl_on_means`). Only samples with an advantage (``mask``) count.

Logged (flow_grpo ``train_sd3.py``): ``approx_kl = 1/2 mean(dlogp^2)``, ``clipfrac`` = fraction of samples whose
ratio is outside the clip range, ``ratio_mean``.

TempFlow step reweighting (TempFlow-GRPO, arXiv 2508.04324; ``step_weighting``, :data:`STEP_WEIGHTINGS`), with
``s_k = sigma_t sqrt(|dt|)`` the noise std of trained step ``k`` and ``K`` the number of trained steps of the
rollout (noisier, early steps weigh more):

- ``"tempflow"`` (EditScore OmniGen2-RL ``policy_loss_reweighting: true``, ``examples/OmniGen2-RL/train.py``
  @6e0f1b9 (release v0.2; the same lines at 5562c05): ``sample_steps = ceil(T * fraction)`` (l. 749),
  ``normalize_factor = sigma_ts.mean()`` over the sampled steps (l. 752-763), ``policy_loss = policy_loss *
  sample_steps * (sigma_ts[idx] / normalize_factor)`` (l. 900-901), added to ``beta * KL`` unweighted):
  ``w_k = K s_k / mean_j s_j``. The weights average ``K``, so the policy term is ``K`` times (12 at 12 of 20 steps)
  what it is without reweighting while the KL term is not;
- ``"tempflow_mean_one"``: ``w_k = s_k / mean_j s_j``, the same shape averaging 1 (our earlier normalisation:
  relative to the policy term, ``beta`` then pulls ``K`` times harder than in OmniGen2-RL);
- ``"none"``: ``w_k = 1`` (OmniGen2-RL ``policy_loss_reweighting: false``, flow_grpo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import torch

from .sde_step import StepStats, gaussian_kl_on_means, noise_std

__all__ = ["STEP_WEIGHTINGS", "StepLoss", "step_loss", "step_weights", "tempflow_weights"]

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
              kl_keep_dt: bool = False, weight: float = 1.0) -> StepLoss:
    """One trained step. ``advantages``/``mask``: (B,) (mask 1 where the sample has an advantage);
    ``reference``: the reference policy's stats of the same step (needed when ``beta > 0``)."""
    count = mask.sum()
    denominator = count.clamp(min=1)
    log_ratio = policy.log_prob - old_log_prob.detach()
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


def tempflow_weights(steps: Sequence, noise_levels: Sequence[float], *, mean_one: bool = False) -> list:
    """TempFlow weights of trained steps (module docstring): ``K s_k / mean s`` (OmniGen2-RL), or with
    ``mean_one`` ``s_k / mean s``; ``steps`` carry ``sigma``, ``sigma_next``, ``sigma_max`` and ``index``
    (:class:`~.rollout_recording.SampledStep`)."""
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
