"""``--reward`` specs -> :class:`~.reward_types.EditorReward` objects, one registry of reward kinds.

A spec is ``KIND:ARGUMENT`` (``module:function`` with no known kind prefix is a Python callable). Kinds are
declared once in :data:`REWARD_KINDS`, each with the builder that turns the argument into a reward.

- ``module:function`` (or ``callable:module:function``): ``fn(images, instructions, sources) -> list[float]``,
  one float per edited image; non-finite values and non-numbers are failed samples, a wrong length an error.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

from .reward_types import EditGroup, GroupScores, checked_rewards

__all__ = ["REWARD_KINDS", "RewardKind", "build_reward", "CallableReward", "import_callable"]


def import_callable(spec: str) -> Callable:
    """``"package.module:function"`` -> the function (a clear ``ValueError`` when it is not importable)."""
    module_name, _, attribute = spec.rpartition(":")
    if not module_name or not attribute:
        raise ValueError(f"reward callable {spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"reward callable {spec!r}: cannot import module {module_name!r} ({error})") from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise ValueError(f"reward callable {spec!r}: module {module_name!r} has no callable {attribute!r}")
    return fn


class CallableReward:
    """A plain ``fn(images, instructions, sources) -> list[float]`` as an :class:`EditorReward` (one call per
    batch of groups, the groups' edits flattened in order)."""

    def __init__(self, fn: Callable, name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        images, instructions, sources = [], [], []
        for group in groups:
            images += list(group.edits)
            instructions += [group.instruction] * len(group.edits)
            sources += [list(group.sources)] * len(group.edits)
        flat = checked_rewards(self.fn(images, instructions, sources), len(images), f"reward {self.name!r}")
        out, start = [], 0
        for group in groups:
            stop = start + len(group.edits)
            out.append(GroupScores(flat.rewards[start:stop], flat.failures[start:stop]))
            start = stop
        return out

    def close(self) -> None:
        close = getattr(self.fn, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True)
class RewardKind:
    """One kind of reward: ``build(argument, **options)`` makes it; ``help`` is what ``--reward`` docs say."""

    build: Callable
    help: str


REWARD_KINDS: Dict[str, RewardKind] = {
    "callable": RewardKind(lambda argument, **_: CallableReward(import_callable(argument), name=argument),
                           "module:function -> fn(images, instructions, sources) -> list[float]"),
}


def build_reward(spec: str, **options):
    """The reward a ``--reward`` spec names (see the module docstring)."""
    kind, sep, argument = spec.partition(":")
    if sep and kind in REWARD_KINDS:
        return REWARD_KINDS[kind].build(argument, **options)
    if sep and argument:
        return REWARD_KINDS["callable"].build(spec, **options)
    raise ValueError(f"unknown reward {spec!r}; use one of {', '.join(k + ':...' for k in REWARD_KINDS)} "
                     "or package.module:function")
