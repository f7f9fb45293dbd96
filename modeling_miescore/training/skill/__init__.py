"""Skill optimisation: the first training stage of MIEScore (paper, section "Skill Optimization", eqs. 5-8).

A *skill* is the textual evaluation rubric placed at the start of every prompt (``config.skill`` of a
MIEScore checkpoint; default :data:`modeling_miescore.hub.skill_miescore.DEFAULT_SKILL`). Skill optimisation
refines it with a frozen generative evaluator and an optimiser model:

* eq. 5, ``y_hat = f(S, x)``: :class:`SkillEvaluator` prompts a generative multimodal model with the skill,
  the source images, the instruction and the edited image (:mod:`.prompts`), and parses the three scores
  from its answer (:func:`parse_evaluator_output`). An unparsable answer is a recorded failure, never a
  made-up score.
* eq. 6, failure trajectories: :func:`select_failures` ranks the training rollouts by
  ``|| pred / score_max - mos / 100 ||_2`` over (VQ, IF, AP) and keeps the largest deviations.
* eq. 7, ``S_k = O(S, E; e_k)``: :class:`SkillOptimizer` shows the optimiser model the numbered skill and
  the failures and asks for ``K`` candidates, each a short list of *bounded* edits (add / delete / replace
  of numbered lines, :class:`EditBounds`, :mod:`.edits`), returned as JSON. Anything malformed is rejected
  with a logged reason (:class:`SkillEditError` codes) and the loop carries on.
* eq. 8, selection: every valid candidate is scored on the validation set by the mean over the three
  dimensions of SRCC(pred, MOS) (:func:`validation_srcc`); the best one replaces the current skill only if
  it beats it.

:func:`optimize_skill` (:mod:`.loop`) runs the loop and appends one JSON line per iteration to a history file
(:mod:`.history`); running it again with the same history continues after the last completed iteration (same
results when the backends are deterministic, e.g. greedy decoding or a seeded fake). The models answer through
:mod:`.backends` (a local ``AutoModelForImageTextToText`` or an OpenAI-compatible server).
"""

from .answers import Candidate, EvaluatorParse, parse_edits, parse_evaluator_output, parse_optimizer_output
from .backends import Generation, GenerativeBackend, OpenAIBackend, TransformersBackend
from .config import SkillOptConfig
from .edits import EDIT_ERROR_CODES, Edit, EditBounds, SkillEditError, apply_edits, number_lines, skill_lines, skill_text
from .evaluation import EvalRecord, SkillEvaluator, deviation, select_failures, select_successes, validation_srcc
from .history import SkillHistoryError, read_history
from .loop import SkillOptResult, optimize_skill
from .optimizer import SkillOptimizer
from .prompts import build_evaluator_prompt, build_optimizer_prompt
from .samples import SkillSample, SkillSampleSplit, to_skill_sample

__all__ = [
    "EDIT_ERROR_CODES", "Candidate", "Edit", "EditBounds", "EvalRecord", "EvaluatorParse", "Generation",
    "GenerativeBackend", "OpenAIBackend", "SkillEditError", "SkillEvaluator", "SkillHistoryError", "SkillOptConfig",
    "SkillOptResult", "SkillOptimizer", "SkillSample", "SkillSampleSplit", "TransformersBackend", "apply_edits",
    "build_evaluator_prompt", "build_optimizer_prompt", "deviation", "number_lines", "optimize_skill", "parse_edits",
    "parse_evaluator_output", "parse_optimizer_output", "read_history", "select_failures", "select_successes",
    "skill_lines", "skill_text", "to_skill_sample", "validation_srcc",
]
