"""Which requests each process turns into groups at each step, and the seeds of those rollouts: functions of
(seed, step, process) only, so a resumed run draws exactly what the uninterrupted one would have.

The rows are visited in a seeded permutation per epoch; step ``k`` takes the next ``groups_per_step`` of that
endless sequence, process ``r`` the ``r``-th contiguous share (a group never spans processes).
"""

from __future__ import annotations

import hashlib
import random
from typing import List

__all__ = ["GroupSchedule", "derived_seed"]


def derived_seed(*parts) -> int:
    """A 63-bit seed from ``parts`` (stable across Python processes and versions)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class GroupSchedule:
    """``rows_for(step, rank)``: the row indices process ``rank`` samples at ``step`` (1-based steps)."""

    def __init__(self, num_rows: int, groups_per_process: int, num_processes: int, seed: int):
        self.num_rows, self.per_process, self.processes, self.seed = num_rows, groups_per_process, num_processes, seed
        self._epochs: dict = {}

    def _epoch(self, epoch: int) -> List[int]:
        if epoch not in self._epochs:
            order = list(range(self.num_rows))
            random.Random(derived_seed(self.seed, "epoch", epoch)).shuffle(order)
            self._epochs = {epoch: order, **{e: o for e, o in self._epochs.items() if e == epoch - 1}}
        return self._epochs[epoch]

    def global_index(self, step: int, rank: int, local: int) -> int:
        return ((step - 1) * self.processes + rank) * self.per_process + local

    def rows_for(self, step: int, rank: int) -> List[int]:
        out = []
        for local in range(self.per_process):
            position = self.global_index(step, rank, local)
            out.append(self._epoch(position // self.num_rows)[position % self.num_rows])
        return out
