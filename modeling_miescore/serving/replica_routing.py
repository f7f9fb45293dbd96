"""Which ``miescore serve`` replica scores which group of edits, and which replicas are down.

A group (the G edits of one sources + instruction) always goes to one replica as a whole, so the replica runs the
group's shared prompt prefix once (``score_batch(reuse_prefix=True)``). The replica is chosen by rendezvous
(highest-random-weight) hashing of the group's key: the same key prefers the same replica on every call, and a
replica that goes down moves only its own groups. Plain hashing can load one replica with far more groups than
another in a batch of a few dozen groups, so each call caps every replica at ``(1 + slack)`` times its even share
of the edits and a group whose preferred replica is full goes to its next preference (consistent hashing with
bounded loads, Mirrokni, Thorup and Zadimoghaddam, SODA 2018). The released reward proxies also send each
group to one worker, keyed by the instruction string and round-robin (EditScore
``examples/OmniGen2-RL/reward_server/reward_proxy.py``, SpatialReward ``example/reward/server/reward_proxy.py``).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from typing import Dict, List, Optional, Sequence, Set

__all__ = ["preference_order", "assign_groups", "ReplicaHealth"]


def _weight(key: str, url: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{url}\x1f{key}".encode("utf-8", "surrogatepass")).digest()[:8], "big")


def preference_order(key: str, urls: Sequence[str]) -> List[int]:
    """Replica indices from most to least preferred for ``key`` (depends only on the key and the URLs)."""
    return sorted(range(len(urls)), key=lambda i: (-_weight(key, urls[i]), i))


def assign_groups(keys: Sequence[str], sizes: Sequence[int], candidates: Sequence[Sequence[int]],
                  urls: Sequence[str], slack: float = 0.1) -> List[int]:
    """One replica index per group.

    Args:
        keys: a stable key per group (the editor-RL group key, or a content hash of sources + instruction).
        sizes: edits per group (the load a group puts on its replica).
        candidates: per group, the replicas it may go to (the live ones it has not failed on yet); non-empty.
        urls: every replica's URL (the hashing is over URLs, so indices may change, preferences do not).
        slack: each replica takes at most ``ceil((1 + slack) * total / replicas)`` edits (never less than the
            largest group), largest groups placed first; a group that fits nowhere goes to its least-loaded
            candidate.
    """
    if slack < 0:
        raise ValueError(f"slack must be >= 0, got {slack}")
    replicas = sorted({r for allowed in candidates for r in allowed})
    if not replicas:
        return []
    total = sum(int(s) for s in sizes)
    capacity = max(math.ceil((1.0 + slack) * total / len(replicas)), max(int(s) for s in sizes))
    load: Dict[int, int] = {r: 0 for r in replicas}
    chosen: List[Optional[int]] = [None] * len(keys)
    for g in sorted(range(len(keys)), key=lambda g: (-int(sizes[g]), g)):
        allowed = set(candidates[g])
        ranked = [r for r in preference_order(keys[g], urls) if r in allowed]
        fitting = [r for r in ranked if load[r] + int(sizes[g]) <= capacity]
        pick = fitting[0] if fitting else min(ranked, key=lambda r: (load[r], ranked.index(r)))
        chosen[g] = pick
        load[pick] += int(sizes[g])
    return [int(c) for c in chosen]


class ReplicaHealth:
    """Which replicas answered last time. A replica that failed (unreachable, timed out, overloaded after the
    retries) is skipped for ``cooldown_s`` seconds; when every replica a group may still try is cooling down,
    they are tried anyway (each call has its own retries, and a blip must not stop a run for ``cooldown_s``).
    Thread-safe."""

    def __init__(self, urls: Sequence[str], cooldown_s: float = 30.0):
        self.urls = list(urls)
        self.cooldown_s = float(cooldown_s)
        self._down_until = [0.0] * len(self.urls)
        self._last_error: List[Optional[str]] = [None] * len(self.urls)
        self._lock = threading.Lock()

    def candidates(self, exclude: Set[int]) -> List[int]:
        """The replicas not in ``exclude``: the live ones, or every one when none is live."""
        now = time.monotonic()
        with self._lock:
            allowed = [i for i in range(len(self.urls)) if i not in exclude]
            live = [i for i in allowed if self._down_until[i] <= now]
        return live or allowed

    def mark_down(self, index: int, reason: str) -> None:
        with self._lock:
            self._down_until[index] = time.monotonic() + self.cooldown_s
            self._last_error[index] = reason

    def mark_up(self, index: int) -> None:
        with self._lock:
            self._down_until[index] = 0.0
            self._last_error[index] = None

    def describe(self) -> Dict[str, str]:
        """``{url: "up" | "down: <last error>"}``."""
        now = time.monotonic()
        with self._lock:
            return {url: ("up" if self._down_until[i] <= now else f"down: {self._last_error[i]}")
                    for i, url in enumerate(self.urls)}
