"""Which requests each process turns into edits at each step, and the seeds of those rollouts: functions of
(seed, step, process) only, so a resumed run draws exactly what the uninterrupted one would have.

The rows are visited in a seeded permutation per epoch; step ``k`` takes the next ``groups_per_step`` of that
endless sequence. The step's edits are laid out group after group, G slots each (``groups_per_step * G`` =
``images_per_batch x rollout batches x processes``); process ``r`` takes the ``r``-th contiguous share of the
slots and samples it in rollout batches of ``images_per_batch`` consecutive slots. Within a batch, the slots of
one group form a :class:`Piece`, sampled by one pipeline call. When ``images_per_batch`` is a multiple of G every
piece is a whole group on one process (each process's share is whole groups); otherwise groups are split across
processes or batches, as OmniGen2-RL spreads its groups of 12 over GPUs at 18 images each (its
``RepeatedDistributedBatchSampler``), and the rewards are normalised per group key after gathering, so the pieces
of a group are one group again.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import List

__all__ = ["GroupSchedule", "Piece", "derived_seed"]


def derived_seed(*parts) -> int:
    """A 63-bit seed from ``parts`` (stable across Python processes and versions)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class Piece:
    """``size`` consecutive members of the step's ``group``-th group, starting at member ``first`` (whole when
    ``first == 0`` and ``size`` is the group size)."""

    group: int
    first: int
    size: int


class GroupSchedule:
    """``batches(step, rank)``: the pieces process ``rank`` samples at ``step`` (1-based), one list per rollout
    batch; ``row_of(step, group)``: the request row of the step's ``group``-th group; ``group_index(step, group)``:
    its run-wide index (the seeds' key)."""

    def __init__(self, num_rows: int, images_per_batch: int, batches_per_step: int, group_size: int,
                 num_processes: int, seed: int):
        total = images_per_batch * batches_per_step * num_processes
        if total % group_size:
            raise ValueError(f"{total} images per step are not whole groups of {group_size}")
        self.num_rows, self.per_batch, self.batches_per_step = num_rows, images_per_batch, batches_per_step
        self.group_size, self.processes, self.seed = group_size, num_processes, seed
        self.groups_per_step = total // group_size
        self._epochs: dict = {}

    def _epoch(self, epoch: int) -> List[int]:
        if epoch not in self._epochs:
            order = list(range(self.num_rows))
            random.Random(derived_seed(self.seed, "epoch", epoch)).shuffle(order)
            self._epochs = {epoch: order, **{e: o for e, o in self._epochs.items() if e == epoch - 1}}
        return self._epochs[epoch]

    def group_index(self, step: int, group: int) -> int:
        return (step - 1) * self.groups_per_step + group

    def row_of(self, step: int, group: int) -> int:
        position = self.group_index(step, group)
        return self._epoch(position // self.num_rows)[position % self.num_rows]

    def batches(self, step: int, rank: int) -> List[List[Piece]]:
        out = []
        for batch in range(self.batches_per_step):
            start = (rank * self.batches_per_step + batch) * self.per_batch
            pieces, slot, end = [], start, start + self.per_batch
            while slot < end:
                group, first = divmod(slot, self.group_size)
                size = min(self.group_size - first, end - slot)
                pieces.append(Piece(group, first, size))
                slot += size
            out.append(pieces)
        return out
