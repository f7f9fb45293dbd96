"""Re-running a recorded step at train time: the transformer on the recorded keyword inputs, the pipeline's CFG
combination (:meth:`~.editors.EditorAdapter.combine`), then the same SDE step as the rollout
(:func:`~.sde_step.sde_step` with the recorded ``x_{t+1}``), so the log-prob of the rollout's own sample comes out
of one code path: fully on-policy in fp32 the ratio is exactly 1.

``detach_uncond``: the unconditional branch runs without gradients, so only the conditional prediction is trained
through the CFG combination (flow_grpo SD3, ``scripts/train_sd3.py`` @ac4c86e ``compute_log_prob``:
``noise_pred_uncond = noise_pred_uncond.detach()``, l. 189-190); by default gradients flow through both branches
(OmniGen2-RL ``forward_logprob``, flow_grpo's Qwen-Image-Edit trainer).
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

from .editors import EditorAdapter
from .rollout import TrainedStep, slice_calls
from .sde_step import StepStats, sde_step
from .step_plan import StepPlan

__all__ = ["recompute_step"]


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
