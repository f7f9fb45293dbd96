"""Re-running a recorded step at train time: the transformer on the recorded keyword inputs, the pipeline's CFG
combination (:meth:`~.editors.EditorAdapter.combine`), then the same SDE step as the rollout
(:func:`~.sde_step.sde_step` with the recorded ``x_{t+1}``), so the log-prob of the rollout's own sample comes out
of one code path: fully on-policy in fp32 the ratio is exactly 1.
"""

from __future__ import annotations

from typing import Optional

import torch

from .editors import EditorAdapter
from .rollout import TrainedStep, slice_calls
from .sde_step import StepStats, sde_step
from .step_plan import StepPlan

__all__ = ["recompute_step"]


def _velocity(model: torch.nn.Module, editor: EditorAdapter, calls, num_tokens: int) -> torch.Tensor:
    outputs = [model(**kwargs)[0][:, :num_tokens] for kwargs in calls]
    if len(outputs) == 1:
        return outputs[0]
    return editor.combine(outputs[0], outputs[1])


def recompute_step(model: torch.nn.Module, editor: EditorAdapter, step: TrainedStep, plan: StepPlan,
                   rows: Optional[slice] = None) -> StepStats:
    """The policy's statistics of ``step`` for batch ``rows`` (all when ``None``): ``log_prob`` (B,) of the
    recorded next latents, ``mean`` for the KL. ``model`` is the (possibly wrapped) transformer; gradients flow
    unless the caller disables them."""
    sampled = step.sampled
    sample = sampled.sample if rows is None else sampled.sample[rows]
    target = sampled.next_sample if rows is None else sampled.next_sample[rows]
    calls = slice_calls(step.calls, editor.batched_kwargs, rows)
    velocity = _velocity(model, editor, calls, sample.shape[1])
    return sde_step(velocity, sample, sampled.sigma, sampled.sigma_next, noise_level=plan.noise_levels[sampled.index],
                    sigma_max=sampled.sigma_max, sde_type=plan.sde_type, next_sample=target)
