"""The schedules of editor RL: which denoising steps of a rollout are stochastic (SDE), trained, guided (CFG) and
shared by a group (:class:`StepPlan`), how an editor samples outside training (:class:`SamplingSchedule`), and
which requests each process edits at each step, with which seeds (:class:`GroupSchedule`).

**Step plans**: one per group, drawn before its rollout from a seeded ``random.Random``. Trained steps
(``train_steps``, :data:`TRAIN_STEP_MODES`):

- ``"fraction"`` (OmniGen2-RL ``train_timesteps_fraction: 0.6``, DanceGRPO's 60 %): SDE on every step, a fresh
  random sorted subset of ``ceil(fraction * T)`` steps is trained (12 of 20 at 0.6);
- ``"sde_window"`` (flow_grpo's Qwen-Image scripts ``sde_window_size`` / ``sde_window_range``,
  ``qwenimage_edit_plus_pipeline_with_logprob.py`` @9dcdc35): ``window_size`` consecutive SDE steps starting at a
  random step in ``window_range`` (fractions of T), all of them trained; ODE steps (noise level 0) elsewhere. Each
  member runs its own ODE prefix from its own initial noise. ``"window"`` is its deprecated old spelling;
- ``"fast"`` (Flow-GRPO-Fast: flow_grpo ``config/grpo.py`` @54809b5 ``pickscore_sd3_fast``, one prompt per
  sampling call, ``train_num_steps: 2``): the same window, but the group shares one initial noise and one ODE
  prefix, computed **once per group** (``shared_prefix``: the transformer sees one row, its output is every
  member's), and branches into the G members at the window's first SDE step;
- ``"mixgrpo"`` (MixGRPO, arXiv 2507.21802; ``fastvideo/utils/grpo_states.py`` @e5cdd6a, ``progressive`` with
  ``roll_back``): a sliding window of ``window_size`` SDE + trained steps whose start moves with the training
  iteration (:func:`mixgrpo_window`), ODE elsewhere.

With a shared initial noise (``same_latent``) every window mode shares the ODE prefix too (the members are
identical until the first SDE step, so computing it once changes nothing but the cost).

The last step is never trained: its Gaussian is very sharp (flow_grpo trains ``range(T - 1)``; its Qwen-Image
scripts note that the near-image step overflows). Whether it still adds noise is ``last_step``
(:data:`LAST_STEP_MODES`): ``"stochastic"`` (OmniGen2-RL: the SDE on all 20 steps, so rewarded images carry the
final step's noise) or ``"deterministic"`` (flow_grpo's Qwen-Image-Edit pipeline: ``sde_window = (0, T - 1)`` and
noise level 0 from step ``T - 1``, ``qwenimage_edit_plus_pipeline_with_logprob.py`` @9dcdc35). Window modes end
in ODE steps either way.

CFG (``cfg_fraction``): step ``i`` is guided when ``i / T <= cfg_fraction`` (OmniGen2-RL ``cfg_range_end: 0.6``,
inclusive: 13 of 20 steps), ``1`` guides every step, ``0`` none; unguided steps run one transformer call.

**Sampling schedules** (the run's sample grid, ``miescore edit``): so a trained policy is sampled exactly as it was
trained and every output says which schedule made it. A stock pipeline guides every step and takes Euler ODE
steps; :class:`SamplingSchedule` names one choice of CFG fraction, noise level and last-step mode:

- :data:`PIPELINE_SCHEDULE` (``cfg_fraction 1``, ``noise_level 0``): the pipeline's own sampling, the default of
  ``miescore edit`` for a base editor;
- :meth:`SamplingSchedule.trained` (a run's ``cfg_fraction`` and ``last_step``, ODE steps): the guidance the
  policy was trained with, the default of a run's sample grid. ODE evaluation is what both anchors do (flow_grpo's
  ``eval`` samples with ``noise_level=0``; OmniGen2-RL evaluates GEdit with the Euler scheduler,
  ``evaluation/GEdit-Bench/omnigen2.sh`` @6e0f1b9); ``noise_level > 0`` samples with the training SDE itself.

:func:`~.rollout.sample_with_schedule` runs the stock pipeline under a schedule: for :data:`PIPELINE_SCHEDULE` a plain call,
otherwise the rollout machinery with a plan that trains nothing (:mod:`.rollout`).

**Group schedules**: which requests each process turns into edits at each step, and the seeds of those rollouts,
are functions of (seed, step, process) only, so a resumed run draws exactly what the uninterrupted one would have.
The rows are visited in a seeded permutation per epoch; step ``k`` takes the next ``groups_per_step`` of that
endless sequence. The step's edits are laid out group after group, G slots each (``groups_per_step * G`` =
``images_per_batch x rollout batches x processes``); process ``r`` takes the ``r``-th contiguous share of the
slots and samples it in rollout batches of ``images_per_batch`` consecutive slots. Within a batch, the slots of
one group form a :class:`Piece`, sampled by one pipeline call. When ``images_per_batch`` is a multiple of G every
piece is a whole group on one process; otherwise groups are split across processes or batches, as OmniGen2-RL
spreads its groups of 12 over GPUs at 18 images each (its ``RepeatedDistributedBatchSampler``), and the rewards
are normalised per group key after gathering, so the pieces of a group are one group again.
"""

from __future__ import annotations

import hashlib
import math
import random
import warnings
from dataclasses import asdict, dataclass
from typing import List, Mapping, Sequence, Tuple

__all__ = ["DEPRECATED_TRAIN_STEPS", "LAST_STEP_MODES", "SDE_TYPES", "StepPlan", "TRAIN_STEP_MODES", "cfg_steps",
           "last_step_levels", "make_step_plan", "mixgrpo_window", "resolve_train_steps", "PIPELINE_SCHEDULE",
           "SamplingSchedule", "GroupSchedule", "Piece", "derived_seed"]


TRAIN_STEP_MODES = ("fraction", "sde_window", "fast", "mixgrpo")
DEPRECATED_TRAIN_STEPS = {"window": "sde_window"}
LAST_STEP_MODES = ("stochastic", "deterministic")
SDE_TYPES = ("sde", "cps")  # the SDE of a stochastic step (modeling_miescore.training.editor_rl.rollout)


@dataclass(frozen=True)
class StepPlan:
    """Per-step settings of one rollout of ``num_steps`` steps.

    Attributes:
        noise_levels: the SDE noise level ``a`` of each step (0 = ODE step).
        trained: the trained step indices, sorted (never the last step).
        cfg: whether each step runs classifier-free guidance.
        sde_type: ``"sde"`` or ``"cps"`` (see :mod:`.rollout`).
        shared_prefix: the first ``shared_prefix`` steps (all ODE) run once per group: the group's members start
            from one initial noise, so they are identical until the first SDE step.
    """

    noise_levels: Tuple[float, ...]
    trained: Tuple[int, ...]
    cfg: Tuple[bool, ...]
    sde_type: str = "sde"
    shared_prefix: int = 0

    @property
    def num_steps(self) -> int:
        return len(self.noise_levels)


def resolve_train_steps(name: str) -> str:
    """``name`` with a deprecated spelling replaced (a ``FutureWarning`` says so)."""
    if name in DEPRECATED_TRAIN_STEPS:
        new = DEPRECATED_TRAIN_STEPS[name]
        warnings.warn(f"train_steps: {name!r} is deprecated, it is flow_grpo's per-member sde_window: write "
                      f"train_steps: {new!r} (or 'fast' for Flow-GRPO-Fast's shared prefix per group)",
                      FutureWarning, stacklevel=3)
        return new
    return name


def cfg_steps(num_steps: int, cfg_fraction: float) -> Tuple[bool, ...]:
    """Whether each step is guided: ``i / T <= cfg_fraction`` (none at 0)."""
    if cfg_fraction <= 0:
        return (False,) * num_steps
    return tuple(i / num_steps <= cfg_fraction for i in range(num_steps))


def last_step_levels(levels: Sequence[float], last_step: str) -> Tuple[float, ...]:
    """``levels`` with the last step's noise level 0 when ``last_step`` is ``"deterministic"``."""
    if last_step not in LAST_STEP_MODES:
        raise ValueError(f"last_step must be one of {LAST_STEP_MODES}, got {last_step!r}")
    levels = tuple(levels)
    return levels[:-1] + (0.0,) if last_step == "deterministic" and levels else levels


def mixgrpo_window(iteration: int, num_steps: int, window_size: int, shift_interval: int = 25,
                   stride: int = 1) -> Tuple[int, ...]:
    """MixGRPO's trained steps at training ``iteration`` (1-based). ``GRPOTrainingStates`` (``progressive``,
    ``roll_back``; @e5cdd6a): the window starts at 0 and moves ``stride`` steps (``prog_overlap_step``) every
    ``shift_interval`` iterations (``iters_per_group``); once its start passes ``T - 2`` (``max_timesteps =
    sampling_steps - 2``) it rolls back to 0; its steps are ``range(start, min(start + size, T - 2))``. Where that is
    empty (start ``T - 2``; MixGRPO trains nothing in that iteration) the window is step ``T - 2`` alone."""
    if window_size < 1 or shift_interval < 1 or stride < 1:
        raise ValueError("window_size, mixgrpo_shift_interval and mixgrpo_stride must be >= 1")
    last = num_steps - 2
    positions = last // stride + 1
    start = ((iteration - 1) // shift_interval % positions) * stride
    return tuple(range(start, min(start + window_size, last))) or (start,)


def _random_window(num_steps: int, rng: random.Random, window_size: int, window_range) -> Tuple[int, ...]:
    trainable = num_steps - 1  # never the last step
    if not 1 <= window_size <= trainable:
        raise ValueError(f"window_size must be in [1, {trainable}] for {num_steps} steps, got {window_size}")
    low = int(window_range[0] * num_steps)
    high = min(int(math.ceil(window_range[1] * num_steps)), trainable) - window_size
    if high < low:
        raise ValueError(f"window_range {tuple(window_range)} of {num_steps} steps has no room for "
                         f"{window_size} trained steps before the last step")
    start = rng.randint(low, high)
    return tuple(range(start, start + window_size))


def make_step_plan(num_steps: int, rng: random.Random, *, noise_level: float, train_steps: str = "fraction",
                   train_fraction: float = 0.6, window_size: int = 2, window_range: Tuple[float, float] = (0.0, 0.5),
                   cfg_fraction: float = 1.0, sde_type: str = "sde", last_step: str = "stochastic",
                   shared_noise: bool = False, iteration: int = 1, mixgrpo_shift_interval: int = 25,
                   mixgrpo_stride: int = 1) -> StepPlan:
    """Draw the plan of one rollout (module docstring); ``iteration``: the training step (``mixgrpo``);
    ``shared_noise``: the group shares its initial noise (required by ``fast``). Raises ``ValueError`` for
    settings that train nothing."""
    if num_steps < 2:
        raise ValueError(f"a rollout needs at least 2 denoising steps to train one (got {num_steps})")
    train_steps = resolve_train_steps(train_steps)
    if train_steps == "fraction":
        if not 0 < train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
        count = min(num_steps - 1, math.ceil(train_fraction * num_steps))
        trained = tuple(sorted(rng.sample(range(num_steps - 1), count)))
        levels = last_step_levels((noise_level,) * num_steps, last_step)
        return StepPlan(levels, trained, cfg_steps(num_steps, cfg_fraction), sde_type)
    if train_steps in ("sde_window", "fast"):
        trained = _random_window(num_steps, rng, window_size, window_range)
    elif train_steps == "mixgrpo":
        trained = mixgrpo_window(iteration, num_steps, window_size, mixgrpo_shift_interval, mixgrpo_stride)
    else:
        raise ValueError(f"train_steps must be one of {TRAIN_STEP_MODES}, got {train_steps!r}")
    if train_steps == "fast" and not shared_noise:
        raise ValueError("train_steps 'fast' branches one shared trajectory per group: the group must share its "
                         "initial noise (same_latent)")
    levels = tuple(noise_level if i in trained else 0.0 for i in range(num_steps))
    return StepPlan(levels, trained, cfg_steps(num_steps, cfg_fraction), sde_type,
                    shared_prefix=trained[0] if shared_noise else 0)


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
        """The :class:`~.schedule.StepPlan` of ``num_steps`` steps (nothing trained)."""
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


def derived_seed(*parts) -> int:
    """A 63-bit seed from ``parts`` (stable across Python processes and versions)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class Piece:
    """``size`` consecutive members of the step's ``group``-th group, starting at member ``first`` (whole when
    ``first == 0`` and ``size`` is the group size)."""

    group: int
    first: int
    size: int


class GroupSchedule:
    """``batches(step, rank)``: the pieces process ``rank`` samples at ``step`` (1-based), one list per rollout
    batch; ``row_of(step, group)``: the request row of the step's ``group``-th group; ``group_index(step, group)``:
    its run-wide index (the seeds' key)."""

    def __init__(self, num_rows: int, images_per_batch: int, batches_per_step: int, group_size: int,
                 num_processes: int, seed: int):
        total = images_per_batch * batches_per_step * num_processes
        if total % group_size:
            raise ValueError(f"{total} images per step are not whole groups of {group_size}")
        self.num_rows, self.per_batch, self.batches_per_step = num_rows, images_per_batch, batches_per_step
        self.group_size, self.processes, self.seed = group_size, num_processes, seed
        self.groups_per_step = total // group_size
        self._epochs: dict = {}

    def _epoch(self, epoch: int) -> List[int]:
        if epoch not in self._epochs:
            order = list(range(self.num_rows))
            random.Random(derived_seed(self.seed, "epoch", epoch)).shuffle(order)
            self._epochs = {epoch: order, **{e: o for e, o in self._epochs.items() if e == epoch - 1}}
        return self._epochs[epoch]

    def group_index(self, step: int, group: int) -> int:
        return (step - 1) * self.groups_per_step + group

    def row_of(self, step: int, group: int) -> int:
        position = self.group_index(step, group)
        return self._epoch(position // self.num_rows)[position % self.num_rows]

    def batches(self, step: int, rank: int) -> List[List[Piece]]:
        out = []
        for batch in range(self.batches_per_step):
            start = (rank * self.batches_per_step + batch) * self.per_batch
            pieces, slot, end = [], start, start + self.per_batch
            while slot < end:
                group, first = divmod(slot, self.group_size)
                size = min(self.group_size - first, end - slot)
                pieces.append(Piece(group, first, size))
                slot += size
            out.append(pieces)
        return out
