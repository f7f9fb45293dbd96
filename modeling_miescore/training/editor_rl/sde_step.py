"""The Flow-GRPO sampling step with its log-probability (Liu et al. 2025, arXiv 2505.05470, sec. 4.1), in fp32.

Conventions of diffusers' ``FlowMatchEulerDiscreteScheduler``: ``x_t = (1 - sigma) x_0 + sigma eps`` (sigma 1 is
noise, 0 is data), the network predicts the velocity ``v ~ eps - x_0``, step ``i`` goes from ``sigma`` to
``sigma_next`` so ``dt = sigma_next - sigma < 0``.

``"sde"`` (Flow-GRPO's ODE -> SDE conversion, the default):

- noise schedule ``sigma_t = a * sqrt(sigma / (1 - sigma'))`` with ``a`` the noise level and ``sigma' = sigma``
  except at ``sigma = 1``, where the denominator uses the schedule's second sigma instead (no division by zero;
  as flow_grpo's ``sde_step_with_logprob``);
- mean ``mu = x (1 + sigma_t^2 dt / (2 sigma)) + v (1 + sigma_t^2 (1 - sigma) / (2 sigma)) dt`` (Euler-Maruyama of
  ``dx = [v + sigma_t^2 / (2 sigma) (x + (1 - sigma) v)] dt + sigma_t dw``), std ``s = sigma_t sqrt(-dt)``;
- ``log p = -(x' - mu)^2 / (2 s^2) - log s - log sqrt(2 pi)``, **averaged over the latent elements** of each sample
  (not summed), so a ratio ``exp(logp - logp_old)`` is a per-element geometric mean and clip ranges are ~1e-4.

With ``a = 0`` the mean is the plain Euler step ``x + v dt`` (and there is no density: such steps are ODE steps).

``"cps"`` (Coefficients-Preserving Sampling, arXiv 2509.05952): ``x0 = x - sigma v``, ``x1 = x + (1 - sigma) v``,
``s = sigma_next sin(a pi / 2)``, ``mu = (1 - sigma_next) x0 + sqrt(sigma_next^2 - s^2) x1``; log p =
``-(x' - mu)^2`` averaged over elements (constants dropped, as flow_grpo does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ...utils.random_draws import randn_tensor
from .step_plan import SDE_TYPES

__all__ = ["SDE_TYPES", "StepStats", "noise_std", "sde_step", "gaussian_kl_on_means"]


@dataclass
class StepStats:
    """One sampling step of a batch. Shapes: ``mean``, ``next_sample`` (B, ...) like the latents; ``std`` a 0-d
    tensor (the same for every element); ``log_prob`` (B,), the per-element mean log-density of ``next_sample``
    (``None`` for an ODE step); ``sigma_t`` the 0-d noise schedule value (the KL's scale)."""

    mean: torch.Tensor
    std: torch.Tensor
    sigma_t: torch.Tensor
    next_sample: torch.Tensor
    log_prob: Optional[torch.Tensor]


def noise_std(sigma: torch.Tensor, sigma_max: float, noise_level: float) -> torch.Tensor:
    """``sigma_t = a sqrt(sigma / (1 - sigma'))`` with ``sigma' = sigma_max`` where ``sigma == 1`` (module doc)."""
    denominator = 1 - torch.where(sigma == 1, torch.full_like(sigma, sigma_max), sigma)  # no host tensor
    return noise_level * torch.sqrt(sigma / denominator)


def _scalar_on(value, like: torch.Tensor) -> torch.Tensor:
    """``value`` (a number or a 0-d tensor) as a 0-d fp32 tensor on ``like``'s device; a number is filled there
    (``torch.full``), not copied from the host (``torch.as_tensor(x, device=cuda)`` waits for the device)."""
    if isinstance(value, torch.Tensor):
        return value.to(device=like.device, dtype=torch.float32)
    return torch.full((), float(value), dtype=torch.float32, device=like.device)


def _per_sample_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=tuple(range(1, x.ndim)))


def sde_step(velocity: torch.Tensor, sample: torch.Tensor, sigma, sigma_next, *, noise_level: float,
             sigma_max: float, sde_type: str = "sde", next_sample: Optional[torch.Tensor] = None,
             generator: Optional[torch.Generator] = None) -> StepStats:
    """One step from ``sample`` (x_t, shape (B, ...)) with predicted ``velocity`` (same shape), in fp32.

    ``next_sample`` given: its log-probability under this step (training); otherwise a new one is drawn with
    ``generator`` (sampling). ``noise_level == 0``: the Euler ODE step, ``log_prob`` is ``None``. ``sigma_max``: the
    schedule's second sigma (the ``sigma = 1`` substitution)."""
    if sde_type not in SDE_TYPES:
        raise ValueError(f"sde_type must be one of {SDE_TYPES}, got {sde_type!r}")
    v = velocity.float()
    x = sample.float()
    sigma, sigma_next = _scalar_on(sigma, x), _scalar_on(sigma_next, x)
    dt = sigma_next - sigma
    if noise_level == 0:
        mean = x + v * dt
        zero = torch.zeros((), device=x.device)
        return StepStats(mean, zero, zero, mean if next_sample is None else next_sample.float(), None)
    if sde_type == "sde":
        sigma_t = noise_std(sigma, sigma_max, noise_level)
        mean = x * (1 + sigma_t ** 2 / (2 * sigma) * dt) + v * (1 + sigma_t ** 2 * (1 - sigma) / (2 * sigma)) * dt
        std = sigma_t * torch.sqrt(-dt)
    else:
        sigma_t = sigma_next * math.sin(noise_level * math.pi / 2)
        mean = (x - sigma * v) * (1 - sigma_next) + (x + v * (1 - sigma)) * torch.sqrt(sigma_next ** 2 - sigma_t ** 2)
        std = sigma_t
    if next_sample is None:
        # drawn on the generator's device, then moved (a CPU generator with CUDA latents: utils.random_draws)
        noise = randn_tensor(x.shape, generator=generator, device=x.device, dtype=torch.float32)
        next_sample = mean + std * noise
    target = next_sample.detach().float()
    if sde_type == "sde":
        log_density = (-((target - mean) ** 2) / (2 * std ** 2) - torch.log(std)
                       - math.log(math.sqrt(2 * math.pi)))
    else:
        log_density = -((target - mean) ** 2)
    return StepStats(mean, std, sigma_t, target, _per_sample_mean(log_density))


def gaussian_kl_on_means(mean: torch.Tensor, mean_ref: torch.Tensor, sigma_t: torch.Tensor,
                         std: torch.Tensor, keep_dt: bool = False) -> torch.Tensor:
    """KL(policy step || reference step), shape (B,): two Gaussians with the same variance differ only in their
    means. ``keep_dt=False`` (flow_grpo, OmniGen2-RL): ``mean_elems((mu - mu_ref)^2) / (2 sigma_t^2)`` — the step's
    ``|dt|`` is dropped from the variance, which weighs late (small-dt) steps as much as early ones and makes the
    term ~1/|dt| (~T) times larger than the exact KL, so the same beta regularises harder. ``keep_dt=True``: the
    exact per-element KL ``mean_elems((mu - mu_ref)^2) / (2 s^2)`` with ``s = sigma_t sqrt(|dt|)``."""
    scale = std if keep_dt else sigma_t
    return _per_sample_mean((mean - mean_ref) ** 2) / (2 * scale ** 2)
