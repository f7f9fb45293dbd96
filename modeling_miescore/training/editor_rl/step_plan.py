"""Which denoising steps of a rollout are stochastic (SDE), trained, and guided (CFG): one :class:`StepPlan` per
group, drawn before its rollout from a seeded ``random.Random``.

Trained steps (``train_steps``):

- ``"fraction"`` (OmniGen2-RL ``train_timesteps_fraction: 0.6``, DanceGRPO's 60 %): SDE on every step, a fresh
  random sorted subset of ``ceil(fraction * T)`` steps is trained (12 of 20 at 0.6);
- ``"window"`` (Flow-GRPO-Fast ``sde_window``, MixGRPO): ``window_size`` consecutive SDE steps starting at a random
  step in ``window_range`` (fractions of T), all of them trained; plain ODE steps (noise level 0) elsewhere.

The last step is never trained in either mode: its Gaussian is very sharp (flow_grpo trains ``range(T - 1)``;
its Qwen-Image scripts note that the near-image step overflows).

CFG (``cfg_fraction``): step ``i`` is guided when ``i / T <= cfg_fraction`` (OmniGen2-RL ``cfg_range_end: 0.6``,
inclusive: 13 of 20 steps), ``1`` guides every step, ``0`` none; unguided steps run one transformer call.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Tuple

__all__ = ["SDE_TYPES", "StepPlan", "TRAIN_STEP_MODES", "make_step_plan"]

TRAIN_STEP_MODES = ("fraction", "window")
SDE_TYPES = ("sde", "cps")  # the SDE of a stochastic step (modeling_miescore.training.editor_rl.sde_step)


@dataclass(frozen=True)
class StepPlan:
    """Per-step settings of one rollout of ``num_steps`` steps.

    Attributes:
        noise_levels: the SDE noise level ``a`` of each step (0 = ODE step).
        trained: the trained step indices, sorted (never the last step).
        cfg: whether each step runs classifier-free guidance.
        sde_type: ``"sde"`` or ``"cps"`` (see :mod:`.sde_step`).
    """

    noise_levels: Tuple[float, ...]
    trained: Tuple[int, ...]
    cfg: Tuple[bool, ...]
    sde_type: str = "sde"

    @property
    def num_steps(self) -> int:
        return len(self.noise_levels)


def _cfg_steps(num_steps: int, cfg_fraction: float) -> Tuple[bool, ...]:
    if cfg_fraction <= 0:
        return (False,) * num_steps
    return tuple(i / num_steps <= cfg_fraction for i in range(num_steps))


def make_step_plan(num_steps: int, rng: random.Random, *, noise_level: float, train_steps: str = "fraction",
                   train_fraction: float = 0.6, window_size: int = 2, window_range: Tuple[float, float] = (0.0, 0.5),
                   cfg_fraction: float = 1.0, sde_type: str = "sde") -> StepPlan:
    """Draw the plan of one rollout (module docstring). Raises ``ValueError`` for settings that train nothing."""
    if num_steps < 2:
        raise ValueError(f"a rollout needs at least 2 denoising steps to train one (got {num_steps})")
    trainable = num_steps - 1  # never the last step
    if train_steps == "fraction":
        if not 0 < train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
        count = min(trainable, math.ceil(train_fraction * num_steps))
        trained = tuple(sorted(rng.sample(range(trainable), count)))
        levels = (noise_level,) * num_steps
    elif train_steps == "window":
        if not 1 <= window_size <= trainable:
            raise ValueError(f"window_size must be in [1, {trainable}] for {num_steps} steps, got {window_size}")
        low = int(window_range[0] * num_steps)
        high = min(int(math.ceil(window_range[1] * num_steps)), trainable) - window_size
        if high < low:
            raise ValueError(f"window_range {tuple(window_range)} of {num_steps} steps has no room for "
                             f"{window_size} trained steps before the last step")
        start = rng.randint(low, high)
        trained = tuple(range(start, start + window_size))
        levels = tuple(noise_level if i in trained else 0.0 for i in range(num_steps))
    else:
        raise ValueError(f"train_steps must be one of {TRAIN_STEP_MODES}, got {train_steps!r}")
    return StepPlan(levels, trained, _cfg_steps(num_steps, cfg_fraction), sde_type)
