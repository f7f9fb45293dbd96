"""Rollouts of a **stock** diffusers pipeline with the Flow-GRPO SDE step and its log-probability.

**The step** (Liu et al. 2025, arXiv 2505.05470, sec. 4.1; :func:`sde_step`, in fp32). Conventions of diffusers'
``FlowMatchEulerDiscreteScheduler``: ``x_t = (1 - sigma) x_0 + sigma eps`` (sigma 1 is noise, 0 is data), the
network predicts the velocity ``v ~ eps - x_0``, step ``i`` goes from ``sigma`` to ``sigma_next`` so
``dt = sigma_next - sigma < 0``. ``"sde"`` (Flow-GRPO's ODE -> SDE conversion, the default):

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

**Recording** (the pipeline's denoising loop runs unchanged):

- :class:`LogProbScheduler` is a ``FlowMatchEulerDiscreteScheduler`` whose ``step`` follows the rollout's
  :class:`~.schedule.StepPlan` (SDE with the plan's noise level, or the Euler step where it is 0) and records
  ``(x_t, x_next, log p)`` at the plan's trained steps. Outside a rollout (no plan) it is the stock Euler step.
- :class:`TransformerCalls` wraps ``transformer.forward`` while a rollout runs: it keeps the keyword arguments of
  every call at a trained step (one call per CFG branch, in the pipeline's order: conditional first), so training
  re-runs the transformer on exactly what it saw. At a step the plan leaves unguided it answers the second
  (unconditional) call with the first call's output instead of running the network: every pipeline here combines
  ``u + w (c - u)``, which is then exactly ``c`` (Qwen's norm rescale multiplies by ``|c| / |c| = 1``). At a step
  of the plan's shared prefix (Flow-GRPO-Fast) it runs the network on the first row only and gives every row that
  output: the rows are identical there, so the prefix costs one row per group instead of G. A forward pre-hook
  cannot skip or shrink a call, hence the wrapper; it is removed when the rollout ends.

**A group** (:func:`sample_group`): G edits of one (sources, instruction), made by one call of the editor's stock
pipeline (``num_images_per_prompt = G``). What a trained step keeps (:class:`TrainedStep`): x_t, x_{t+1}, the
rollout log-prob and the keyword inputs of its transformer calls (1 call, or 2 with CFG: conditional,
unconditional). Tensors shared by all steps (prompt embeddings, source latents inside ``hidden_states`` aside)
are kept once, by reference.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.schedulers.scheduling_flow_match_euler_discrete import FlowMatchEulerDiscreteSchedulerOutput

from ...rewards.groups import EditGroup, group_key
from ...utils.random_draws import randn_tensor
from .editors import EditorAdapter
from .schedule import PIPELINE_SCHEDULE, SDE_TYPES, SamplingSchedule, StepPlan

__all__ = ["SDE_TYPES", "StepStats", "noise_std", "sde_step", "gaussian_kl_on_means", "LogProbScheduler",
           "SampledStep", "TransformerCalls", "install_log_prob_scheduler", "kwargs_rows", "GroupRollout",
           "TrainedStep", "initial_noise_generators", "sample_group", "slice_calls", "sample_with_schedule",
           "sample_request"]


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


@dataclass
class SampledStep:
    """One recorded step. ``sample``/``next_sample``: (B, N, C) fp32 latents before/after the step;
    ``log_prob``: (B,) per-element mean log-density of ``next_sample`` under the rollout policy; the sigmas are
    the schedule's values at this step, the next one and index 1 (the ``sigma = 1`` substitution); ``mean``: the
    step's mean under the rollout policy (kept only for GRPO-Guard's ratio, :mod:`.objective`)."""

    index: int
    sigma: float
    sigma_next: float
    sigma_max: float
    sample: torch.Tensor
    next_sample: torch.Tensor
    log_prob: torch.Tensor
    mean: Optional[torch.Tensor] = None


class LogProbScheduler(FlowMatchEulerDiscreteScheduler):
    """``FlowMatchEulerDiscreteScheduler`` with Flow-GRPO SDE steps during a rollout (module docstring)."""

    plan: Optional[StepPlan] = None
    generator: Optional[torch.Generator] = None
    host_sigmas: Optional[tuple] = None  # (self.sigmas, their floats): see _sigma_values
    recorded: Dict[int, SampledStep]
    keep_means: bool = False

    def begin_rollout(self, plan: StepPlan, generator: torch.Generator, keep_means: bool = False) -> None:
        self.plan, self.generator, self.recorded, self.host_sigmas = plan, generator, {}, None
        self.keep_means = keep_means

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
                                               sample.detach().float(), next_sample.detach(), stats.log_prob,
                                               stats.mean.detach() if self.keep_means else None)
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
        plan: the rollout's :class:`~.schedule.StepPlan`.
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
                 sde_seed: Optional[int] = None, keep_means: bool = False) -> GroupRollout:
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
    scheduler.begin_rollout(plan, sde_noise, keep_means)
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


def sample_with_schedule(editor, sources, instruction: str, *, num_images: int, num_steps: int, seed: int,
                         schedule: SamplingSchedule = PIPELINE_SCHEDULE) -> list:
    """``num_images`` edits of ``sources`` (PIL images) under ``schedule``; ``seed`` seeds the initial noise (as a
    CPU generator, so the images are the same on every device) and, for SDE steps, the step noise."""
    if schedule.is_pipeline:
        generator = torch.Generator("cpu").manual_seed(seed)
        return editor(list(sources), instruction, num_images=num_images, num_steps=num_steps, generator=generator)
    rollout = sample_group(editor, key="", sources=sources, source_ids=(), instruction=instruction,
                           num_images=num_images, plan=schedule.plan(num_steps), seed=seed)
    return rollout.images


def sample_request(editor, request, *, num_images: int, num_steps: int, seed: int,
                   schedule: SamplingSchedule = PIPELINE_SCHEDULE) -> EditGroup:
    """A request's (:class:`~modeling_miescore.data.editing_inputs.EditingRequest`) ``num_images`` edits under
    ``schedule`` (:func:`sample_with_schedule`), as the reward's :class:`~modeling_miescore.rewards.groups.EditGroup`."""
    sources = request.load_sources()
    edits = sample_with_schedule(editor, sources, request.instruction, num_images=num_images, num_steps=num_steps,
                                 seed=seed, schedule=schedule)
    return EditGroup(group_key(request.source_ids, request.instruction), tuple(sources), request.instruction,
                     tuple(edits), tuple(request.source_ids))
