"""Settings of skill optimisation (:class:`SkillOptConfig`), also the command-line arguments of
``trainers/optimize_skill.py`` (it hands the dataclass to ``TrlParser``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...hub.errors import MIEScoreInputError
from .edits import EditBounds

__all__ = ["RESUME_KEYS", "SkillOptConfig"]

@dataclass
class SkillOptConfig:
    """Settings of :func:`~modeling_miescore.training.skill.loop.optimize_skill` (all recorded in the history).

    ``num_iterations``: iterations in total (a resumed run continues up to this number).
    ``num_candidates``: K of eq. 7. ``train_samples_per_iteration``: rollout subset drawn from the training
    set each iteration (seeded by ``seed`` and the iteration, so a resumed run draws the same subset).
    ``num_failures`` / ``num_unparsed_failures``: failure cases shown to the optimiser (eq. 6);
    ``num_successes``: best-agreeing cases shown for contrast.
    ``min_val_coverage``: fraction of validation answers that must parse for a skill to be eligible.
    ``min_improvement``: a candidate must beat the current skill's objective by more than this.
    ``max_edits_per_candidate``, ``max_line_chars``, ``max_skill_chars``: :class:`EditBounds`.
    """

    num_iterations: int = field(default=5, metadata={"help": "iterations in total (a resumed run continues up to it)"})
    num_candidates: int = field(default=4, metadata={"help": "K candidate skills per iteration (eq. 7)"})
    train_samples_per_iteration: int = field(default=64, metadata={"help": "rollout subset per iteration"})
    num_failures: int = field(default=8, metadata={"help": "largest-deviation failures shown to the optimiser (eq. 6)"})
    num_unparsed_failures: int = field(default=2, metadata={"help": "unparsable answers shown to the optimiser"})
    num_successes: int = field(default=2, metadata={
        "help": "best-agreeing rollouts shown to the optimiser for contrast"})
    min_val_coverage: float = field(default=0.5, metadata={"help": "fraction of validation answers that must parse"})
    min_improvement: float = field(default=0.0, metadata={"help": "required gain in mean validation SRCC"})
    max_edits_per_candidate: int = field(default=4, metadata={"help": "edit bound per candidate"})
    max_line_chars: int = field(default=500, metadata={"help": "characters of one added/replacing line"})
    max_skill_chars: int = field(default=8000, metadata={"help": "characters of the whole skill"})
    score_max: float = field(default=5.0, metadata={
        "help": "scale the evaluator answers on: 5 (default rubric) or 100"})
    seed: int = field(default=0, metadata={"help": "seeds the subsets; resumed runs draw the same ones"})

    def bounds(self) -> EditBounds:
        return EditBounds(self.max_edits_per_candidate, self.max_line_chars, self.max_skill_chars)

    def validate(self) -> None:
        problems = []
        for name in ("num_iterations", "num_candidates", "train_samples_per_iteration"):
            if getattr(self, name) < (0 if name == "num_iterations" else 1):
                problems.append(f"{name}={getattr(self, name)}")
        if not 0.0 <= self.min_val_coverage <= 1.0:
            problems.append(f"min_val_coverage={self.min_val_coverage} (must be in [0, 1])")
        if self.num_failures < 0 or self.num_unparsed_failures < 0 or self.num_successes < 0:
            problems.append("num_failures / num_unparsed_failures / num_successes must be >= 0")
        for name in ("max_edits_per_candidate", "max_line_chars", "max_skill_chars"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} (must be >= 1)")
        if not self.score_max > 0:
            problems.append(f"score_max={self.score_max} (must be > 0)")
        if problems:
            raise MIEScoreInputError("invalid skill optimisation settings: " + "; ".join(problems))


# Settings that change what a resumed iteration would compute; a history written with other values
# cannot be continued.
RESUME_KEYS = ("num_candidates", "train_samples_per_iteration", "num_failures", "num_unparsed_failures",
               "num_successes", "min_val_coverage", "min_improvement", "max_edits_per_candidate", "max_line_chars",
               "max_skill_chars", "score_max", "seed")

