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
from .rollout_recording import SampledStep, TransformerCalls, install_log_prob_scheduler, kwargs_rows
from .step_plan import StepPlan

__all__ = ["GroupRollout", "TrainedStep", "initial_noise_generators", "sample_group", "slice_calls"]


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
        key: the group key (:func:`~modeling_miescore.rewards.groups.group_key` of the source ids and instruction).
        sources / source_ids / instruction: the request.
        images: the G edited images (PIL).
        plan: the rollout's :class:`~.step_plan.StepPlan`.
        steps: the trained steps, in order.
        transformer_counts: ``{"calls", "rows"}``, the transformer calls the rollout ran and the batch rows they
            processed (a shared prefix runs one row per call; an unguided step's second call runs nothing).
        first_member: the group member the first image is (0 unless the group is split across processes).
    """

    key: str
    sources: Tuple
    source_ids: Tuple[str, ...]
    instruction: str
    images: list
    plan: StepPlan
    steps: List[TrainedStep] = field(default_factory=list)
    transformer_counts: dict = field(default_factory=dict)
    first_member: int = 0

    @property
    def size(self) -> int:
        return len(self.images)


def initial_noise_generators(seed: int, num_images: int, shared: bool):
    """The pipeline's generator: one seeded CPU generator, or with ``shared`` one identically seeded generator
    per image, so every member draws the same initial noise (diffusers draws row ``i`` from ``generator[i]``;
    flow_grpo ``same_latent``, DanceGRPO / MixGRPO ``init_same_noise``)."""
    if shared:
        return [torch.Generator("cpu").manual_seed(seed) for _ in range(num_images)]
    return torch.Generator("cpu").manual_seed(seed)


def sample_group(editor: EditorAdapter, *, key: str, sources: Sequence, source_ids: Sequence[str], instruction: str,
                 num_images: int, plan: StepPlan, seed: int, guided: bool = True, shared_noise: bool = False,
                 sde_seed: Optional[int] = None) -> GroupRollout:
    """Run the editor once for ``num_images`` edits under ``plan``; ``seed`` seeds the initial noise (the
    pipeline's generator; with ``shared_noise`` every member gets the same) and, unless ``sde_seed`` is given,
    the SDE noise (the scheduler's), on CPU so a rollout is the same on every device. A plan with a
    ``shared_prefix`` needs ``shared_noise``: its first steps run the transformer on one row for the group."""
    if plan.shared_prefix and not shared_noise:
        raise ValueError("a plan with a shared prefix needs the group to share its initial noise (shared_noise)")
    scheduler = install_log_prob_scheduler(editor.pipeline)
    noise = initial_noise_generators(seed, num_images, shared_noise)
    sde_noise = torch.Generator("cpu").manual_seed(seed + 1_000_003 if sde_seed is None else sde_seed)
    calls = TransformerCalls(scheduler, plan, editor.batched_kwargs)
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
    return GroupRollout(key, tuple(sources), tuple(map(str, source_ids)), instruction, list(images), plan, steps,
                        dict(calls.counts))


def slice_calls(calls: List[dict], batched: Sequence[str], rows: Optional[slice]) -> List[dict]:
    """The calls' kwargs restricted to batch ``rows`` (only the per-sample kwargs ``batched`` are sliced)."""
    if rows is None:
        return calls
    return [kwargs_rows(kw, batched, rows) for kw in calls]
