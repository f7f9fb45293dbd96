"""A weighted sum of rewards (``--reward "0.7*miescore:CKPT + 0.3*pkg.mod:fn"``, or a list of terms).

``R = sum_k w_k * R_k`` per edit, each term scoring the same groups (the terms run concurrently, one thread
each, so an HTTP reward and an in-process one overlap). An edit is a failed sample when any term failed on it
(reason ``"<term>:<its reason>"``): a sum with a missing term is not the reward the user asked for. Each
term's reward is logged as the component ``<term>`` and its own components as ``<term>/<name>``. A reward that appears in
two terms (with other options) is numbered ``<term>#1``, ``<term>#2``. A term that
raises (for example :class:`~.groups.RewardUnavailableError`) makes the whole sum raise.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import List, Sequence, Tuple

from .groups import EditGroup, GroupScores, reward_range_of

__all__ = ["WeightedSumReward"]


class WeightedSumReward:
    """``terms``: ``(weight, reward)`` pairs (weights finite, not all zero; negative ones penalise)."""

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
