"""The Flow-GRPO objective of one trained step of a micro-batch (Flow-GRPO eq. GRPO; OmniGen2-RL
``compute_single_step_ppo_loss``):

``L = mean_i max(-A_i r_i, -A_i clip(r_i, 1 - eps_low, 1 + eps_high)) + beta * mean_i KL_i``

with ``r_i = exp(log p_theta - log p_old)`` per sample (log-probs are per-element means, :mod:`.sde_step`), the same
advantage at every trained step, and ``KL_i`` the closed-form KL to the reference on the step means
(:func:`~.sde_step.gaussian_kl_on_means`). Only samples with an advantage (``mask``) count.

Logged (flow_grpo ``train_sd3.py``): ``approx_kl = 1/2 mean(dlogp^2)``, ``clipfrac`` = fraction of samples whose
ratio is outside the clip range, ``ratio_mean``.

TempFlow step reweighting (TempFlow-GRPO, arXiv 2508.04324; OmniGen2-RL ``policy_loss_reweighting``): step ``k``'s
policy loss is multiplied by ``s_k / mean_j s_j`` with ``s = sigma_t sqrt(|dt|)`` the step's noise std, so noisier
(early) steps weigh more; the weights average 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import torch

from .sde_step import StepStats, gaussian_kl_on_means, noise_std

__all__ = ["StepLoss", "step_loss", "tempflow_weights"]


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


def tempflow_weights(steps: Sequence, noise_levels: Sequence[float]) -> list:
    """TempFlow weights of trained steps (module docstring); ``steps`` carry ``sigma``, ``sigma_next``,
    ``sigma_max`` and ``index`` (:class:`~.rollout_recording.SampledStep`)."""
    stds = []
    for s in steps:
        sigma = torch.tensor(s.sigma)
        std = noise_std(sigma, s.sigma_max, noise_levels[s.index]) * torch.sqrt(sigma - s.sigma_next)
        stds.append(float(std))
    mean = sum(stds) / len(stds)
    return [x / mean if mean > 0 else 1.0 for x in stds]
