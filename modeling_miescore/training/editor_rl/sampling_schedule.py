"""How an editor samples outside training (the run's sample grid, ``miescore edit``): which denoising steps are
guided and whether each step is the Euler ODE step or the training SDE step, so a trained policy can be sampled
exactly as it was trained and every output says which schedule made it.

A rollout guides step ``i`` when ``i / T <= cfg_fraction`` (OmniGen2-RL ``cfg_range_end: 0.6``, inclusive:
13 of 20 steps; later steps run one unguided transformer call) and takes SDE steps of noise level ``a``, the last
one stochastic or deterministic (``last_step``, :mod:`.step_plan`). A stock pipeline guides every step and takes
Euler ODE steps. :class:`SamplingSchedule` names one choice of the three knobs:

- :data:`PIPELINE_SCHEDULE` (``cfg_fraction 1``, ``noise_level 0``): the pipeline's own sampling, the default of
  ``miescore edit`` for a base editor;
- :meth:`SamplingSchedule.trained` (a run's ``cfg_fraction`` and ``last_step``, ODE steps): the guidance the
  policy was trained with, the default of a run's sample grid. ODE evaluation is what both anchors do (flow_grpo's
  ``eval`` samples with ``noise_level=0``; OmniGen2-RL evaluates GEdit with the Euler scheduler,
  ``evaluation/GEdit-Bench/omnigen2.sh`` @6e0f1b9); ``noise_level > 0`` samples with the training SDE itself,
  where ``last_step`` decides whether the final step adds noise.

:func:`sample_with_schedule` runs the stock pipeline under a schedule: for :data:`PIPELINE_SCHEDULE` a plain call,
otherwise the rollout machinery with a plan that trains nothing (the log-prob scheduler takes the steps, the
transformer wrapper answers the unguided steps' second call; :mod:`.rollout_recording`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

import torch

from .step_plan import LAST_STEP_MODES, SDE_TYPES, StepPlan, cfg_steps, last_step_levels

__all__ = ["PIPELINE_SCHEDULE", "SamplingSchedule", "sample_with_schedule"]


@dataclass(frozen=True)
class SamplingSchedule:
    """``cfg_fraction``: guide steps ``i / T <= cfg_fraction`` (1: every step, 0: none); ``noise_level``: the SDE's
    ``a`` on every step (0: Euler ODE); ``sde_type``: ``sde`` | ``cps``; ``last_step``: ``stochastic`` |
    ``deterministic`` (matters only with ``noise_level > 0``)."""

    cfg_fraction: float = 1.0
    noise_level: float = 0.0
    sde_type: str = "sde"
    last_step: str = "stochastic"

    def __post_init__(self):
        if not 0 <= self.cfg_fraction <= 1:
            raise ValueError(f"cfg_fraction must be in [0, 1], got {self.cfg_fraction}")
        if self.noise_level < 0:
            raise ValueError(f"noise_level must be >= 0, got {self.noise_level}")
        if self.sde_type not in SDE_TYPES:
            raise ValueError(f"sde_type must be one of {', '.join(SDE_TYPES)}, got {self.sde_type!r}")
        if self.last_step not in LAST_STEP_MODES:
            raise ValueError(f"last_step must be one of {', '.join(LAST_STEP_MODES)}, got {self.last_step!r}")

    @classmethod
    def trained(cls, config: Mapping, *, noise: bool = False) -> "SamplingSchedule":
        """The schedule a run trained with, from its config (a :class:`~.config.FlowGRPOConfig` as a dict, or
        ``run.json``): its ``cfg_fraction`` and ``last_step``; ODE steps unless ``noise`` (then its SDE)."""
        return cls(cfg_fraction=float(config.get("cfg_fraction", 1.0)),
                   noise_level=float(config.get("noise_level", 0.0)) if noise else 0.0,
                   sde_type=str(config.get("sde_type", "sde")), last_step=str(config.get("last_step", "stochastic")))

    @property
    def is_pipeline(self) -> bool:
        """Whether this is the stock pipeline's own sampling (CFG every step, ODE)."""
        return self.cfg_fraction >= 1 and self.noise_level == 0

    def plan(self, num_steps: int) -> StepPlan:
        """The :class:`~.step_plan.StepPlan` of ``num_steps`` steps (nothing trained)."""
        levels = last_step_levels((self.noise_level,) * num_steps, self.last_step)
        return StepPlan(levels, (), cfg_steps(num_steps, self.cfg_fraction), self.sde_type)

    def describe(self, num_steps: int) -> str:
        """One line for the console, e.g. ``CFG on steps i/T <= 0.6 (13 of 20 steps), Euler ODE steps``."""
        guided = sum(cfg_steps(num_steps, self.cfg_fraction))
        if self.cfg_fraction >= 1:
            cfg = f"CFG on every step ({num_steps})"
        elif guided == 0:
            cfg = "no CFG"
        else:
            cfg = f"CFG on steps i/T <= {self.cfg_fraction:g} ({guided} of {num_steps} steps)"
        if self.noise_level == 0:
            return f"{cfg}, Euler ODE steps"
        return f"{cfg}, {self.sde_type.upper()} steps at noise level {self.noise_level:g} (last step {self.last_step})"

    def record(self, num_steps: int) -> dict:
        """What an output folder records: the fields, the guided-step count and :meth:`describe`."""
        return {**asdict(self), "num_steps": num_steps, "guided_steps": sum(cfg_steps(num_steps, self.cfg_fraction)),
                "description": self.describe(num_steps)}


PIPELINE_SCHEDULE = SamplingSchedule()


def sample_with_schedule(editor, sources, instruction: str, *, num_images: int, num_steps: int, seed: int,
                         schedule: SamplingSchedule = PIPELINE_SCHEDULE) -> list:
    """``num_images`` edits of ``sources`` (PIL images) under ``schedule``; ``seed`` seeds the initial noise (as a
    CPU generator, so the images are the same on every device) and, for SDE steps, the step noise."""
    if schedule.is_pipeline:
        generator = torch.Generator("cpu").manual_seed(seed)
        return editor(list(sources), instruction, num_images=num_images, num_steps=num_steps, generator=generator)
    from .rollout import sample_group

    rollout = sample_group(editor, key="", sources=sources, source_ids=(), instruction=instruction,
                           num_images=num_images, plan=schedule.plan(num_steps), seed=seed)
    return rollout.images
