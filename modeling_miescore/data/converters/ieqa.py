"""IEQA (Liu et al. 2026; the EditHF-1M subset of the NTIRE 2026 X-AIGC Quality Assessment challenge, track 2)
-> pointwise single-source edits with three MOS dimensions.

Release format. The EditHF repository (https://github.com/IntMeGroup/EditHF) points to the Hub dataset
``sparkling621/IEQA`` for the data; its file list could not be read here. The one published description of the
group's format is EditHF's own evaluation reader (``inference.py``, ``ImageQualityDataset``: JSON Lines
``{"images": [source, edited], "query": ..., "response": "The quality score is XX.XX"}``), the same ms-swift format
as LMM4Edit's EBench-18K files (:mod:`.mos_sentence_lines`); its ``build_query`` names the dimension of a line in the
query: "Please rate the target image from <visual quality | editing instruction alignment | attribute preservation>
aspect on a scale of 0-100". The converter reads every JSON Lines file matching ``--file`` (a glob inside ``--raw``,
default ``*.jsonl``; the Hub's file names are not known here) with the images they name (relative to ``--raw``, or
made relative with ``--strip-prefix``). An earlier CSV layout of this converter had no published source and was
dropped.

Rows: one pointwise row per edited image (joined across lines by its path): id = that path, the three MOS (each on
0-100; outside is a problem), ``editing_model`` = the edited image's folder, ``group_id`` = the source's file name +
the instruction.
"""

from __future__ import annotations

import re

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck, read_jsonl
from . import register_converter
from .base import BenchmarkConverter, StripPrefixOption
from .mos_sentence_lines import MOS_TIE_RULE, REQUIRED_KEYS, MOSLines
from .schema import BenchmarkSpec, bibtex

__all__ = ["DIMENSIONS", "IEQAConverter", "SPEC"]

DEFAULT_FILE = "*.jsonl"

SPEC = BenchmarkSpec(
    name="ieqa", title="IEQA (EditHF-1M subset)", kinds=("pointwise",),
    protocol="srcc", columns={"zero-shot": {"ieqa": "mean"}},
    format_source="https://github.com/IntMeGroup/EditHF (inference.py: the JSON Lines reader and the queries; "
                  "README: dataset at huggingface.co/datasets/sparkling621/IEQA)",
    format_note=("JSON Lines as EditHF's inference.py reads them ({images: [source, edited], query, response: 'The "
                 "quality score is XX.XX'}), the dimension named in the query; the Hub dataset's file names were not "
                 "read, so --file (a glob, default *.jsonl) picks the files."),
    release_folder=f"folder holding the IEQA JSON Lines files ({DEFAULT_FILE}, or --file) and the images they name",
    default_file=DEFAULT_FILE,
    dimensions={"visual_quality": "visual_quality", "editing_alignment": "instruction_following",
                "attribute_preservation": "attribute_preservation"},
    tie_rule=MOS_TIE_RULE,
    citation=bibtex("article", "xu2026edithf1m",
                    title="EditHF-1M: A Million-Scale Rich Human Preference Feedback for Image Editing",
                    author=("Xu, Zitong", "Duan, Huiyu", "Ji, Zhongpeng", "Zhang, Xinyun", "Liu, Yutao",
                            "Min, Xiongkuo", "others"), journal="arXiv preprint arXiv:2603.14916", year=2026),
    paper_reference="MIEScore paper, Table 6 (IEQA, SRCC)",
)
# EditHF inference.py build_query: the words of a query's "from <...> aspect" -> the MIEScore score key
DIMENSIONS = {"visual quality": "visual_quality", "editing instruction alignment": "instruction_following",
              "attribute preservation": "attribute_preservation"}
_ASPECT = re.compile(r"from (.+?) aspect")


def dimension_of(query) -> str | None:
    """The score key of the dimension a query asks about, or None."""
    match = _ASPECT.search(str(query))
    return DIMENSIONS.get(match.group(1).strip().lower()) if match else None


@register_converter
class IEQAConverter(StripPrefixOption, BenchmarkConverter):
    """IEQA JSON Lines (EditHF's format) -> pointwise rows (see the module docstring)."""

    spec = SPEC

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        lines = MOSLines(self.release_path, tuple(DIMENSIONS.values()))
        for path in self.release_files(self.choice, problems):
            name = path.relative_to(self.raw).as_posix()
            for line, record in self.progress_bar(read_jsonl(path, problems, required=REQUIRED_KEYS),
                                                  desc=f"checking {name}"):
                lines.add(RecordCheck(problems, name, line, images), record, dimension_of(record["query"]))
        by_key = {key: words for words, key in DIMENSIONS.items()}
        for item, where in lines.edits(problems, lambda missing: "a usable line asking for " + ", ".join(
                repr(by_key[d]) for d in missing)):
            self.add(item, where, problems)
