"""The contract between the editor-RL trainer and its rewards.

A GRPO *group* is G edited images of one (sources, instruction). Rewards are asked for whole groups, so a scorer
can run the group's shared prompt prefix once (MIEScore ``score_batch(reuse_prefix=True)``, the server's
``/v1/score_groups``) and a router can send a whole group to one replica. A sample whose reward failed
(unreadable output, unparsable judge answer, HTTP error after retries, NaN) is ``None`` with a reason: the
trainer excludes it from its group's statistics and counts it; it is never replaced by a number. A reward
that cannot score at all after its retries (every replica down, an endpoint that does not answer in time)
raises :class:`RewardUnavailableError`, which the trainer catches to stop cleanly. The helpers at the end are for
reward implementations.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

from ..utils.numbers import real_finite
from ..hub.errors import MIEScoreInputError
from ..hub.image_io import ImageLoadError
from ..utils.credentials import redact

__all__ = ["EditGroup", "GroupScores", "EditorReward", "RewardUnavailableError", "group_key", "checked_rewards",
           "checked_scores", "checked_value", "flat_samples", "regroup", "reward_range_of", "rewarded",
           "score_isolating", "result_components"]


class RewardUnavailableError(RuntimeError):
    """A reward cannot score at all after its retries: every ``miescore serve`` replica down or too slow, an
    OpenAI-compatible endpoint that does not answer, a wrong API key. ``reward`` names the reward; the message
    says what failed and how to fix it (``detail``: the message without the reward's name). The trainer stops on it
    instead of training on missing rewards."""

    def __init__(self, reward: str, message: str):
        reward, message = redact(reward), redact(message)  # a URL's password or ?api_key= is never shown
        super().__init__(f"reward {reward!r} is unavailable: {message}")
        self.reward = reward
        self.detail = message


def group_key(source_ids: Sequence[str], instruction: str) -> str:
    """The key GRPO advantages are normalised under: the source image ids *and* the instruction (two source sets
    that share an instruction are two groups; the anchors key by the instruction string alone)."""
    text = "\x1f".join([*map(str, source_ids), "\x1e", instruction])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class EditGroup:
    """One group to reward.

    Attributes:
        key: :func:`group_key` of ``source_ids`` and ``instruction``.
        sources: the group's source images (PIL, RGB), in the order the instruction refers to them.
        instruction: the editing instruction.
        edits: the G edited images (PIL, RGB) produced by the policy.
        source_ids: stable ids of the sources (dataset ids or file hashes), for routing and logging.
    """

    key: str
    sources: tuple
    instruction: str
    edits: tuple
    source_ids: tuple = ()


@dataclass
class GroupScores:
    """Rewards of one group, aligned with ``group.edits``.

    Attributes:
        rewards: one float per edit (higher is better; the reward's own scale), or ``None`` where it failed.
        failures: ``None`` for a valid sample, else a short reason (``"http_error"``, ``"unparsable"``,
            ``"nan"``, ``"unreadable_image"``, ...).
        components: optional named parts per edit for logging (``"visual_quality"``, ``"sc"``, ``"pq"`` ...).
    """

    rewards: List[Optional[float]]
    failures: List[Optional[str]]
    components: Dict[str, List[Optional[float]]] = field(default_factory=dict)

    def __post_init__(self):
        if len(self.rewards) != len(self.failures):
            raise ValueError(f"GroupScores: {len(self.rewards)} rewards but {len(self.failures)} failure slots")
        for i, (value, reason) in enumerate(zip(self.rewards, self.failures)):
            if (value is None) == (reason is None):
                raise ValueError(f"GroupScores: sample {i} needs exactly one of a reward and a failure reason")

    @property
    def n_failed(self) -> int:
        return sum(r is None for r in self.rewards)


@runtime_checkable
class EditorReward(Protocol):
    """What the trainer calls. ``name`` appears in logs and the adapter's model card."""

    name: str

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        """One :class:`GroupScores` per group, in order. Raises only for whole-call faults (a reward that is down
        after its retries); per-sample problems are failures inside the result."""
        ...

    def close(self) -> None:
        ...


def checked_value(value, value_range: Optional[Tuple[float, float]] = None) -> Tuple[Optional[float], Optional[str]]:
    """``(reward, None)`` when ``value`` is a finite real number (not a bool, not a string such as ``"55"``) inside
    ``value_range`` (inclusive; None: any finite number), else ``(None, reason)``: ``"not_a_number"``, ``"nan"``
    (NaN or infinite, or an int too large for a float) or ``"out_of_range"``. The one test every reward's values
    pass before they become a training signal."""
    number = real_finite(value)
    if number is None:
        return None, "nan" if _is_number(value) else "not_a_number"
    if value_range is not None and not value_range[0] <= number <= value_range[1]:
        return None, "out_of_range"
    return number, None


def _is_number(value) -> bool:
    """A real number (possibly NaN, infinite or too large for a float), not a bool; 0-d arrays / tensors too."""
    import numbers

    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        value = value.item()
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def checked_rewards(values, n: int, where: str, value_range: Optional[Tuple[float, float]] = None) -> GroupScores:
    """Turn ``n`` raw values from a reward into :class:`GroupScores`, each through :func:`checked_value` (a value
    that is not a finite real number inside ``value_range`` is a failure). A wrong length is a caller bug and
    raises ``ValueError`` naming ``where``."""
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{where} returned {len(values)} rewards for {n} edits; it must return one per edit")
    checked = [checked_value(value, value_range) for value in values]
    return GroupScores([r for r, _ in checked], [f for _, f in checked])


def reward_range_of(reward) -> Optional[Tuple[float, float]]:
    """The ``reward_range`` a reward declares (``(low, high)``, inclusive), or None; a malformed declaration is a
    ``ValueError`` naming the reward."""
    declared = getattr(reward, "reward_range", None)
    if declared is None:
        return None
    try:
        low, high = (real_finite(v) for v in declared)
    except (TypeError, ValueError):
        low = high = None
    if low is None or high is None or low > high:
        raise ValueError(f"reward {getattr(reward, 'name', reward)!r} declares reward_range {declared!r}; it must "
                         "be two finite numbers (low, high) with low <= high")
    return low, high


def checked_scores(scores: "GroupScores", value_range: Optional[Tuple[float, float]]) -> "GroupScores":
    """``scores`` with every reward that fails :func:`checked_value` turned into a failure (the trainer's guard
    over any :class:`EditorReward`, whatever it returned)."""
    rewards, failures = [], []
    for value, reason in zip(scores.rewards, scores.failures):
        if value is None:
            rewards.append(None)
            failures.append(reason or "failed")
            continue
        number, problem = checked_value(value, value_range)
        rewards.append(number)
        failures.append(problem)
    return GroupScores(rewards, failures, scores.components)


# ------------------------------------------------------------------------------------ for reward implementations


def flat_samples(groups: Sequence[EditGroup]) -> Tuple[List[dict], List[str]]:
    """The groups' edits as ``{"sources", "edited", "instruction"}`` samples, group after group, and each
    sample's group key (what ``score_batch(groups=...)`` takes to run a group's shared prefix once)."""
    samples, keys = [], []
    for group in groups:
        for edit in group.edits:
            samples.append({"sources": list(group.sources), "edited": edit, "instruction": group.instruction})
            keys.append(group.key)
    return samples, keys


def result_components(results: Sequence[Optional[dict]], names: Sequence[str]) -> Dict[str, List[Optional[float]]]:
    """``{name: [each result's finite value of name, or None]}`` (None too where a result is None: a failed sample),
    the components a reward logs from its scorer's result dicts."""
    return {name: [None if r is None else real_finite(r.get(name)) for r in results] for name in names}


def regroup(groups: Sequence[EditGroup], rewards: Sequence[Optional[float]], failures: Sequence[Optional[str]],
            components: Optional[Dict[str, Sequence[Optional[float]]]] = None) -> List[GroupScores]:
    """Per-edit outcomes of all groups (in :func:`flat_samples` order) -> one :class:`GroupScores` per group."""
    components = components or {}
    out, start = [], 0
    for group in groups:
        stop = start + len(group.edits)
        out.append(GroupScores(list(rewards[start:stop]), list(failures[start:stop]),
                               {name: list(values[start:stop]) for name, values in components.items()}))
        start = stop
    if start != len(rewards):
        raise ValueError(f"regroup: {len(rewards)} outcomes for {start} edits")
    return out


def rewarded(groups: Sequence[EditGroup], outcomes: Sequence[Tuple[Any, Optional[str]]], names,
             value_of: Callable[[Any], Tuple[Optional[float], Optional[str]]]) -> List[GroupScores]:
    """Per-edit ``(result, failure reason)`` (in :func:`flat_samples` order) -> one :class:`GroupScores` per group:
    a result's reward is ``value_of(result)`` (``(reward, None)`` or ``(None, reason)``); the components are
    ``names`` (or ``names(kept results)``) of the results that gave a reward (:func:`result_components`)."""
    rewards, failures, kept = [], [], []
    for result, reason in outcomes:
        value, reason = value_of(result) if reason is None else (None, reason)
        rewards.append(value)
        failures.append(reason)
        kept.append(result if reason is None else None)
    return regroup(groups, rewards, failures, result_components(kept, names(kept) if callable(names) else names))


def score_isolating(score: Callable[[List[Any], List[Any]], List[Any]], samples: List[Any],
                    keys: List[Any]) -> List[Tuple[Any, Optional[str]]]:
    """``score(samples, keys)`` -> ``[(result, None)]``; when it raises ``MIEScoreInputError`` (an image that
    cannot be read, an empty instruction), each sample is scored alone and the unusable ones come back as
    ``(None, "unreadable_image" | "invalid_input")``."""
    def reason(error: Exception) -> str:
        return "unreadable_image" if isinstance(error, ImageLoadError) else "invalid_input"

    try:
        return [(result, None) for result in score(samples, keys)]
    except MIEScoreInputError as error:
        if len(samples) == 1:
            return [(None, reason(error))]
    outcomes: List[Tuple[Any, Optional[str]]] = []
    for sample, key in zip(samples, keys):
        try:
            outcomes.append((score([sample], [key])[0], None))
        except MIEScoreInputError as error:
            outcomes.append((None, reason(error)))
    return outcomes
