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
path; ``editing_model`` = its folder (``model00``); the instruction is the text in the prompt's brackets; the
score must lie on the 0-100 scale. ``group_id`` = the source's file name + the instruction (each model folder holds
its own copy of the source, so the source's path would give 3,672 groups of one instead of 216 groups of 17; the line
format and the grouping are shared with IEQA, :mod:`.mos_sentence_lines`).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck, read_jsonl
from . import register_converter
from .base import BenchmarkConverter, StripPrefixOption
from .mos_sentence_lines import MOS_TIE_RULE, REQUIRED_KEYS, MOSLines
from .schema import BenchmarkSpec, bibtex

__all__ = ["EBenchConverter", "FILES", "SPEC"]

FILES = {"test_v.json": "visual_quality", "test_e.json": "instruction_following", "test_c.json": "attribute_preservation"}

SPEC = BenchmarkSpec(
    name="ebench-18k", title="EBench-18K", kinds=("pointwise",),
    protocol="srcc", columns={"zero-shot": {"ebench-18k": "mean"}},
    format_source="https://github.com/IntMeGroup/LMM4Edit (data/test_v.json, test_e.json, test_c.json)",
    format_note=("The three JSON Lines files are read as released; image paths are made relative with "
                 "--strip-prefix (default /mnt/data/xzt/MM/editing_all/)."),
    release_folder="folder holding test_v.json, test_e.json, test_c.json and the image folders they name",
    main_file="test_v.json",
    dimensions={"visual quality (test_v)": "visual_quality", "editing correspondence (test_e)":
                "instruction_following", "attribute preservation (test_c)": "attribute_preservation"},
    tie_rule=MOS_TIE_RULE,
    citation=bibtex("inproceedings", "xu2025lmm4edit",
                    title="LMM4Edit: Benchmarking and Evaluating Multimodal Image Editing with LMMs",
                    author=("Xu, Zitong", "Duan, Huiyu", "others"), booktitle="ACM Multimedia", year=2025),
    paper_reference="MIEScore paper, Table 6 (EBench-18K, SRCC)",
)


@register_converter
class EBenchConverter(StripPrefixOption, BenchmarkConverter):
    """EBench-18K test_{v,e,c}.json + images -> pointwise rows (see the module docstring)."""

    spec = SPEC
    default_strip_prefix = "/mnt/data/xzt/MM/editing_all/"

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        lines = MOSLines(self.release_path, tuple(FILES.values()),
                         subset_of=lambda rel: PurePosixPath(rel).parts[0])
        for name, dimension in FILES.items():
            records = read_jsonl(self.raw / name, problems, required=REQUIRED_KEYS)
            for line, record in self.progress_bar(records, desc=f"checking {name}"):
                lines.add(RecordCheck(problems, name, line, images), record, dimension)
        by_dimension = {d: f for f, d in FILES.items()}
        for item, where in lines.edits(problems, lambda missing: ", ".join(by_dimension[d] for d in missing)):
            self.add(item, where, problems)
