"""Rollouts: one group = G edits of one (sources, instruction), made by one call of the editor's stock pipeline
(``num_images_per_prompt = G``) with a :class:`~.rollout_recording.LogProbScheduler` and the transformer's inputs
recorded (:class:`~.rollout_recording.TransformerCalls`).

What a trained step keeps (:class:`TrainedStep`): x_t, x_{t+1}, the rollout log-prob and the keyword inputs of
its transformer calls (1 call, or 2 with CFG: conditional, unconditional). Tensors shared by all steps (prompt
embeddings, source latents inside ``hidden_states`` aside) are kept once, by reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import torch

from .editors import EditorAdapter
from .rollout_recording import SampledStep, TransformerCalls, install_log_prob_scheduler
from .step_plan import StepPlan

__all__ = ["GroupRollout", "TrainedStep", "sample_group"]


@dataclass
class TrainedStep:
    """A trained step of one group: the scheduler's record and the transformer calls' kwargs (batch G)."""

    sampled: SampledStep
    calls: List[dict]

    @property
    def guided(self) -> bool:
        return len(self.calls) > 1


@dataclass
class GroupRollout:
    """One group's rollout.

    Attributes:
        key: the group key (:func:`~.reward_types.group_key` of the source ids and instruction).
        sources / source_ids / instruction: the request.
        images: the G edited images (PIL).
        plan: the rollout's :class:`~.step_plan.StepPlan`.
        steps: the trained steps, in order.
    """

    key: str
    sources: Tuple
    source_ids: Tuple[str, ...]
    instruction: str
    images: list
    plan: StepPlan
    steps: List[TrainedStep] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.images)


def sample_group(editor: EditorAdapter, *, key: str, sources: Sequence, source_ids: Sequence[str], instruction: str,
                 num_images: int, plan: StepPlan, seed: int, guided: bool = True) -> GroupRollout:
    """Run the editor once for ``num_images`` edits under ``plan``; ``seed`` seeds both the initial noise (the
    pipeline's generator) and the SDE noise (the scheduler's), on CPU so a rollout is the same on every device."""
    scheduler = install_log_prob_scheduler(editor.pipeline)
    noise = torch.Generator("cpu").manual_seed(seed)
    sde_noise = torch.Generator("cpu").manual_seed(seed + 1_000_003)
    calls = TransformerCalls(scheduler, plan)
    scheduler.begin_rollout(plan, sde_noise)
    try:
        with torch.no_grad(), calls.attached(editor.transformer):
            images = editor(list(sources), instruction, num_images=num_images, num_steps=plan.num_steps,
                            generator=noise, guided=guided)
    finally:
        recorded = scheduler.end_rollout()
    missing = [i for i in plan.trained if i not in recorded or i not in calls.calls]
    if missing:
        raise RuntimeError(f"editor {editor.name!r} did not run denoising step(s) {missing} through its scheduler and "
                           "transformer; it does not follow the editor protocol (editors.py)")
    steps = [TrainedStep(recorded[i], calls.calls[i]) for i in plan.trained]
    return GroupRollout(key, tuple(sources), tuple(map(str, source_ids)), instruction, list(images), plan, steps)


def slice_calls(calls: List[dict], batched: Sequence[str], rows: Optional[slice]) -> List[dict]:
    """The calls' kwargs restricted to batch ``rows`` (only the per-sample kwargs ``batched`` are sliced)."""
    if rows is None:
        return calls
    return [{k: (v[rows] if k in batched and isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
            for kw in calls]
