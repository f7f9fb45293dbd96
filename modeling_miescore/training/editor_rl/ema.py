"""EMA of the trained parameters, counted as flow_grpo counts it: in optimizer steps.

flow_grpo ``flow_grpo/ema.py`` (``EMAModuleWrapper``, @ac4c86e) with ``scripts/train_sd3.py`` (``decay=0.9,
update_step_interval=8``; ``ema.step(params, global_step)`` after the optimizer steps, ``global_step`` counting
optimizer steps): after optimizer step ``n`` (1-based count of steps so far), when ``(n + 1) % interval == 0``,

``ema <- ema + (1 - d_n) (param - ema)``, ``d_n = min((1 + n) / (10 + n), decay)``,

so the decay reaches 0.9 after 81 optimizer steps ("affects the previous 20 x 8 = 160 steps", the script's
comment). diffusers' ``EMAModel`` counts its own ``step`` calls instead, which made ``ema_update_interval``
count RL steps and the warm-up ``updates_per_step x interval`` times longer. One difference is kept on purpose:
flow_grpo calls ``ema.step`` once per training micro-batch, so with gradient accumulation ``A`` a due update is
applied ``A`` times with the same ``n``; here it is applied once per optimizer step. EMA weights are swapped in
only for the exported adapter (flow_grpo: eval and checkpoints).
"""

from __future__ import annotations

from typing import Iterable, List

import torch

__all__ = ["OptimizerStepEMA"]


class OptimizerStepEMA:
    """``shadow_params`` (the EMA), ``optimization_step`` (optimizer steps so far; both saved in checkpoints).
    Call :meth:`optimizer_step` after every optimizer step."""

    def __init__(self, parameters: Iterable[torch.nn.Parameter], *, decay: float, update_interval: int = 8):
        if update_interval < 1:
            raise ValueError(f"update_interval must be >= 1, got {update_interval}")
        self.shadow_params: List[torch.Tensor] = [p.detach().clone() for p in parameters]
        self.decay, self.update_interval = float(decay), int(update_interval)
        self.optimization_step = 0
        self._stored: List[torch.Tensor] = []

    def decay_at(self, step: int) -> float:
        return min((1 + step) / (10 + step), self.decay)

    @torch.no_grad()
    def optimizer_step(self, parameters: Iterable[torch.nn.Parameter]) -> bool:
        """Count one optimizer step; update the EMA when it is due. Whether it updated."""
        self.optimization_step += 1
        step = self.optimization_step
        if (step + 1) % self.update_interval:
            return False
        weight = 1 - self.decay_at(step)
        for shadow, param in zip(self.shadow_params, parameters, strict=True):
            shadow.add_(weight * (param.detach().to(shadow.device, shadow.dtype) - shadow))
        return True

    @torch.no_grad()
    def store(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        self._stored = [p.detach().clone() for p in parameters]

    @torch.no_grad()
    def copy_to(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        for shadow, param in zip(self.shadow_params, parameters, strict=True):
            param.copy_(shadow.to(param.device, param.dtype))

    @torch.no_grad()
    def restore(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        for stored, param in zip(self._stored, parameters, strict=True):
            param.copy_(stored)
        self._stored = []
