"""The skill-optimisation loop (MIEScore paper, eqs. 5-8): :func:`optimize_skill` and its result."""

from __future__ import annotations

import logging
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from ...hub.errors import MIEScoreInputError
from .answers import Candidate
from .config import SkillOptConfig
from .evaluation import EvalRecord, SkillEvaluator, select_failures, select_successes, validation_srcc
from .history import records_dicts, resume_history, run_fingerprint, write_history
from .optimizer import SkillOptimizer
from .samples import SkillSample, SkillSampleSplit
from ...hub.skill_miescore import DEFAULT_SKILL

logger = logging.getLogger(__name__)

__all__ = ["SkillOptResult", "optimize_skill"]


@dataclass
class SkillOptResult:
    """Final skill, its validation result, the initial skill's, and every iteration record."""

    skill: str
    val: Dict[str, Any]
    initial_val: Dict[str, Any]
    iterations: List[Dict[str, Any]] = field(default_factory=list)
    history_path: Optional[str] = None


@dataclass
class _Run:
    """What every step of one run needs: the two models, the settings and the two splits."""

    evaluator: SkillEvaluator
    optimizer: SkillOptimizer
    config: SkillOptConfig
    train: SkillSampleSplit
    val: SkillSampleSplit
    progress: bool

    def validate(self, skill: str, desc: str) -> Tuple[List[EvalRecord], Dict[str, Any]]:
        """Eq. 8's objective of ``skill`` on the validation split (with the records it comes from)."""
        records = self.evaluator.evaluate(skill, self.val, self.progress, desc=desc)
        return records, validation_srcc(records, self.config.min_val_coverage)

    def start_record(self, skill: str, fingerprint: Dict[str, Any]) -> Dict[str, Any]:
        """The history's first record: settings, the initial skill and its validation result."""
        records, initial_val = self.validate(skill, "validation (initial skill)")
        # num_iterations is left out: extending a finished run must not change its start record
        recorded = {k: v for k, v in asdict(self.config).items() if k != "num_iterations"}
        logger.info("initial skill: validation objective %s", initial_val["objective"])
        return {"type": "start", "fingerprint": fingerprint, "config": recorded, "initial_skill": skill,
                "val": initial_val, "val_records": records_dicts(records)}

    def rollouts(self, t: int, skill: str) -> Tuple[List[SkillSample], List[EvalRecord]]:
        """Eq. 5: the current skill on iteration ``t``'s seeded training subset (a resumed run draws the same)."""
        rng = random.Random(f"{self.config.seed}:{t}")
        m = min(self.config.train_samples_per_iteration, len(self.train))
        subset = [self.train[i] for i in sorted(rng.sample(range(len(self.train)), m))]
        return subset, self.evaluator.evaluate(skill, subset, self.progress, desc=f"iteration {t}: rollouts")

    def choose(self, t: int, candidates: List[Candidate], current_val: Dict[str, Any]) -> Optional[int]:
        """Eq. 8: validate every valid candidate; the index of the best one that beats the current skill by more
        than ``min_improvement``, or None. A current skill whose validation answers mostly fail to parse has
        objective None: any eligible candidate beats it. Ties between candidates go to the earlier one."""
        threshold = current_val["objective"]
        best_index, best_objective = None, None
        for c in candidates:
            if c.skill is None:
                continue
            _, c.val = self.validate(c.skill, f"iteration {t}: candidate {c.index}")
            obj = c.val["objective"]
            if obj is None or (threshold is not None and obj <= threshold + self.config.min_improvement):
                continue
            if best_objective is None or obj > best_objective:
                best_index, best_objective = c.index, obj
        return best_index

    def iteration(self, t: int, current: str, current_val: Dict[str, Any]) -> Dict[str, Any]:
        """One iteration (eqs. 5-8) from the current skill; returns its history record."""
        cfg = self.config
        subset, rollouts = self.rollouts(t, current)
        by_id = {s.id: s for s in subset}
        train_summary = validation_srcc(rollouts, 0.0)
        failures = select_failures(rollouts, by_id, cfg.num_failures, cfg.num_unparsed_failures, cfg.score_max)
        successes = select_successes(rollouts, by_id, cfg.num_successes, cfg.score_max,
                                     exclude=[f["id"] for f in failures])
        candidates, opt_errors, raw = self.optimizer.propose(current, failures, successes)  # eq. 7
        for c in candidates:
            if c.error:
                logger.info("iteration %d: candidate %d rejected (%s: %s)", t, c.index, c.error, c.error_message)
        for e in opt_errors:
            logger.info("iteration %d: optimiser answer problem (%s: %s)", t, e["code"], e["message"])
        chosen = self.choose(t, candidates, current_val)
        if chosen is not None:
            winner = next(c for c in candidates if c.index == chosen)
            skill, val = winner.skill, winner.val
        else:
            skill, val = current, current_val
        return {
            "type": "iteration", "iteration": t, "skill_before": current, "skill": skill, "val": val,
            "chosen": chosen, "train": {"n": len(subset), "n_parsed": train_summary["n_parsed"],
                                        "srcc": train_summary["srcc"], "objective": train_summary["objective"]},
            "failures": failures, "successes": successes, "rollouts": records_dicts(rollouts),
            "optimizer_raw": raw, "optimizer_errors": opt_errors,
            "candidates": [c.to_dict() for c in candidates],
            "rollout_errors": sorted({r.error.split(":")[0] for r in rollouts if r.error}),
        }


def _check_setup(evaluator: SkillEvaluator, optimizer: SkillOptimizer, config: SkillOptConfig,
                 initial_skill: Optional[str]) -> str:
    """Validate the settings against the models; returns the initial skill S^(0)."""
    config.validate()
    if evaluator.score_max != config.score_max:
        raise ValueError(f"evaluator.score_max={evaluator.score_max} but config.score_max={config.score_max}")
    if optimizer.k != config.num_candidates or optimizer.bounds != config.bounds():
        raise ValueError("optimizer.k / optimizer.bounds differ from config.num_candidates / its edit bounds")
    skill = initial_skill if initial_skill is not None else DEFAULT_SKILL
    if not skill.strip():
        raise MIEScoreInputError("the initial skill is empty; pass a non-empty rubric text")
    return skill


def optimize_skill(train: Any, val: Any, evaluator: SkillEvaluator, optimizer: SkillOptimizer, *,
                   initial_skill: Optional[str] = None, config: SkillOptConfig = SkillOptConfig(),
                   history_path: Union[str, os.PathLike], progress: bool = True) -> SkillOptResult:
    """Run (or continue) skill optimisation (eqs. 5-8) and return the best skill found.

    ``train`` / ``val``: sequences of MIE-Bench rows, dicts or :class:`SkillSample` (a ``datasets.Dataset``
    works; its rows are decoded only when evaluated). ``initial_skill``: S^(0) (default: the MIEScore default skill).
    ``evaluator.score_max`` and ``optimizer.k``/``bounds`` must agree with ``config``.

    History (JSONL, rewritten atomically after every iteration): a ``"start"`` record (settings, initial
    skill, its validation result) and one ``"iteration"`` record per completed iteration with the skill
    before and after, the rollout summary and the failures (eq. 6), the optimiser's raw answer and errors,
    every candidate (edits, resulting skill or rejection reason, validation result), the chosen candidate
    index (None: the current skill was kept). Rerunning with the same ``history_path`` resumes after the
    last completed iteration; settings that would change the results must be the same (else
    :class:`~modeling_miescore.training.skill.history.SkillHistoryError`).
    """
    skill = _check_setup(evaluator, optimizer, config, initial_skill)
    run = _Run(evaluator, optimizer, config, SkillSampleSplit(train, "train"), SkillSampleSplit(val, "validation"),
               progress)
    if not run.train or len(run.val) < 3:
        raise MIEScoreInputError(f"need training samples and at least 3 validation samples, got "
                                 f"{len(run.train)} and {len(run.val)}")
    path = Path(history_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fingerprint = run_fingerprint(config, skill, run.train.ids, run.val.ids)
    history = resume_history(path, fingerprint)
    if history is None:
        history = [run.start_record(skill, fingerprint)]
        write_history(path, history)
    last = history[-1]
    current, current_val = (last["skill"], last["val"]) if len(history) > 1 else (skill, last["val"])
    for t in range(len(history) - 1, config.num_iterations):
        record = run.iteration(t, current, current_val)
        history.append(record)
        write_history(path, history)
        current, current_val = record["skill"], record["val"]
        logger.info("iteration %d: %s (validation objective %s)", t,
                    "kept the current skill" if record["chosen"] is None else f"chose candidate {record['chosen']}",
                    current_val["objective"])
    return SkillOptResult(skill=current, val=current_val, initial_val=history[0]["val"], iterations=history[1:],
                          history_path=str(path))
