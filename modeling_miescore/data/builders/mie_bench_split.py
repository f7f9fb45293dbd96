"""MIE-Bench train / validation / test splits: by instance, 3:1:1 within each task, a hash, or a split file.

The MIEScore paper ("Implementation Details") splits MIE-Bench 3:1:1. All edits of an instance are in one split.

* ``"stratified"`` (default): 3:1:1 within each task and as a whole as closely as integers allow. A task of ``n``
  instances gets the whole part of ``n * (3/5, 1/5, 1/5)``; its at most two leftovers go to splits whose share has
  a fractional part, chosen across tasks so that the whole build gets the largest-remainder rounding of
  ``N * (3/5, 1/5, 1/5)`` (:func:`stratified_counts`; 8 tasks of one instance give 5 / 2 / 1, not 8 / 0 / 0).
  Within a task instances are ordered by ``sha256(salt + ":" + instance_id)``: train, then validation, then test.
  Deterministic and independent of the raw files' order; adding instances may move existing ones.
* ``"hash"``: a hash bucket of the id alone (:func:`split_of`): 3:1:1 only on average, but additions never move
  an instance.
* a split file (``split_file``): CSV ``instance_id,split`` or JSON ``{"<instance_id>": "<split>"}``; every instance
  listed once, every listed id an instance; problems reported with file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence

from ..schema import MIE_SPLITS, TASKS
from .raw_files import TOO_DEEP, ProblemCollector, json_object_entries, read_csv, read_text

__all__ = [
    "DEFAULT_SPLIT_SALT",
    "SPLIT_METHODS",
    "SMALL_SPLIT_INSTANCES",
    "SPLIT_RATIO",
    "hash_bucket",
    "small_split_warnings",
    "read_split_file",
    "split_of",
    "stratified_counts",
    "stratified_splits",
]

SPLIT_RATIO = (3, 1, 1)  # paper, "Implementation Details": train / validation / test = 3:1:1
# Below this many instances an evaluation split gets a warning: with 12 edits per instance, correlations over
# fewer than 10 instances (120 edits) and bootstrap CIs over them (a handful of distinct resamples) mislead.
SMALL_SPLIT_INSTANCES = 10
SPLIT_METHODS = ("stratified", "hash")
DEFAULT_SPLIT_SALT = "mie-bench-v1"


def hash_bucket(key: str, salt: str) -> float:
    """A stable uniform number in [0, 1) from ``sha256(salt + ":" + key)``.

    Depends on nothing but the key and the salt, so a rebuild gives the same value and adding keys
    never moves the old ones.
    """
    digest = hashlib.sha256(f"{salt}:{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_of(instance_id: str, salt: str = DEFAULT_SPLIT_SALT) -> str:
    """The ``"hash"`` split of an instance: a hash bucket of its id alone (< 0.6 train, < 0.8 validation, else
    test), so rebuilds and additions never move an instance."""
    u = hash_bucket(instance_id, salt)
    total = sum(SPLIT_RATIO)
    if u < SPLIT_RATIO[0] / total:
        return "train"
    if u < (SPLIT_RATIO[0] + SPLIT_RATIO[1]) / total:
        return "validation"
    return "test"


def _largest_remainder(n: int, ratio: Sequence[int]) -> list[int]:
    """``n`` split by ``ratio``: whole parts, then one more for the largest fractional parts (ties: first)."""
    total = sum(ratio)
    counts = [n * w // total for w in ratio]
    for s in sorted(range(len(ratio)), key=lambda s: (-(n * ratio[s] % total), s))[: n - sum(counts)]:
        counts[s] += 1
    return counts


def stratified_counts(sizes: Sequence[int], ratio: Sequence[int] = SPLIT_RATIO) -> list[tuple[int, ...]]:
    """Instances per split for groups (tasks) of ``sizes`` (see the module docstring): each group within one of
    its shares ``n * ratio / sum(ratio)``, the totals the largest-remainder rounding of the whole.

    Integer arithmetic throughout (shares kept as multiples of ``1 / sum(ratio)``). The leftovers are placed as
    a transport problem: group ``g`` has ``n_g - sum(floors)`` instances to place, split ``s`` needs
    ``total_s - sum(floors)``, a (group, split) cell may take one if its share has a fractional part. Cells are
    filled by decreasing fractional part, then augmenting paths move earlier choices until every leftover is
    placed (a rounding with these margins always exists: controlled rounding of a two-way table).
    """
    total_weight = sum(ratio)
    splits = range(len(ratio))
    counts = [[n * w // total_weight for w in ratio] for n in sizes]
    fraction = [[n * w % total_weight for w in ratio] for n in sizes]
    supply = [n - sum(c) for n, c in zip(sizes, counts)]
    demand = [t - sum(c[s] for c in counts) for s, t in zip(splits, _largest_remainder(sum(sizes), ratio))]
    taken = [[False] * len(ratio) for _ in sizes]
    cells = sorted(((g, s) for g in range(len(sizes)) for s in splits if fraction[g][s]),
                   key=lambda cell: (-fraction[cell[0]][cell[1]], cell[1], cell[0]))
    for g, s in cells:
        if supply[g] and demand[s]:
            taken[g][s], supply[g], demand[s] = True, supply[g] - 1, demand[s] - 1

    def augment(g: int, seen: set) -> bool:
        """Place one leftover of group ``g``, moving other groups' leftovers along a path if need be."""
        for s in splits:
            if not fraction[g][s] or taken[g][s] or s in seen:
                continue
            seen.add(s)
            if demand[s]:
                taken[g][s], demand[s] = True, demand[s] - 1
                return True
            for other in range(len(sizes)):  # free a place in s: move another group's leftover elsewhere
                if taken[other][s] and augment(other, seen):
                    taken[other][s] = False
                    taken[g][s] = True
                    return True
        return False

    for g in range(len(sizes)):
        while supply[g] and augment(g, set()):
            supply[g] -= 1
        for s in sorted(splits, key=lambda s: -fraction[g][s]):  # never needed (see above); keeps sum == n
            if supply[g] and fraction[g][s] and not taken[g][s]:
                taken[g][s], supply[g] = True, supply[g] - 1
    return [tuple(c + t for c, t in zip(row, flags)) for row, flags in zip(counts, taken)]


def small_split_warnings(instances_per_split: Mapping[str, int], total: int) -> list[str]:
    """The build's warnings about its splits: one naming every empty split, one per validation / test split with
    fewer than :data:`SMALL_SPLIT_INSTANCES` instances (the numbers computed on it will be noisy)."""
    out = []
    empty = [s for s in MIE_SPLITS if not instances_per_split.get(s)]
    if empty:
        out.append(f"no {' or '.join(empty)} instances ({total} instance(s) in all; 3:1:1 needs at least 5 to fill "
                   "every split): a trainer or benchmark that reads that split will find none; train with "
                   "--eval_split '' or add instances")
    for split in ("validation", "test"):
        n = instances_per_split.get(split, 0)
        if 0 < n < SMALL_SPLIT_INSTANCES:
            out.append(f"the {split} split has only {n} instance(s): correlations on it are noisy and bootstrap "
                       f"CIs over {n} instance(s) are not meaningful (fewer than {SMALL_SPLIT_INSTANCES})")
    return out


def stratified_splits(instance_tasks: Mapping[str, str], salt: str = DEFAULT_SPLIT_SALT) -> dict[str, str]:
    """``{instance_id: split}``: exactly 3:1:1 within each task (see the module docstring)."""
    by_task: dict[str, list[str]] = defaultdict(list)
    for instance_id, task in instance_tasks.items():
        by_task[task].append(instance_id)
    tasks = [t for t in TASKS if t in by_task]
    out: dict[str, str] = {}
    for task, counts in zip(tasks, stratified_counts([len(by_task[t]) for t in tasks])):
        ordered = sorted(by_task[task], key=lambda i: (hashlib.sha256(f"{salt}:{i}".encode("utf-8")).digest(), i))
        start = 0
        for split, count in zip(MIE_SPLITS, counts):
            out.update((instance_id, split) for instance_id in ordered[start:start + count])
            start += count
    return out


# --------------------------------------------------------------------------------------------- split files


def _split_file_entries(path: Path, problems: ProblemCollector) -> list[tuple[int, object, object]] | None:
    name = path.name
    if path.suffix.lower() == ".csv":
        rows = read_csv(path, problems, required=("instance_id", "split"))
        return None if rows is None else [(line, row["instance_id"], row["split"]) for line, row in rows]
    if path.suffix.lower() != ".json":
        problems.add(name, None, "a split file must be .csv (instance_id,split) or .json ({instance_id: split})")
        return None
    text = read_text(path, problems)
    try:
        return None if text is None else list(json_object_entries(text, 'a JSON object {"<instance_id>": "<split>"}'))
    except json.JSONDecodeError as err:
        problems.add(name, err.lineno, f"malformed JSON: {err.msg} (column {err.colno})")
    except RecursionError:
        problems.add(name, None, TOO_DEEP)
    return None


def read_split_file(path: Path, problems: ProblemCollector) -> dict[str, tuple[str, int]] | None:
    """``{instance_id: (split, line)}`` from a split file (CSV or JSON, see the module docstring); bad split
    names, non-string ids and repeated ids are reported with their line. ``None`` when the file is unusable."""
    entries = _split_file_entries(path, problems)
    if entries is None:
        return None
    out: dict[str, tuple[str, int]] = {}
    for line, instance_id, split in entries:
        if not isinstance(instance_id, str) or not instance_id.strip():
            problems.add(path.name, line, f"instance_id must be a non-empty string, got {instance_id!r}")
        elif split not in MIE_SPLITS:
            problems.add(path.name, line, f"unknown split {split!r} for instance {instance_id!r}; expected one of: "
                                          f"{', '.join(MIE_SPLITS)}")
        elif instance_id in out:
            problems.add(path.name, line, f"instance {instance_id!r} listed twice (first on line "
                                          f"{out[instance_id][1]})")
        else:
            out[instance_id] = (split, line)
    return out
