"""Rewards for *training* SpatialReward: the reward functions of its GRPO stage (arXiv 2602.07458, sec. 3.4,
appendix B.1.2), in the form ``trl.GRPOTrainer`` calls. They score the SpatialReward policy's own judgements.
(To use a trained SpatialReward as the reward of an image editor's RL, see
:mod:`modeling_miescore.rewards.callables`.)

Each function is called by ``trl.GRPOTrainer`` as ``f(prompts=..., completions=..., completion_ids=...,
**dataset_columns, trainer_state=..., log_extra=..., log_metric=...)`` and returns one float (or None = "not
applicable") per completion. The dataset columns they read are the ones :func:`prepare_grpo_dataset` writes:
``task`` ("sc"/"pq"), ``instruction``, ``num_sources``, ``images`` (SC: sources then edited; PQ: [edited]) and
``ref_scores`` ([a, b] on 0-25, or None).

1. :class:`OracleConsistencyReward` (``oracle_consistency``): the paper's reward. A judge behind an
   OpenAI-compatible API checks the reasoning and scores for hallucinations and consistency with the images
   (appendix D.4 prompts, :mod:`modeling_miescore.judges.oracle`): 1 / 0.5 / 0. Failures give the configured values and
   are counted; the batch's counts are logged to the trainer as ``oracle/<status>`` metrics.
2. :func:`format_grounding_reward` (``format_grounding``), in [0, 1], from the parser's issue codes:
   0 when no score pair can be read; otherwise a JSON half (0.5 for a strict JSON object and nothing else;
   0.25 when the JSON needed repairs, came from the fallback pattern, or has text/other objects around it) plus
   a grounding half, 0.5 x max(0, 1 - 0.25 k) with k the number of distinct grounding issue codes (SC: one
   ``<|bbox_i|>`` per region, no token without a region, exactly one ``<|global|>`` for one source, valid
   boxes; PQ: no grounding tokens or regions). A perfect output scores 1.
3. :func:`reference_agreement_reward` (``reference_agreement``), in [0, 1], when the row has reference scores:
   the mean over the two sub-scores of ``1 - |pred - ref| / 25`` (0-25 scale, D.1); 0 when the output has no
   score pair; None (not applicable) for rows without references.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable, List, Optional, Sequence

from ..judges.oracle import OracleConfig, OracleJudge, OracleRequest
from ..hub.spatialreward_parsing import GROUNDING_ISSUES, parse_pq_output, parse_sc_output
from ..hub.spatialreward_tokens import strip_control_tokens

logger = logging.getLogger(__name__)

__all__ = ["completion_text", "parse_completion", "format_grounding_reward", "reference_agreement_reward",
           "OracleConsistencyReward", "build_reward_functions", "REWARD_NAMES"]

SCORE_MAX = 25.0  # D.1
_JSON_IMPERFECTIONS = frozenset({"json_repaired", "extra_text_around_json", "multiple_json_objects",
                                 "duplicate_key", "key_alias", "code_fence_removed", "truncated_json"})


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or ``[{"role": "assistant", "content": str | parts}]``."""
    if isinstance(completion, str):
        return strip_control_tokens(completion)
    if isinstance(completion, dict):
        completion = [completion]
    texts: List[str] = []
    for message in completion or []:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return strip_control_tokens("".join(texts))


def _column(values: Optional[Sequence[Any]], n: int, default: Any = None) -> List[Any]:
    if values is None:
        return [default] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"a reward column has {len(values)} values for {n} completions")
    return values


def parse_completion(text: str, task: str, num_sources: Optional[int] = None):
    """Parse with the SC or PQ parser (``num_sources`` decides between D.1.1 and D.1.2 grounding rules)."""
    if str(task).lower() == "pq":
        return parse_pq_output(text)
    return parse_sc_output(text, num_sources=int(num_sources) if num_sources else None)


def _format_score(parsed) -> float:
    if not parsed.parse_ok:
        return 0.0
    strict = parsed.score_source == "json" and not _JSON_IMPERFECTIONS.intersection(parsed.issues)
    json_part = 0.5 if strict else 0.25
    k = len([code for code in parsed.issues if code in GROUNDING_ISSUES])
    return json_part + 0.5 * max(0.0, 1.0 - 0.25 * k)


def format_grounding_reward(prompts=None, completions=None, task=None, num_sources=None, **kwargs) -> List[float]:
    """Valid JSON, valid boxes and grounding tokens consistent with the regions; see the module docstring."""
    n = len(completions)
    tasks, sources = _column(task, n, "sc"), _column(num_sources, n)
    return [_format_score(parse_completion(completion_text(c), t, s))
            for c, t, s in zip(completions, tasks, sources)]


def reference_agreement_reward(prompts=None, completions=None, task=None, ref_scores=None, num_sources=None,
                               **kwargs) -> List[Optional[float]]:
    """Mean of ``1 - |pred - ref| / 25`` over the two sub-scores; None for rows without reference scores."""
    n = len(completions)
    tasks, refs, sources = _column(task, n, "sc"), _column(ref_scores, n), _column(num_sources, n)
    rewards: List[Optional[float]] = []
    for c, t, ref, s in zip(completions, tasks, refs, sources):
        if ref is None or len(ref) != 2 or any(r is None for r in ref):
            rewards.append(None)
            continue
        parsed = parse_completion(completion_text(c), t, s)
        if not parsed.parse_ok:
            rewards.append(0.0)
            continue
        errors = [abs(float(p) - float(r)) / SCORE_MAX for p, r in zip(parsed.score_pair, ref)]
        rewards.append(max(0.0, 1.0 - sum(errors) / 2.0))
    return rewards


class OracleConsistencyReward:
    """TRL reward function wrapping :class:`~modeling_miescore.judges.oracle.OracleJudge` (paper B.1.2 / D.4).

    ``judge``: an ``OracleJudge`` or an ``OracleConfig``. All completions of a step are judged concurrently
    (bounded by ``config.max_workers``). ``stats`` holds the cumulative counts; each call also reports the
    batch's counts through TRL's ``log_metric`` (``oracle/ok``, ``oracle/api_error``, ...).
    """

    __name__ = "oracle_consistency"

    def __init__(self, judge):
        self.judge = judge if isinstance(judge, OracleJudge) else OracleJudge(judge)

    @property
    def stats(self):
        return self.judge.stats

    def requests(self, completions, task=None, instruction=None, images=None, num_sources=None) -> List[OracleRequest]:
        n = len(completions)
        tasks, instructions = _column(task, n, "sc"), _column(instruction, n, "")
        image_lists, sources = _column(images, n), _column(num_sources, n)
        requests = []
        for c, t, instr, ims, s in zip(completions, tasks, instructions, image_lists, sources):
            ims = list(ims or [])
            t = str(t).lower()
            edited = ims[-1] if ims else None
            requests.append(OracleRequest(task=t, completion=completion_text(c), edited=edited,
                                          sources=ims[:-1] if t == "sc" else (), instruction=instr or "",
                                          num_sources=int(s) if s else None))
        return requests

    def __call__(self, prompts=None, completions=None, task=None, instruction=None, images=None, num_sources=None,
                 log_metric: Optional[Callable[[str, float], None]] = None, **kwargs) -> List[Optional[float]]:
        results = self.judge.judge(self.requests(completions, task, instruction, images, num_sources))
        if log_metric is not None and results:
            counts = Counter(r.status for r in results)
            for status in ("ok", "api_error", "judge_unparsable", "policy_unparsable"):
                log_metric(f"oracle/{status}", float(counts.get(status, 0)))
        return [r.value for r in results]

    def close(self) -> None:
        self.judge.close()


REWARD_NAMES = ("oracle_consistency", "format_grounding", "reference_agreement")


def build_reward_functions(names: Sequence[str], oracle_config: Optional[OracleConfig] = None) -> List[Callable]:
    """Reward callables by name (``REWARD_NAMES``; ``oracle`` / ``format`` / ``reference`` are accepted too).
    ``oracle_consistency`` needs ``oracle_config``."""
    aliases = {"oracle": "oracle_consistency", "format": "format_grounding", "reference": "reference_agreement"}
    functions: List[Callable] = []
    for name in names:
        key = aliases.get(name, name)
        if key == "oracle_consistency":
            if oracle_config is None:
                raise ValueError("the oracle_consistency reward needs the judge: set oracle_base_url and "
                                 "oracle_model (an OpenAI-compatible endpoint)")
            functions.append(OracleConsistencyReward(oracle_config))
        elif key == "format_grounding":
            functions.append(format_grounding_reward)
        elif key == "reference_agreement":
            functions.append(reference_agreement_reward)
        else:
            raise ValueError(f"unknown reward function {name!r}; choose from {REWARD_NAMES}")
    return functions
