"""SpatialReward as an editor-RL reward: the transformers model in this process (``--reward spatialreward:CKPT``)
or an OpenAI-compatible endpoint such as ``vllm serve`` (``--reward spatialreward-api:MODEL@URL``), which is how
the paper ran it: "on a separate dedicated node with 8xH800 GPUs using vLLM" (appendix B.2.1).

Both score with the package's scorers (``SpatialRewardModel.evaluate_edits``, ``SpatialRewardAPI``): the SC and
PQ prompts of appendix D.1, parsing, self-ensemble and the reward of sec. 3.1. The in-process model gets each
group's key as its group id, so a group's SC prefix (chat start + sources) runs once; vLLM's prefix caching does
the same on its side (sec. B.2.3).

Aggregation (``aggregation``): ``None`` keeps the scorer's own reward, by default the paper's weighted geometric
mean ``(SC/25)^0.8 (PQ/25)^0.2`` (sec. 3.1 / 5.4); ``"min"`` is the appendix B.2.2 ablation, the "Bucket
Principle" ``sqrt(min(s_if, s_con) * min(s_nat, s_art)) / 25`` (VIEScore's), which B.2.2 reports rising fast and
saturating early (VIEScore 7.12 against 7.32); ``"arithmetic"`` is sec. 5.4's third variant. Any of them is
recomputed from the four sub-scores with :func:`~modeling_miescore.spatialreward_aggregation.spatial_reward`.

A sample whose SC or PQ answer cannot be parsed, or whose requests failed after the retries, is a failed sample
(its ``failure_reasons``, e.g. ``"sc:parse_failed"``, ``"pq:api_error:http"``), never the scorer's
``failure_reward``. When every sample of a call failed because the endpoint could not be reached or did not answer
in time, or because it refused every request with an HTTP 4xx that no retry changes (a model name it does not
serve, more images per prompt than its ``--limit-mm-per-prompt``, a prompt over its ``--max-model-len``), the reward
raises :class:`~.groups.RewardUnavailableError` with the server's message. Components: ``sc``, ``pq`` and the four
sub-scores, on 0-25.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..spatialreward_aggregation import SCORE_RANGE, spatial_reward
from .groups import (EditGroup, GroupScores, RewardUnavailableError, checked_value, flat_samples, regroup,
                           result_components, score_isolating)

__all__ = ["SpatialRewardReward", "parse_aggregation", "spatialreward_value", "SPATIALREWARD_COMPONENTS"]

AGGREGATIONS = {"weighted": "weighted_geometric", "weighted_geometric": "weighted_geometric",
                "min": "min_bucket", "min_bucket": "min_bucket", "arithmetic": "arithmetic"}
SPATIALREWARD_COMPONENTS = ("sc", "pq", "s_if", "s_con", "s_nat", "s_art")
# failure reasons that mean the endpoint itself is not answering (chat_client.ChatError kinds)
_UNREACHABLE = ("api_error:connection", "api_error:timeout")


def parse_aggregation(value) -> Optional[str]:
    """``None`` (the scorer's own) or an ``aggregation`` mode name from ``weighted`` / ``min`` / ``arithmetic``
    (or the mode names ``weighted_geometric`` / ``min_bucket``)."""
    if value is None:
        return None
    mode = AGGREGATIONS.get(str(value).strip().lower())
    if mode is None:
        raise ValueError(f"unknown SpatialReward aggregation {value!r}; use one of {', '.join(AGGREGATIONS)}")
    return mode


def spatialreward_value(result: dict, aggregation: Optional[str] = None, config=None
                        ) -> Tuple[Optional[float], Optional[str]]:
    """``(reward, None)`` or ``(None, reason)`` for one SpatialReward result dict (``SpatialRewardResult.to_dict()``
    or a ``miescore serve`` answer). ``config``: the scorer's ``SpatialRewardConfig`` for ``alpha``, the weights
    and the score range (default: the paper's)."""
    if result.get("failed") is not False and result.get("failed") is not None:  # true, or not a bool: not scored
        return None, ",".join(map(str, result.get("failure_reasons") or ["failed"]))[:200]
    if aggregation is None:
        return checked_value(result.get("reward"), (0.0, 1.0))
    top = float(config.score_range if config is not None else SCORE_RANGE)
    subscores = []
    for key in ("s_if", "s_con", "s_nat", "s_art"):
        value, reason = checked_value(result.get(key), (0.0, top))
        if reason is not None:
            return None, reason
        subscores.append(value)
    kwargs = {} if config is None else dict(alpha=config.alpha, w_sc=config.w_sc, w_pq=config.w_pq,
                                            score_range=config.score_range)
    return checked_value(spatial_reward(*subscores, mode=aggregation, **kwargs), (0.0, 1.0))


def _takes_group_ids(method) -> bool:
    import inspect

    return "groups" in inspect.signature(method).parameters


class SpatialRewardReward:
    """A SpatialReward scorer (``SpatialRewardModel`` or ``SpatialRewardAPI``) as an
    :class:`~.groups.EditorReward`.

    Args:
        scorer: anything with ``evaluate_edits`` returning ``SpatialRewardResult`` objects.
        aggregation: ``None``, ``"weighted"``, ``"min"`` or ``"arithmetic"`` (module docstring).
        batch_size: samples per ``generate`` call (model; default the largest group) or in flight at once (API;
            default every sample of the call, bounded by the API's ``max_concurrency``).
    """

    def __init__(self, scorer, aggregation=None, batch_size: Optional[int] = None, name: str = "spatialreward"):
        if not hasattr(scorer, "evaluate_edits"):
            raise TypeError(f"a SpatialReward scorer needs evaluate_edits, got {type(scorer).__name__}")
        self.scorer = scorer
        self.aggregation = parse_aggregation(aggregation)
        self.batch_size = batch_size
        self.name = name
        self.reward_range = (0.0, 1.0)  # sec. 3.1: every aggregation lies in [0, 1]
        self._groups_kwarg = _takes_group_ids(scorer.evaluate_edits)

    def _score(self, samples: list, keys: list, batch_size: int) -> list:
        kwargs = {"groups": keys} if self._groups_kwarg else {}
        return [r.to_dict() for r in self.scorer.evaluate_edits(samples, batch_size=batch_size, **kwargs)]

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        groups = list(groups)
        if not groups:
            return []
        samples, keys = flat_samples(groups)
        api = getattr(self.scorer, "backend", "transformers") == "openai"
        batch_size = self.batch_size or (len(samples) if api else max(len(g.edits) for g in groups))
        snapshot = getattr(self.scorer, "stats_snapshot", None)
        before = snapshot() if callable(snapshot) else None
        outcomes = score_isolating(lambda s, k: self._score(s, k, batch_size), samples, keys)
        refused = self.scorer.refusal(before) if before is not None else None
        if refused:
            raise RewardUnavailableError(self.name, refused)
        config = getattr(self.scorer, "config", None)
        rewards, failures, kept = [], [], []
        for result, reason in outcomes:
            value, why = (None, reason) if result is None else spatialreward_value(result, self.aggregation, config)
            rewards.append(value)
            failures.append(why)
            kept.append(result if why is None else None)
        self._check_reachable(failures)
        return regroup(groups, rewards, failures, result_components(kept, SPATIALREWARD_COMPONENTS))

    def _check_reachable(self, failures: List[Optional[str]]) -> None:
        if failures and all(f is not None and any(u in f for u in _UNREACHABLE) for f in failures):
            where = getattr(getattr(self.scorer, "client", None), "base_url", None) or "the endpoint"
            raise RewardUnavailableError(self.name, (
                f"every one of {len(failures)} samples failed because {where} could not be reached or did not answer "
                f"in time ({sorted(set(failures))[0]}); start `vllm serve` there, or raise timeout= / max_retries="))

    def close(self) -> None:
        close = getattr(self.scorer, "close", None)
        if callable(close):
            close()


def build_spatialreward_reward(argument: str, device=None, dtype=None, **options) -> SpatialRewardReward:
    """``spatialreward:CKPT`` -> the checkpoint loaded with
    :func:`~modeling_miescore.scoring.loading.load_spatialreward`."""
    from ..scoring.loading import load_spatialreward

    model = load_spatialreward(argument, device=device or "auto", dtype=dtype or "auto")
    return SpatialRewardReward(model, name=f"spatialreward:{argument}", **options)


def build_spatialreward_api_reward(argument: str, device=None, dtype=None, aggregation=None, batch_size=None,
                                   max_concurrency: int = 64, api_key_env: str = "OPENAI_API_KEY",
                                   timeout: float = 120.0, max_retries: int = 2, config=None) -> SpatialRewardReward:
    """``spatialreward-api:MODEL@URL`` (``URL`` with its API prefix, e.g. ``http://host:8000/v1``) -> a
    :class:`~modeling_miescore.judges.spatialreward_api.SpatialRewardAPI` with the paper's config, or with the
    settings of the checkpoint folder ``config`` (e.g. the ``miescore export-vllm`` folder the server serves: its
    prompts, pixel range and ``max_new_tokens``); ``max_concurrency`` requests in flight (vLLM batches them)."""
    import re

    match = re.match(r"^(.+)@(https?://\S+)$", argument.strip())
    if match is None:
        raise ValueError(f"spatialreward-api:{argument} must be spatialreward-api:MODEL@URL, e.g. "
                         "spatialreward-api:SpatialReward/SpatialReward-8B@http://127.0.0.1:8000/v1")
    model, url = match.groups()
    from ..judges.spatialreward_api import SpatialRewardAPI
    from ..utils.credentials import redact

    scorer = SpatialRewardAPI(url, model=model, api_key_env=api_key_env, timeout=timeout, max_retries=max_retries,
                              max_concurrency=max_concurrency, config=config)
    return SpatialRewardReward(scorer, aggregation=aggregation, batch_size=batch_size,
                               name=redact(f"spatialreward-api:{argument}"))  # the name is shown: no password
