"""Rewards computed in the background: batch k is scored while batch k+1 is sampled.

:class:`RewardWorker` runs an :class:`~.reward_types.EditorReward` on one worker thread (a reward model on
another device, an HTTP reward server, a callable); :meth:`submit` returns a ``Future`` of the groups' scores.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import List, Sequence

from .reward_types import EditGroup, EditorReward, GroupScores

__all__ = ["RewardWorker"]


class RewardWorker:
    """``submit(groups) -> Future[list[GroupScores]]`` on one background thread (calls run in submission order).
    Use as a context manager, or call :meth:`close` (waits for pending calls, then closes the reward)."""

    def __init__(self, reward: EditorReward):
        self.reward = reward
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="editor-reward")

    def submit(self, groups: Sequence[EditGroup]) -> "Future[List[GroupScores]]":
        return self._pool.submit(self.reward.score_groups, list(groups))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.reward.close()

    def __enter__(self) -> "RewardWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
