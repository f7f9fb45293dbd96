"""The JSON Lines MOS format of IntMeGroup's image-editing benchmarks (ms-swift's training format): one rating of one
edited image on one dimension per line, shared by EBench-18K (:mod:`.ebench`) and IEQA (:mod:`.ieqa`).

Read from LMM4Edit's released test files (https://github.com/IntMeGroup/LMM4Edit ``data/test_{v,e,c}.json``) and from
EditHF's evaluation reader (https://github.com/IntMeGroup/EditHF ``inference.py``, ``ImageQualityDataset``: "each
JSONL line ``{"images": [path1, path2], "query": ..., "response": "The quality score is 3.45"}``")::

    {"images": ["<source image>", "<edited image>"],
     "query": "With the image editing prompt [<instruction>], the source image <image> is edited to generate the
               target image <image>. Please rate ... on a scale of 0-100. ...",
     "response": "The quality score is 34.49"}

:class:`MOSLines` joins the lines of one edited image (by its path) across dimensions into one
:class:`~.schema.EditItem`; an edit must have every dimension the converter declares. The score must lie on the
0-100 scale the query states. Edits are grouped (``group_id``) by the source image's **file name** and the
instruction: the releases keep one copy of a source per model folder (EBench-18K: ``sourceimg_h/model00/H_00_04.jpg``,
``sourceimg_h/model01/H_00_04.jpg``, ...), so the source's path would make every edit a group of its own.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Callable

from ...utils.numbers import finite_float
from ..builders.raw_files import ImageRef, ProblemCollector, RecordCheck
from .base import content_key
from .schema import EditItem

__all__ = ["MOS_SCALE", "MOSLines", "MOS_TIE_RULE", "REQUIRED_KEYS", "instruction_of", "score_of"]

REQUIRED_KEYS = ("query", "response", "images")
MOS_SCALE = (0.0, 100.0)  # "on a scale of 0-100" (both releases' queries)
# How both benchmarks are scored (their ``BenchmarkSpec.tie_rule``; the ``srcc`` protocol over three MOS dimensions).
MOS_TIE_RULE = ("Pointwise: SRCC per dimension with the MOS (average ranks for ties); the Table 6 value is the mean "
                "SRCC over the three dimensions.")
_INSTRUCTION = re.compile(r"editing prompt \[(.*?)\], the source image", re.DOTALL)
_SCORE = re.compile(r"score is\s*(-?[0-9]+(?:\.[0-9]+)?)")


def instruction_of(query: Any) -> str | None:
    """The instruction inside ``editing prompt [...]`` of a query, or None."""
    match = _INSTRUCTION.search(str(query))
    return match.group(1).strip() if match and match.group(1).strip() else None


def score_of(response: Any) -> float | None:
    """The number after ``score is`` in a response, or None."""
    match = _SCORE.search(str(response))
    return finite_float(match.group(1)) if match else None


class MOSLines:
    """Lines of one release joined into edits: :meth:`add` each line, then :meth:`edits` gives every complete edit.

    ``release_path`` maps a path of the file to one relative to the raw folder; ``dimensions`` are the score keys
    every edit must have.
    """

    def __init__(self, release_path: Callable, dimensions: tuple[str, ...],
                 subset_of: Callable[[str], str] = lambda rel: ""):
        self.release_path, self.dimensions, self.subset_of = release_path, dimensions, subset_of
        self.entries: dict[str, dict] = {}

    def add(self, check: RecordCheck, record: dict, dimension: str | None) -> None:
        """One line (already checked to hold :data:`REQUIRED_KEYS`); ``dimension`` None: unknown (a problem)."""
        instruction = instruction_of(record["query"])
        score = score_of(record["response"])
        paths = record["images"]
        if dimension is None:
            check.fail("query names no known dimension")
        if instruction is None:
            check.fail("query has no instruction in 'editing prompt [...]'")
        if score is None:
            check.fail(f"response {str(record['response'])[:60]!r} has no 'score is <number>'")
        elif not MOS_SCALE[0] <= score <= MOS_SCALE[1]:
            check.fail(f"score {score:g} is outside the {MOS_SCALE[0]:g}-{MOS_SCALE[1]:g} MOS scale of the query")
        if not (isinstance(paths, list) and len(paths) == 2):
            check.fail("images must list the source and the target image")
            return
        rels = [self.release_path(p) for p in paths]
        edit_id = str(rels[1])
        entry = self.entries.get(edit_id)
        if entry is None:
            source = check.image(rels[0], "source image")
            edited = check.image(rels[1], "target image")
            if not check.ok:
                return
            entry = self.entries[edit_id] = {"item": self._item(edit_id, source, edited, instruction),
                                             "where": (check.file, check.line)}
        elif not check.ok:
            return
        elif entry["item"].instruction != instruction:
            check.fail(f"instruction differs from the one for this image at {entry['where'][0]}:{entry['where'][1]}")
            return
        if dimension in entry["item"].human:
            check.fail(f"second {dimension} score for {edit_id!r}")
            return
        entry["item"].human[dimension] = score

    def _item(self, edit_id: str, source: ImageRef, edited: ImageRef, instruction: str) -> EditItem:
        source_name = PurePosixPath(source.rel).name
        return EditItem(id=edit_id, sources=[source], edited=edited, instruction=instruction,
                        editing_model=PurePosixPath(edited.rel).parent.name,
                        group_id=f"{source_name}|{content_key(source_name, instruction)}",
                        subset=self.subset_of(edited.rel))

    def edits(self, problems: ProblemCollector, missing_in: Callable[[list[str]], str]):
        """``(item, where)`` for each edit with every dimension; the others are problems (``missing_in(missing
        dimensions)`` says where the scores were expected)."""
        for edit_id, entry in self.entries.items():
            missing = [d for d in self.dimensions if d not in entry["item"].human]
            if missing:
                problems.add(*entry["where"], f"edit {edit_id!r} has no score in {missing_in(missing)}")
                continue
            yield entry["item"], entry["where"]
