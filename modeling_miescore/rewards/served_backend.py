"""A reward served by ``miescore serve`` on other machines (``--reward serve:URL[,URL...]``): MIEScore or
SpatialReward, one replica or several.

:class:`~modeling_miescore.serving.reward_client.RewardClient` sends each whole group to one replica (chosen by
the group's key with bounded load, so its shared prefix runs once there and the replicas share the work), the
replicas' requests concurrently. What comes back is read by what it holds: a MIEScore answer (``overall``) is
rewarded as in-process MIEScore (``overall / 100``, or ``weights`` over VQ / IF / AP), a SpatialReward answer
(``reward``, ``failed``) as in-process SpatialReward (``aggregation``).

Failures: an edit that cannot be read is a failed sample (``unreadable_image``) and is not sent; an edit the
server refuses or fails on after the retries (a 422 for an image it cannot use, a 500
naming the sample) is a failed sample (``http_422``, ``http_500``), the rest of its request is scored without it;
so is an answer without a finite reward (``nan``). 5xx answers that name no sample are retried (``max_retries``).
When every replica is unreachable, too slow (``timeout``) or overloaded after the retries, or the API key is
wrong, the reward raises :class:`~.groups.RewardUnavailableError` naming each replica's error.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..configuration_miescore import SCORE_NAMES
from ..serving.reward_client import RewardClient, RewardServerError, ScoringFailure
from .miescore_backend import miescore_value, parse_score_weights
from .groups import EditGroup, GroupScores, RewardUnavailableError, regroup, result_components
from .spatialreward_backend import SPATIALREWARD_COMPONENTS, parse_aggregation, spatialreward_value

__all__ = ["ServedReward", "SERVED_RETRY_STATUSES"]

# retried on the same replica: the server's queue full / draining (with Retry-After), and 500 / 502 that name no
# sample (a proxy or a crashed worker; a 500 naming a sample is the model failing on it and is not retried)
SERVED_RETRY_STATUSES = frozenset({429, 500, 502, 503})


def _readable(image):
    """The edit as an RGB image to send (tensors as they are), or None when it cannot be read."""
    from ..image_io import MIEScoreInputError, load_image

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

        from ..utils.credentials import redact

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
        flat: List[object] = []  # per edit: a result dict, a ScoringFailure, or None for an unreadable image
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
        rewards, failures, kept = [], [], []
        for result in flat:
            value, reason = self._value(result)
            rewards.append(value)
            failures.append(reason)
            kept.append(result if reason is None else None)
        return regroup(groups, rewards, failures, self._components(kept))

    def _value(self, result):
        if result is None:
            return None, "unreadable_image"
        if isinstance(result, ScoringFailure):
            return None, f"http_{result.status}" if result.kind != "ambiguous" else result.message
        if "reward" in result and "failed" in result:  # a SpatialReward server
            return spatialreward_value(result, self.aggregation)
        if "overall" in result:  # a MIEScore server: scores on the 0-100 scale, then scaled
            return miescore_value(result, self.weights, self.scale)
        raise RewardUnavailableError(self.name, f"the server's answer has neither 'overall' (MIEScore) nor 'reward' "
                                                f"(SpatialReward): keys {sorted(result)}; is it `miescore serve`?")

    @staticmethod
    def _components(kept: List[Optional[dict]]) -> dict:
        present = [r for r in kept if r is not None]
        if not present:
            return {}
        return result_components(kept, SCORE_NAMES if "overall" in present[0] else SPATIALREWARD_COMPONENTS)

    def close(self) -> None:
        self.client.close()


def build_served_reward(argument: str, device=None, dtype=None, **options) -> ServedReward:
    """``serve:URL[,URL...]`` -> :class:`ServedReward` (``device`` / ``dtype`` are the servers' business)."""
    return ServedReward(argument, name=f"serve:{argument}", **options)
