"""GRPO advantages of one RL step: rewards normalised within each group, clipped.

``A_i = (r_i - mean_group) / (std + eps)``, clipped to ``[-clip, clip]`` (SpatialReward B.2.1: advantage clip 5).

- Groups are keyed by :func:`~modeling_miescore.rewards.groups.group_key` (source ids + instruction); rollouts of the same key in one
  step (on any rank) share their statistics.
- ``std_level="group"``: the group's population std (OmniGen2-RL ``process_grpo_rewards``, its default);
  ``"batch"``: the population std of every valid reward of the step (flow_grpo ``global_std``; OmniGen2-RL
  ``std_level: batch``). ``eps = 1e-8`` as OmniGen2-RL (flow_grpo uses 1e-4).
- A failed sample (``None`` reward) is excluded from its group's statistics and gets no advantage; a group with
  fewer than 2 valid samples is skipped (no advantage for any of its samples).
- A group whose valid rewards are all equal ("zero std") has advantage 0 everywhere: counted, and with
  ``drop_zero_std`` its samples get no advantage either (flow_grpo drops zero-advantage samples; they would
  contribute only the KL term).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["STD_LEVELS", "StepAdvantages", "group_advantages"]

STD_LEVELS = ("group", "batch")


_LARGE = 1e150  # above this magnitude sums and squares can overflow: the statistics are taken on scaled values


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """Population mean and std, without overflow for finite values of any size (up to ~1.8e308)."""
    scale = max(map(abs, values))
    if scale <= _LARGE or not math.isfinite(scale):
        mean = sum(values) / len(values)
        return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    mean, std = _mean_std([v / scale for v in values])
    return mean * scale, std * scale


def _normalised(reward: float, mean: float, std: float, eps: float) -> float:
    """``(reward - mean) / (std + eps)``; for huge rewards the difference is taken on halves (it would overflow:
    1.7e308 - (-1.7e308)), which changes nothing else (a ratio of halves is the same ratio)."""
    if abs(reward) <= _LARGE and abs(mean) <= _LARGE:
        return (reward - mean) / (std + eps)
    return (reward / 2 - mean / 2) / (std / 2 + eps / 2)


@dataclass
class StepAdvantages:
    """Advantages of a step's rollouts, aligned with the input: ``advantages[j][i]`` for rollout ``j``'s sample
    ``i``, ``None`` where the sample takes no part in the policy loss (failed, skipped or dropped group)."""

    advantages: List[List[Optional[float]]]
    failures: int = 0
    zero_std_groups: int = 0
    skipped_groups: int = 0
    reward_mean: float = float("nan")
    reward_std: float = float("nan")
    group_stats: Dict[str, Tuple[float, float, int]] = field(default_factory=dict)


def group_advantages(groups: Sequence[Tuple[str, Sequence[Optional[float]]]], *, std_level: str = "group",
                     clip: float = 5.0, eps: float = 1e-8, drop_zero_std: bool = False) -> StepAdvantages:
    """Advantages for ``groups``: ``(key, rewards)`` per rollout, rewards ``None`` where the sample failed.

    Counts are per distinct key: ``zero_std_groups`` (all valid rewards equal), ``skipped_groups`` (< 2 valid);
    ``failures`` counts failed samples; ``reward_mean`` / ``reward_std`` are over every valid reward."""
    if std_level not in STD_LEVELS:
        raise ValueError(f"std_level must be one of {STD_LEVELS}, got {std_level!r}")
    if not math.isfinite(clip) or clip <= 0:
        raise ValueError(f"the advantage clip must be a finite number > 0, got {clip}")
    by_key: Dict[str, List[float]] = {}
    failures = 0
    for key, rewards in groups:
        valid = [float(r) for r in rewards if r is not None]
        failures += len(rewards) - len(valid)
        by_key.setdefault(key, []).extend(valid)
    every = [r for values in by_key.values() for r in values]
    result = StepAdvantages([], failures=failures)
    if every:
        result.reward_mean, result.reward_std = _mean_std(every)
    batch_std = result.reward_std if every else 0.0
    for key, values in by_key.items():
        if len(values) < 2:
            result.skipped_groups += 1
            continue
        mean, std = _mean_std(values)
        result.group_stats[key] = (mean, std, len(values))
        if std < 1e-12:
            result.zero_std_groups += 1
    for key, rewards in groups:
        stats = result.group_stats.get(key)
        zero = stats is not None and stats[1] < 1e-12
        if stats is None or (zero and drop_zero_std):
            result.advantages.append([None] * len(rewards))
            continue
        std = stats[1] if std_level == "group" else batch_std
        result.advantages.append([None if r is None else max(-clip, min(clip, _normalised(float(r), stats[0], std,
                                                                                            eps)))
                                  for r in rewards])
    return result
