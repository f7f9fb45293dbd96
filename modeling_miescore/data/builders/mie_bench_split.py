"""MIE-Bench train / validation / test splits: by instance, 3:1:1 within each task, a hash, or a split file.

The MIEScore paper ("Implementation Details") splits MIE-Bench 3:1:1 into train, validation and test. All edits of
an instance are always in one split. Three ways to assign instances:

* ``"stratified"`` (the default): exactly 3:1:1 within each task. A task with ``n`` instances gets the
  largest-remainder rounding of ``n * (3/5, 1/5, 1/5)``: each split first gets the whole part of its share, and
  the instances left over go to the splits with the largest fractional parts; when fractional parts are equal,
  to the split furthest below its 3:1:1 share of the instances allocated so far (tasks taken in the order of
  :data:`~modeling_miescore.data.schema.TASKS`), then in the order train, validation, test. Within a task the
  instances are ordered by ``sha256(salt + ":" + instance_id)`` and taken in that order: train, then
  validation, then test. Deterministic, and independent of the order of the raw files; adding instances to a
  task may move existing ones (their task's counts change).
* ``"hash"``: each instance by a hash bucket of its id alone (:func:`split_of`): 3:1:1 only on average and not
  per task, but adding instances never moves existing ones.
* a split file (``split_file``), e.g. an official split of a release: CSV with the columns
  ``instance_id,split``, or a JSON object ``{"<instance_id>": "<split>", ...}``; split names are
  ``train``, ``validation``, ``test``. Every instance of ``instances.jsonl`` must be listed once and every listed
  id must be an instance; problems are reported with file and line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence

from ..schema import MIE_SPLITS, TASKS
from .raw_files import TOO_DEEP, ProblemCollector, read_csv

__all__ = [
    "DEFAULT_SPLIT_SALT",
    "SPLIT_METHODS",
    "SPLIT_RATIO",
    "hash_bucket",
    "read_split_file",
    "split_of",
    "stratified_counts",
    "stratified_splits",
]

SPLIT_RATIO = (3, 1, 1)  # paper, "Implementation Details": train / validation / test = 3:1:1
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


def stratified_counts(sizes: Sequence[int], ratio: Sequence[int] = SPLIT_RATIO) -> list[tuple[int, ...]]:
    """Instances per split for groups (tasks) of ``sizes``: the largest-remainder rounding of each group's share
    ``n * ratio / sum(ratio)``; equal remainders go to the split furthest below its share of all groups so far.

    Integer arithmetic throughout (shares are kept as multiples of ``1 / sum(ratio)``), so no rounding error
    decides a tie.
    """
    total_weight = sum(ratio)
    done = [0] * len(ratio)
    seen = 0
    out = []
    for n in sizes:
        seen += n
        counts = [n * w // total_weight for w in ratio]
        remainders = [n * w % total_weight for w in ratio]
        deficits = [seen * w - total_weight * (done[s] + counts[s]) for s, w in enumerate(ratio)]
        for s in sorted(range(len(ratio)), key=lambda s: (-remainders[s], -deficits[s], s))[: n - sum(counts)]:
            counts[s] += 1
        done = [d + c for d, c in zip(done, counts)]
        out.append(tuple(counts))
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


class _JSONSyntaxError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def _json_object_entries(text: str) -> list[tuple[int, object, object]]:
    """``[(line, key, value), ...]`` of a JSON object, in file order (duplicate keys kept, unlike ``json.loads``).

    Raises :class:`_JSONSyntaxError` with the line of the first syntax error.
    """
    decoder = json.JSONDecoder()
    space = re.compile(r"\s*")

    def skip(pos: int) -> int:
        return space.match(text, pos).end()

    def fail(pos: int, what: str):
        raise _JSONSyntaxError(text.count("\n", 0, pos) + 1, what)

    def value_at(pos: int):
        try:
            return decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            fail(err.pos, f"malformed JSON: {err.msg}")
        except RecursionError:
            fail(pos, TOO_DEEP)

    pos = skip(0)
    if not text.startswith("{", pos):
        fail(pos, 'expected a JSON object {"<instance_id>": "<split>", ...}')
    entries, pos = [], skip(pos + 1)
    while not text.startswith("}", pos):
        line = text.count("\n", 0, pos) + 1
        key, pos = value_at(pos)
        pos = skip(pos)
        if not text.startswith(":", pos):
            fail(pos, "malformed JSON: expected ':' after the key")
        value, pos = value_at(skip(pos + 1))
        entries.append((line, key, value))
        pos = skip(pos)
        if text.startswith(",", pos):
            pos = skip(pos + 1)
        elif not text.startswith("}", pos):
            fail(pos, "malformed JSON: expected ',' or '}'")
    if skip(pos + 1) != len(text):
        fail(skip(pos + 1), "malformed JSON: extra data after the object")
    return entries


def _split_file_entries(path: Path, problems: ProblemCollector) -> list[tuple[int, object, object]] | None:
    name = path.name
    if path.suffix.lower() == ".csv":
        rows = read_csv(path, problems, required=("instance_id", "split"))
        return None if rows is None else [(line, row["instance_id"], row["split"]) for line, row in rows]
    if path.suffix.lower() != ".json":
        problems.add(name, None, "a split file must be .csv (instance_id,split) or .json ({instance_id: split})")
        return None
    if not path.is_file():
        problems.add(name, None, f"file not found (expected at {path})")
        return None
    try:
        return _json_object_entries(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as err:
        problems.add(name, None, f"cannot read file: {err}")
    except _JSONSyntaxError as err:
        problems.add(name, err.line, str(err))
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
