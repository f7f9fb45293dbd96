"""The reward backends, each an :class:`~.groups.EditorReward` that scores whole groups and flags failed samples
(a reason, never a made-up number):

- **MIEScore** (``miescore:CKPT``, :class:`MIEScoreReward`): a group's G edits in one ``score_batch`` call with the
  group's key as group id, so the prompt prefix runs once (exact to float rounding, ``docs/prefix_reuse.md``). The
  reward is ``overall / 100``, the paper's eq. 2 ``VQ^0.3 * IF^0.4 * AP^0.3`` mapped to [0, 1], or the
  ``weights`` given instead of the exponents; the three dimension scores are components.
- **SpatialReward** (``spatialreward:CKPT`` in this process, ``spatialreward-api:MODEL@URL`` an OpenAI-compatible
  endpoint such as ``vllm serve``, as the paper ran it, appendix B.2.1; :class:`SpatialRewardReward`): the SC and
  PQ prompts of appendix D.1 and the reward of sec. 3.1, ``(SC/25)^0.8 (PQ/25)^0.2``; ``aggregation="min"`` is the
  B.2.2 "Bucket Principle" ablation and ``"arithmetic"`` sec. 5.4's third variant. Failed samples carry the
  scorer's reason (``"sc:parse_failed"``, ``"pq:api_error:http"``), never its ``failure_reward``. An endpoint that
  answered no sample (unreachable, too slow, or a 4xx no retry changes) raises
  :class:`~.groups.RewardUnavailableError` with its message.
- **Served** (``serve:URL[,URL...]``, :class:`ServedReward`): ``miescore serve`` replicas through the
  :class:`~modeling_miescore.serving.reward_client.RewardClient`, each group whole to one replica; answers are
  rewarded as in-process MIEScore (``overall``) or SpatialReward (``reward``). Unreadable edits are not sent
  (``unreadable_image``); an edit the server refuses or fails on is a failed sample (``http_422``) and the rest
  of its request is scored without it. No replica left, or a wrong API key: :class:`~.groups.RewardUnavailableError`.
- **Weighted sums** (``"0.7*miescore:CKPT + 0.3*pkg.mod:fn"``, :class:`WeightedSumReward`): ``sum_k w_k * R_k``
  per edit, the terms on one thread each; an edit fails when any term failed on it (``"<term>:<reason>"``).
"""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

from ..hub.configuration_miescore import SCORE_NAMES
from ..hub.miescore_overall import overall_score
from ..serving.reward_client import RewardClient, RewardServerError
from ..hub.spatialreward_aggregation import SCORE_RANGE, spatial_reward
from .groups import (EditGroup, GroupScores, RewardUnavailableError, checked_value, flat_samples, reward_range_of,
                     rewarded, score_isolating)
from ..scoring.loading import load_scorer, load_spatialreward
from ..serving.backends import takes_group_ids
from ..judges.spatialreward_api import SpatialRewardAPI
from ..utils.credentials import redact
from ..hub.errors import MIEScoreInputError
from ..hub.image_io import load_image

__all__ = ["MIEScoreReward", "parse_score_weights", "miescore_value", "SpatialRewardReward", "parse_aggregation",
           "spatialreward_value", "SPATIALREWARD_COMPONENTS", "ServedReward", "SERVED_RETRY_STATUSES",
           "WeightedSumReward"]


# short names accepted in weights, in the order of SCORE_NAMES (visual quality, instruction following, attribute
# preservation)
SCORE_ALIASES = {"vq": SCORE_NAMES[0], "if": SCORE_NAMES[1], "ap": SCORE_NAMES[2]}


def parse_score_weights(weights, score_names: Sequence[str] = SCORE_NAMES) -> Optional[tuple]:
    """``None`` (the checkpoint's overall) or the exponents over ``score_names``, summing to 1, from three numbers
    (a sequence or ``"0.2,0.6,0.2"``) or a mapping / ``"vq=0.2,if=0.6,ap=0.2"`` by name or alias (missing: 0)."""
    if weights is None:
        return None
    names = list(score_names)
    if isinstance(weights, str):
        text = weights.strip()
        if "=" in text:
            weights = dict(part.split("=", 1) for part in re.split(r"\s*,\s*", text) if part)
        else:
            weights = [part for part in re.split(r"\s*,\s*", text) if part]
    if isinstance(weights, dict):
        by_name = {}
        for name, value in weights.items():
            full = SCORE_ALIASES.get(str(name).strip().lower(), str(name).strip())
            if full not in names:
                raise ValueError(f"score weight {name!r} is not one of {', '.join(names)} (or vq, if, ap)")
            by_name[full] = value
        weights = [by_name.get(name, 0.0) for name in names]
    try:
        values = [float(w) for w in weights]
    except (TypeError, ValueError):
        raise ValueError(f"score weights must be numbers, got {weights!r}") from None
    if len(values) != len(names):
        raise ValueError(f"give {len(names)} score weights ({', '.join(names)}), got {len(values)}")
    if any(not math.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
        raise ValueError(f"score weights must be non-negative with a positive sum, got {values}")
    total = sum(values)
    return tuple(v / total for v in values)


def miescore_value(result: dict, weights: Optional[tuple], scale: float = 0.01,
                   score_names: Sequence[str] = SCORE_NAMES, score_scale: float = 100.0
                   ) -> Tuple[Optional[float], Optional[str]]:
    """``(reward, None)`` for one MIEScore result dict (scores on ``[0, score_scale]``, the MOS scale 0-100):
    ``overall * scale`` or the weighted geometric mean of the dimensions ``* scale``; ``(None, reason)`` when a
    score it needs is missing, not a number (``"55"``, ``true``), not finite or off the scale
    (:func:`~.groups.checked_value`)."""
    needed = ["overall"] if weights is None else list(score_names)
    scores = []
    for name in needed:
        value, reason = checked_value(result.get(name), (0.0, float(score_scale)))
        if reason is not None:
            return None, reason
        scores.append(value)
    value = scores[0] if weights is None else overall_score(*scores, weights=weights)
    return checked_value(value * float(scale))


class MIEScoreReward:
    """A loaded :class:`~modeling_miescore.hub.modeling_miescore.MIEScoreModel` as an
    :class:`~.groups.EditorReward`.

    Args:
        model: the scorer (``load_scorer(path, device=..., dtype=...)``).
        weights: ``None`` (``overall``) or exponents over VQ / IF / AP (see :func:`parse_score_weights`).
        scale: multiplies the 0-100 score (0.01 -> [0, 1]).
        batch_size: edits per forward pass (default: the largest group, so a group's suffixes run together).
        reuse_prefix: run each group's shared prefix once (off only to measure what it saves).
    """

    def __init__(self, model, weights=None, scale: float = 0.01, batch_size: Optional[int] = None,
                 reuse_prefix: bool = True, name: str = "miescore"):
        self.model = model
        self.score_names = list(getattr(model.config, "score_names", None) or SCORE_NAMES)
        self.weights = parse_score_weights(weights, self.score_names)
        self.scale = float(scale)
        self.batch_size = batch_size
        self.reuse_prefix = bool(reuse_prefix)
        self.name = name
        self.score_scale = float(getattr(model.config, "score_scale", 100.0))  # the MOS scale: 0-100
        self.reward_range = tuple(sorted((0.0, self.score_scale * self.scale)))

    def _score(self, samples: list, keys: list, batch_size: int) -> list:
        kwargs = {"reuse_prefix": True, "groups": keys} if self.reuse_prefix else {"reuse_prefix": False}
        return self.model.score_batch(samples, batch_size=batch_size, **kwargs)

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        groups = list(groups)
        if not groups:
            return []
        batch_size = self.batch_size or max(len(g.edits) for g in groups)
        samples, keys = flat_samples(groups)
        outcomes = score_isolating(lambda s, k: self._score(s, k, batch_size), samples, keys)
        return rewarded(groups, outcomes, self.score_names, lambda result: miescore_value(
            result, self.weights, self.scale, self.score_names, self.score_scale))

    def close(self) -> None:
        pass


def build_miescore_reward(argument: str, device=None, dtype=None, **options) -> MIEScoreReward:
    """``miescore:CKPT`` -> the checkpoint loaded with :func:`~modeling_miescore.scoring.loading.load_scorer`
    (``device`` / ``dtype`` default ``"auto"``)."""
    model = load_scorer(argument, device=device or "auto", dtype=dtype or "auto")
    return MIEScoreReward(model, name=f"miescore:{argument}", **options)


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
        self._groups_kwarg = takes_group_ids(scorer.evaluate_edits)

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
        scores = rewarded(groups, outcomes, SPATIALREWARD_COMPONENTS,
                          lambda result: spatialreward_value(result, self.aggregation, config))
        self._check_reachable([reason for group in scores for reason in group.failures])
        return scores

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
    scorer = SpatialRewardAPI(url, model=model, api_key_env=api_key_env, timeout=timeout, max_retries=max_retries,
                              max_concurrency=max_concurrency, config=config)
    return SpatialRewardReward(scorer, aggregation=aggregation, batch_size=batch_size,
                               name=redact(f"spatialreward-api:{argument}"))  # the name is shown: no password


# retried on the same replica: the server's queue full / draining (with Retry-After), and 500 / 502 that name no
# sample (a proxy or a crashed worker; a 500 naming a sample is the model failing on it and is not retried)
SERVED_RETRY_STATUSES = frozenset({429, 500, 502, 503})


def _readable(image):
    """The edit as an RGB image to send (tensors as they are), or None when it cannot be read."""
    if hasattr(image, "detach"):
        return image
    try:
        return load_image(image)
    except MIEScoreInputError:
        return None


class ServedReward:
    """``miescore serve`` replicas as an :class:`~.groups.EditorReward`.

    Args:
        base_urls: one URL, a comma-separated string or a list (``http://host:8000``).
        api_key_env: environment variable holding the servers' API key (``miescore serve --api-key-env``).
        weights: for a MIEScore server, exponents over VQ / IF / AP (default: ``overall``).
        scale: for a MIEScore server, multiplies the 0-100 score (default 0.01).
        aggregation: for a SpatialReward server, ``"weighted"`` / ``"min"`` / ``"arithmetic"`` recomputed from
            its sub-scores (default: the server's reward).
        timeout, max_retries, client options: for :class:`RewardClient` (``max_samples_per_request``,
            ``replica_cooldown_s``, ``balance_slack``, ...).
    """

    def __init__(self, base_urls, api_key_env: Optional[str] = None, weights=None, scale: float = 0.01,
                 aggregation=None, timeout: float = 300.0, max_retries: int = 3, name: Optional[str] = None,
                 **client_options):
        import os


        api_key = None
        if api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ValueError(f"api_key_env={api_key_env!r} is not set in the environment; export it or drop it")
        client_options.setdefault("retry_statuses", SERVED_RETRY_STATUSES)
        self.client = RewardClient(base_urls, api_key=api_key, timeout=timeout, max_retries=max_retries,
                                   api_key_env=api_key_env or "API key", **client_options)
        self.weights = parse_score_weights(weights)
        self.scale = float(scale)
        self.aggregation = parse_aggregation(aggregation)
        self.name = redact(name or "serve:" + ",".join(self.client.base_urls))  # shown in logs, errors, cards

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        groups = list(groups)
        flat: List[object] = []  # per edit: a result dict, a RewardServerError, or None for an unreadable image
        payload, keys, slots = [], [], []
        for group in groups:
            readable = [(len(flat) + e, image) for e, image in enumerate(map(_readable, group.edits))
                        if image is not None]
            flat += [None] * len(group.edits)
            if readable:
                payload.append({"sources": list(group.sources), "instruction": group.instruction,
                                "edited": [image for _, image in readable]})
                keys.append(group.key)
                slots.append([slot for slot, _ in readable])
        if payload:
            try:
                results = self.client.score_groups(payload, keys=keys, isolate_failures=True)
            except RewardServerError as error:
                raise RewardUnavailableError(self.name, str(error)) from error
            for group_slots, group_results in zip(slots, results):
                for slot, result in zip(group_slots, group_results):
                    flat[slot] = result
        return rewarded(groups, [(result, None) for result in flat], self._component_names, self._value)

    def _value(self, result):
        if result is None:
            return None, "unreadable_image"
        if isinstance(result, RewardServerError):
            return None, f"http_{result.status}" if result.kind != "ambiguous" else result.message
        if "reward" in result and "failed" in result:  # a SpatialReward server
            return spatialreward_value(result, self.aggregation)
        if "overall" in result:  # a MIEScore server: scores on the 0-100 scale, then scaled
            return miescore_value(result, self.weights, self.scale)
        raise RewardUnavailableError(self.name, f"the server's answer has neither 'overall' (MIEScore) nor 'reward' "
                                                f"(SpatialReward): keys {sorted(result)}; is it `miescore serve`?")

    @staticmethod
    def _component_names(kept: List[Optional[dict]]) -> Sequence[str]:
        present = [r for r in kept if r is not None]
        return () if not present else SCORE_NAMES if "overall" in present[0] else SPATIALREWARD_COMPONENTS

    def close(self) -> None:
        self.client.close()


def build_served_reward(argument: str, device=None, dtype=None, **options) -> ServedReward:
    """``serve:URL[,URL...]`` -> :class:`ServedReward` (``device`` / ``dtype`` are the servers' business)."""
    return ServedReward(argument, name=f"serve:{argument}", **options)


class WeightedSumReward:
    """``terms``: ``(weight, reward)`` pairs (weights finite, not all zero; negative ones penalise). Components: each
    term's reward as ``<term>`` and its own components as ``<term>/<name>`` (a reward in two terms is numbered
    ``<term>#1``, ``<term>#2``); a term that raises makes the sum raise."""

    def __init__(self, terms: Sequence[Tuple[float, object]], name: str | None = None):
        terms = [(float(w), reward) for w, reward in terms]
        if not terms:
            raise ValueError("a weighted sum of rewards needs at least one term")
        if any(not math.isfinite(w) for w, _ in terms) or all(w == 0 for w, _ in terms):
            raise ValueError(f"reward weights must be finite and not all zero, got {[w for w, _ in terms]}")
        self.terms = terms
        # component names: the terms' names, numbered where one reward appears twice (with other options)
        names = [reward.name for _, reward in terms]
        self.term_names = [name if names.count(name) == 1 else f"{name}#{names[:i + 1].count(name)}"
                           for i, name in enumerate(names)]
        self.name = name or " + ".join(f"{w:g}*{reward.name}" for w, reward in terms)
        ranges = [reward_range_of(reward) for _, reward in terms]  # the sum's range, when every term declares one
        self.reward_range = None if None in ranges else (
            sum(min(w * low, w * high) for (w, _), (low, high) in zip(terms, ranges)),
            sum(max(w * low, w * high) for (w, _), (low, high) in zip(terms, ranges)))

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        groups = list(groups)
        if len(self.terms) == 1:
            scored = [self.terms[0][1].score_groups(groups)]
        else:
            with ThreadPoolExecutor(len(self.terms), thread_name_prefix="reward-term") as pool:
                futures = [pool.submit(reward.score_groups, groups) for _, reward in self.terms]
                scored = [future.result() for future in futures]
        return [self._combine(g, group, [per_term[g] for per_term in scored]) for g, group in enumerate(groups)]

    def _combine(self, index: int, group: EditGroup, parts: List[GroupScores]) -> GroupScores:
        for name, part in zip(self.term_names, parts):
            if len(part.rewards) != len(group.edits):
                raise ValueError(f"reward {name!r} gave {len(part.rewards)} rewards for the "
                                 f"{len(group.edits)} edits of group {index}")
        rewards, failures = [], []
        for e in range(len(group.edits)):
            failed = [(name, part.failures[e]) for name, part in zip(self.term_names, parts)
                      if part.rewards[e] is None]
            if failed:
                rewards.append(None)
                failures.append("; ".join(f"{name}:{why}" for name, why in failed))
            else:
                rewards.append(sum(w * part.rewards[e] for (w, _), part in zip(self.terms, parts)))
                failures.append(None)
        components = {}
        for name, part in zip(self.term_names, parts):
            components[name] = list(part.rewards)
            for key, values in part.components.items():
                components[f"{name}/{key}"] = list(values)
        return GroupScores(rewards, failures, components)

    def close(self) -> None:
        for _, reward in self.terms:
            reward.close()
