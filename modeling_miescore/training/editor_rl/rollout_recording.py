"""Recording a rollout of a **stock** diffusers pipeline: a scheduler subclass that takes Flow-GRPO SDE steps and
records them, and a recorder of the transformer's keyword inputs.

- :class:`LogProbScheduler` is a ``FlowMatchEulerDiscreteScheduler`` whose ``step`` follows the rollout's
  :class:`~.step_plan.StepPlan` (SDE with the plan's noise level, or the Euler step where it is 0) and records
  ``(x_t, x_next, log p)`` at the plan's trained steps. Outside a rollout (no plan) it is the stock Euler step.
- :class:`TransformerCalls` wraps ``transformer.forward`` while a rollout runs: it keeps the keyword arguments of
  every call at a trained step (one call per CFG branch, in the pipeline's order: conditional first), so training
  re-runs the transformer on exactly what it saw. At a step the plan leaves unguided it answers the second
  (unconditional) call with the first call's output instead of running the network: every pipeline here combines
  ``u + w (c - u)``, which is then exactly ``c`` (Qwen's norm rescale multiplies by ``|c| / |c| = 1``). At a step
  of the plan's shared prefix (a group sharing its initial noise, ODE steps before the branch: Flow-GRPO-Fast) it
  runs the network on the first row only and gives every row that output: the rows are identical there, so the
  prefix costs one row per group instead of G. A forward pre-hook cannot skip or shrink a call, hence the wrapper;
  it is removed when the rollout ends.

The pipeline's denoising loop is not copied: it runs unchanged (notes in :mod:`.rollout`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.schedulers.scheduling_flow_match_euler_discrete import FlowMatchEulerDiscreteSchedulerOutput

from .sde_step import sde_step
from .step_plan import StepPlan

__all__ = ["LogProbScheduler", "SampledStep", "TransformerCalls", "install_log_prob_scheduler", "kwargs_rows"]


@dataclass
class SampledStep:
    """One recorded step. ``sample``/``next_sample``: (B, N, C) fp32 latents before/after the step;
    ``log_prob``: (B,) per-element mean log-density of ``next_sample`` under the rollout policy; the sigmas are
    the schedule's values at this step, the next one and index 1 (the ``sigma = 1`` substitution)."""

    index: int
    sigma: float
    sigma_next: float
    sigma_max: float
    sample: torch.Tensor
    next_sample: torch.Tensor
    log_prob: torch.Tensor


class LogProbScheduler(FlowMatchEulerDiscreteScheduler):
    """``FlowMatchEulerDiscreteScheduler`` with Flow-GRPO SDE steps during a rollout (module docstring)."""

    plan: Optional[StepPlan] = None
    generator: Optional[torch.Generator] = None
    host_sigmas: Optional[tuple] = None  # (self.sigmas, their floats): see _sigma_values
    recorded: Dict[int, SampledStep]

    def begin_rollout(self, plan: StepPlan, generator: torch.Generator) -> None:
        self.plan, self.generator, self.recorded, self.host_sigmas = plan, generator, {}, None

    def end_rollout(self) -> Dict[int, SampledStep]:
        recorded, self.plan, self.generator, self.recorded = getattr(self, "recorded", {}), None, None, {}
        self.host_sigmas = None
        return recorded

    def _sigma_values(self) -> list:
        """The schedule's sigmas as floats, read once per schedule: diffusers keeps ``self.sigmas`` on the model's
        device, where a ``float()`` per step would be a host sync per step."""
        if self.host_sigmas is None or self.host_sigmas[0] is not self.sigmas:
            self.host_sigmas = (self.sigmas, self.sigmas.tolist())
        return self.host_sigmas[1]

    def step(self, model_output, timestep, sample, *args, return_dict: bool = True, **kwargs):
        if self.plan is None:
            return super().step(model_output, timestep, sample, *args, return_dict=return_dict, **kwargs)
        if self.step_index is None:
            self._init_step_index(timestep)
        index = self.step_index
        if len(self.plan.noise_levels) != len(self.sigmas) - 1:
            raise RuntimeError(f"the rollout plan has {self.plan.num_steps} steps but the pipeline set "
                               f"{len(self.sigmas) - 1}; pass num_inference_steps={self.plan.num_steps}")
        sigmas = self._sigma_values()
        sigma, sigma_next, sigma_max = sigmas[index], sigmas[index + 1], sigmas[1]
        stats = sde_step(model_output, sample, sigma, sigma_next, noise_level=self.plan.noise_levels[index],
                         sigma_max=sigma_max, sde_type=self.plan.sde_type, generator=self.generator)
        next_sample = stats.next_sample
        if index in self.plan.trained:
            self.recorded[index] = SampledStep(index, sigma, sigma_next, sigma_max,
                                               sample.detach().float(), next_sample.detach(), stats.log_prob)
        self._step_index += 1
        prev_sample = next_sample.to(model_output.dtype)  # as the stock step: back to the model's dtype
        if not return_dict:
            return (prev_sample,)
        return FlowMatchEulerDiscreteSchedulerOutput(prev_sample=prev_sample)


def install_log_prob_scheduler(pipeline) -> LogProbScheduler:
    """Replace ``pipeline.scheduler`` by a :class:`LogProbScheduler` with the same config (once)."""
    if not isinstance(pipeline.scheduler, LogProbScheduler):
        if not isinstance(pipeline.scheduler, FlowMatchEulerDiscreteScheduler):
            raise TypeError(f"{type(pipeline).__name__} uses {type(pipeline.scheduler).__name__}; Flow-GRPO needs a "
                            "FlowMatchEulerDiscreteScheduler (a rectified-flow editor)")
        pipeline.scheduler = LogProbScheduler.from_config(pipeline.scheduler.config)
    return pipeline.scheduler


def kwargs_rows(kwargs: dict, batched: Sequence[str], rows: slice) -> dict:
    """One transformer call's kwargs restricted to batch ``rows`` (only the per-sample kwargs ``batched``)."""
    return {k: (v[rows] if k in batched and isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}


def _repeat_rows(output, count: int):
    """A transformer output (a tuple whose first entry is the (1, N, C) prediction, or a tensor) for ``count``
    identical rows."""
    def repeat(x):
        return x.expand(count, *x.shape[1:]).clone()

    if isinstance(output, torch.Tensor):
        return repeat(output)
    if isinstance(output, (tuple, list)):
        return type(output)([repeat(output[0]), *output[1:]])
    raise TypeError(f"a shared prefix needs the transformer to return a tensor or a tuple, got {type(output).__name__}")


@dataclass
class TransformerCalls:
    """Keyword inputs of the transformer calls of one rollout (module docstring). ``calls[i]`` lists the kwargs of
    step ``i``'s calls (trained steps only), branch order as the pipeline made them. ``batched``: the per-sample
    kwargs (the editor's ``batched_kwargs``); at a step of the plan's shared prefix the transformer runs on row 0
    of them and its output is repeated for every row (Flow-GRPO-Fast: one prefix per group). ``counts``: the calls
    run and the rows they processed."""

    scheduler: LogProbScheduler
    plan: StepPlan
    batched: Sequence[str] = ()
    calls: Dict[int, List[dict]] = field(default_factory=dict)
    counts: Dict[str, int] = field(default_factory=lambda: {"calls": 0, "rows": 0})
    _step: int = -1
    _branch: int = 0
    _first_output: object = None

    def _run(self, original, index: int, kwargs: dict):
        hidden = kwargs.get("hidden_states")
        batch = hidden.shape[0] if isinstance(hidden, torch.Tensor) else 1
        shared = index < self.plan.shared_prefix and batch > 1
        self.counts["calls"] += 1
        self.counts["rows"] += 1 if shared else batch
        if not shared:
            return original(**kwargs)
        return _repeat_rows(original(**kwargs_rows(kwargs, self.batched, slice(0, 1))), batch)

    def _forward(self, original, *args, **kwargs):
        if args:
            raise TypeError("the editor called its transformer with positional arguments; a recorded rollout needs "
                            "keyword calls (every diffusers pipeline makes them)")
        index = self.scheduler.step_index if self.scheduler.step_index is not None else 0
        if index != self._step:
            self._step, self._branch, self._first_output = index, 0, None
        branch, self._branch = self._branch, self._branch + 1
        guided = self.plan.cfg[index]
        if index in self.plan.trained and (branch == 0 or guided):
            self.calls.setdefault(index, []).append(kwargs)
        if branch > 0 and not guided:
            return self._first_output
        output = self._run(original, index, kwargs)
        if branch == 0:
            self._first_output = output
        return output

    @contextlib.contextmanager
    def attached(self, transformer: torch.nn.Module):
        """Wrap ``transformer.forward`` for the duration of the block (restoring what was there)."""
        had_own = "forward" in transformer.__dict__
        previous = transformer.__dict__.get("forward")
        original = transformer.forward
        transformer.forward = lambda *args, **kwargs: self._forward(original, *args, **kwargs)
        try:
            yield self
        finally:
            if had_own:
                transformer.forward = previous
            else:
                del transformer.forward
