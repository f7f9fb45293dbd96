"""EBench-18K (Xu et al. 2025, LMM4Edit) -> pointwise single-source edits with three MOS dimensions.

Release format (read from https://github.com/IntMeGroup/LMM4Edit : ``data/test_v.json``, ``data/test_e.json``,
``data/test_c.json``; the images are the dataset download linked from its README): each ``test_<d>.json`` is JSON
Lines in ms-swift's format, one edit per line::

    {"query": "With the image editing prompt [<instruction>], the source image <image> is edited to generate the
               target image <image>. Please rate the <dimension> of the target image ...",
     "response": "The quality score is 34.49",
     "images": ["<...>/sourceimg_h/model00/H_00_04.jpg", "<...>/targetimg_h/model00/H_00_04.jpg"]}

with ``d`` = ``v`` (visual quality), ``e`` (editing correspondence) and ``c`` (attribute preservation); the score
is the MOS on 0-100. The released files name images by absolute paths of the authors' machine
(``/mnt/data/xzt/MM/editing_all/...``); ``--strip-prefix`` (default that prefix) makes them relative to ``--raw``,
which holds the three files and the dataset's image folders. ``test_yn.json`` (yes/no questions) is not used.

Rows: one pointwise row per edited image (joined across the three files by the target image path): id = that
path; ``editing_model`` = its folder (``model00``); the instruction is the text in the prompt's brackets.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ...utils.numbers import finite_float
from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck, read_jsonl
from .base import BenchmarkConverter, StripPrefixOption
from .benchmark_specs import SPECS
from .schema import EditItem

__all__ = ["EBenchConverter", "FILES", "SPEC"]

FILES = {"test_v.json": "visual_quality", "test_e.json": "instruction_following", "test_c.json": "attribute_preservation"}
_INSTRUCTION = re.compile(r"editing prompt \[(.*?)\], the source image", re.DOTALL)
_SCORE = re.compile(r"score is\s*(-?[0-9]+(?:\.[0-9]+)?)")

SPEC = SPECS["ebench-18k"]


class EBenchConverter(StripPrefixOption, BenchmarkConverter):
    """EBench-18K test_{v,e,c}.json + images -> pointwise rows (see the module docstring)."""

    spec = SPEC
    default_strip_prefix = "/mnt/data/xzt/MM/editing_all/"
    raw_help = "folder holding test_v.json, test_e.json, test_c.json and the image folders they name"
    main_file = "test_v.json"

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        merged: dict[str, dict] = {}
        for name, dimension in FILES.items():
            lines = read_jsonl(self.raw / name, problems, required=("query", "response", "images"))
            for line, record in self.progress_bar(lines, desc=f"checking {name}"):
                self._read_line(name, line, record, dimension, merged, images, problems)
        for edit_id, entry in merged.items():
            missing = [f for f, d in FILES.items() if d not in entry["human"]]
            if missing:
                problems.add(entry["where"][0], entry["where"][1],
                             f"edit {edit_id!r} has no score in {', '.join(missing)}")
                continue
            self.add_edit(entry["item"], entry["where"], problems)

    def _read_line(self, name: str, line: int, record: dict, dimension: str, merged: dict, images: ImageChecker,
                   problems: ProblemCollector) -> None:
        check = RecordCheck(problems, name, line, images)
        instruction = _INSTRUCTION.search(str(record["query"]))
        score = _SCORE.search(str(record["response"]))
        paths = record["images"]
        if instruction is None or not instruction.group(1).strip():
            check.fail("query has no instruction in 'editing prompt [...]'")
        if score is None or finite_float(score.group(1)) is None:
            check.fail(f"response {str(record['response'])[:60]!r} has no 'score is <number>'")
        if not (isinstance(paths, list) and len(paths) == 2):
            check.fail("images must list the source and the target image")
            return
        rels = [self.release_path(p) for p in paths]
        edit_id = str(rels[1])
        entry = merged.get(edit_id)
        if entry is None:
            source = self.file_image(check, rels[0], "source image")
            edited = self.file_image(check, rels[1], "target image")
            if not check.ok:
                return
            model = PurePosixPath(edited.rel).parent.name
            item = EditItem(id=edit_id, sources=[source], edited=edited, instruction=instruction.group(1).strip(),
                            editing_model=model, group_id=source.rel, subset=PurePosixPath(edited.rel).parts[0])
            entry = merged[edit_id] = {"item": item, "human": item.human, "where": (name, line)}
        elif not check.ok:
            return
        elif entry["item"].instruction != instruction.group(1).strip():
            check.fail(f"instruction differs from the one for this image at {entry['where'][0]}:{entry['where'][1]}")
            return
        if dimension in entry["human"]:
            check.fail(f"second {dimension} score for {edit_id!r} in {name}")
            return
        entry["human"][dimension] = float(score.group(1))
