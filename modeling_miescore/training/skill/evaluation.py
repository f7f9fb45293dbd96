"""Scoring a skill (MIEScore paper, eqs. 5, 6 and 8): :class:`SkillEvaluator` runs the evaluator on samples
and records every answer (:class:`EvalRecord`); :func:`select_failures` / :func:`select_successes` pick the
cases shown to the optimiser; :func:`validation_srcc` is the selection objective."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from ...data.schema import DIMENSIONS, MOS_SCALE
from .answers import parse_evaluator_output
from .backends import GenerativeBackend
from .prompts import build_evaluator_prompt
from .samples import SkillSample

__all__ = ["EvalRecord", "SkillEvaluator", "deviation", "select_failures", "select_successes", "validation_srcc"]


@dataclass
class EvalRecord:
    """One rollout: ``pred`` (VQ, IF, AP on 0..score_max) or None with ``error``; ``raw`` is the answer
    (truncated to ``SkillEvaluator.keep_raw_chars``)."""

    id: str
    pred: Optional[Tuple[float, float, float]]
    mos: Tuple[float, float, float]
    error: Optional[str] = None
    raw: Optional[str] = None


class SkillEvaluator:
    """``f(S, x)`` of eq. 5: prompts ``backend`` with the skill and parses the three scores.

    ``score_max``: the scale the answer format asks for (5 matches the default skill's 0-5 bands; use 100
    with a 0-100 rubric). ``batch_size``: prompts per backend call (progress granularity).
    """

    def __init__(self, backend: GenerativeBackend, score_max: float = 5.0, max_new_tokens: int = 256,
                 batch_size: int = 8, keep_raw_chars: int = 2000):
        if not score_max > 0:
            raise ValueError(f"score_max must be > 0, got {score_max}")
        self.backend = backend
        self.score_max = float(score_max)
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = max(1, int(batch_size))
        self.keep_raw_chars = int(keep_raw_chars)

    def evaluate(self, skill: str, samples: Sequence[SkillSample], progress: bool = False,
                 desc: str = "rollout") -> List[EvalRecord]:
        records: List[EvalRecord] = []
        with tqdm(total=len(samples), desc=desc, leave=False, disable=not progress) as bar:
            for start in range(0, len(samples), self.batch_size):
                chunk = samples[start:start + self.batch_size]
                records += self._evaluate_chunk(skill, chunk)
                bar.update(len(chunk))
        return records

    def _evaluate_chunk(self, skill: str, chunk: Sequence[SkillSample]) -> List[EvalRecord]:
        prompts = [build_evaluator_prompt(skill, s, self.score_max) for s in chunk]
        gens = self.backend.generate(prompts, self.max_new_tokens)
        if len(gens) != len(chunk):
            raise RuntimeError(f"backend returned {len(gens)} answers for {len(chunk)} prompts")
        records = []
        for sample, gen in zip(chunk, gens):
            if gen.text is None:
                records.append(EvalRecord(sample.id, None, sample.mos, f"backend_error: {gen.error}", None))
                continue
            parsed = parse_evaluator_output(gen.text, self.score_max)
            pred = None if parsed.scores is None else tuple(parsed.scores[d] for d in DIMENSIONS)
            records.append(EvalRecord(sample.id, pred, sample.mos, parsed.error, gen.text[: self.keep_raw_chars]))
        return records


def deviation(pred: Sequence[float], mos: Sequence[float], score_max: float = 5.0) -> float:
    """``|| pred / score_max - mos / 100 ||_2`` over (VQ, IF, AP): eq. 6's distance on a common 0-1 scale."""
    p = np.asarray(pred, dtype=np.float64) / score_max
    y = np.asarray(mos, dtype=np.float64) / MOS_SCALE
    return float(np.linalg.norm(p - y))


def _case(record: EvalRecord, sample: SkillSample, dev: Optional[float]) -> Dict[str, Any]:
    """A rollout as shown to the optimiser (and kept in the history): a scored one with its deviation, or an
    unparsed one (``dev`` None) with its error and the start of its raw answer."""
    scored = record.pred is not None
    return {"id": record.id, "instruction": sample.instruction, "num_sources": len(sample.sources),
            "pred": list(record.pred) if scored else None, "mos": list(record.mos), "deviation": dev,
            "error": None if scored else record.error, "raw": None if scored else (record.raw or "")[:500]}


def select_failures(records: Sequence[EvalRecord], samples: Mapping[str, SkillSample], num_failures: int = 8,
                    num_unparsed: int = 2, score_max: float = 5.0, min_deviation: float = 0.0) -> List[Dict[str, Any]]:
    """Eq. 6: the ``num_failures`` scored rollouts with the largest deviation (above ``min_deviation``),
    then up to ``num_unparsed`` rollouts whose answer could not be parsed (they tell the optimiser that the
    skill confuses the evaluator). Ties break by sample id, so the choice is deterministic."""
    scored = [(deviation(r.pred, r.mos, score_max), r) for r in records if r.pred is not None]
    scored = sorted((t for t in scored if t[0] > min_deviation), key=lambda t: (-t[0], t[1].id))
    unparsed = sorted((r for r in records if r.pred is None), key=lambda r: r.id)[:num_unparsed]
    return ([_case(r, samples[r.id], dev) for dev, r in scored[:num_failures]]
            + [_case(r, samples[r.id], None) for r in unparsed])


def select_successes(records: Sequence[EvalRecord], samples: Mapping[str, SkillSample], num_successes: int = 2,
                     score_max: float = 5.0, exclude: Iterable[str] = ()) -> List[Dict[str, Any]]:
    """The ``num_successes`` scored rollouts with the smallest deviation (the paper's optimiser reflects on
    "successful and failed evaluations"), not among ``exclude``; same record format as :func:`select_failures`."""
    skip = set(exclude)
    scored = sorted(((deviation(r.pred, r.mos, score_max), r)
                     for r in records if r.pred is not None and r.id not in skip), key=lambda t: (t[0], t[1].id))
    return [_case(r, samples[r.id], dev) for dev, r in scored[:num_successes]]


def validation_srcc(records: Sequence[EvalRecord], min_coverage: float = 0.5) -> Dict[str, Any]:
    """Eq. 8's objective on one set of rollouts: mean over (VQ, IF, AP) of SRCC(pred, MOS).

    Computed on the answers that parsed (failures are never scored). ``objective`` is None when fewer than
    ``max(3, ceil(min_coverage * n))`` answers parsed, so a skill that breaks the evaluator cannot win on a
    lucky subset. A dimension whose predictions are constant has no ranking information: its SRCC is
    reported as None and counts as 0 in the mean.
    """
    from ...evaluation.metrics.correlation import srcc  # deferred: loads scipy

    n = len(records)
    ok = [r for r in records if r.pred is not None]
    out: Dict[str, Any] = {"n": n, "n_parsed": len(ok), "coverage": (len(ok) / n) if n else 0.0,
                           "srcc": {d: None for d in DIMENSIONS}, "objective": None}
    if len(ok) < max(3, math.ceil(min_coverage * n)):
        return out
    pred = np.asarray([r.pred for r in ok], dtype=np.float64)
    mos = np.asarray([r.mos for r in ok], dtype=np.float64)
    values = []
    for j, dim in enumerate(DIMENSIONS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = srcc(pred[:, j], mos[:, j])
        if math.isnan(value):
            values.append(0.0)
        else:
            out["srcc"][dim] = value
            values.append(value)
    out["objective"] = float(np.mean(values))
    return out

