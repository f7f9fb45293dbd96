"""MIEScore as an editor-RL reward, in this process (``--reward miescore:CKPT``).

A group's G edits share sources and instruction, so they are scored in one ``score_batch`` call with the group's
key as their group id: the prompt prefix (rubric, sources, instruction) runs once and each edit runs only its own
suffix (``reuse_prefix=True``; exact to float rounding, ``docs/prefix_reuse.md``).

The reward is ``overall / 100`` by default: the MIEScore paper's eq. 2, ``VQ^0.3 * IF^0.4 * AP^0.3`` on the
0-100 scale, mapped to [0, 1]. ``weights`` replaces the three exponents (for example ``if=1`` rewards
instruction following alone); they are divided by their sum, so the reward stays in [0, 1]. The three dimension
scores (0-100) are logged as components.
"""

from __future__ import annotations

import math
import re
from typing import List, Optional, Sequence, Tuple

from ..configuration_miescore import SCORE_NAMES
from ..miescore_overall import overall_score
from .groups import (EditGroup, GroupScores, checked_value, flat_samples, regroup, result_components,
                           score_isolating)

__all__ = ["MIEScoreReward", "parse_score_weights", "miescore_value"]

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
    """A loaded :class:`~modeling_miescore.modeling_miescore.MIEScoreModel` as an
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
        rewards, failures = [], []
        for result, reason in outcomes:
            value = None
            if result is not None:
                value, reason = miescore_value(result, self.weights, self.scale, self.score_names, self.score_scale)
            rewards.append(value)
            failures.append(reason)
        components = result_components([r if f is None else None for (r, _), f in zip(outcomes, failures)],
                                       self.score_names)
        return regroup(groups, rewards, failures, components)

    def close(self) -> None:
        pass


def build_miescore_reward(argument: str, device=None, dtype=None, **options) -> MIEScoreReward:
    """``miescore:CKPT`` -> the checkpoint loaded with :func:`~modeling_miescore.scoring.loading.load_scorer`
    (``device`` / ``dtype`` default ``"auto"``)."""
    from ..scoring.loading import load_scorer

    model = load_scorer(argument, device=device or "auto", dtype=dtype or "auto")
    return MIEScoreReward(model, name=f"miescore:{argument}", **options)
