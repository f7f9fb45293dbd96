"""IEQA (Liu et al. 2026; the EditHF-1M subset of the NTIRE 2026 X-AIGC Quality Assessment challenge, track 2)
-> pointwise single-source edits with three MOS dimensions.

Release format: **not found**. The EditHF repository (https://github.com/IntMeGroup/EditHF) points to the Hub
dataset ``sparkling621/IEQA`` but neither its file list nor its columns could be found with the search tools
(searched: the repository, the Hub dataset pages, the challenge pages). This converter therefore implements the
format **from the papers' description** (EditHF README and the MIEScore paper: MOS for visual quality, editing
alignment and attribute preservation per edited image, with its source image and instruction), as one CSV file
(``--file``, default ``ieqa.csv``) with the header::

    id,source_image,edited_image,instruction,visual_quality,editing_alignment,attribute_preservation

(``id`` and an optional ``editing_model`` column; image paths relative to ``--raw``). When the real release is
available, its columns must be mapped onto these (or this module adapted), and this docstring corrected.
"""

from __future__ import annotations

from ...utils.numbers import finite_float
from ..builders.raw_files import (
    ImageChecker,
    ProblemCollector,
    RecordCheck,
    read_csv,
    unique_records,
)
from .base import BenchmarkConverter, ReleaseChoiceOption
from .benchmark_specs import SPECS
from .schema import EditItem

__all__ = ["COLUMNS", "IEQAConverter", "SPEC"]

DEFAULT_FILE = "ieqa.csv"

SPEC = SPECS["ieqa"]
COLUMNS = dict(SPEC.dimensions)  # the CSV's MOS column -> MIEScore score key


class IEQAConverter(ReleaseChoiceOption, BenchmarkConverter):
    """IEQA CSV (format from the papers' description) -> pointwise rows (see the module docstring)."""

    spec = SPEC
    raw_help = f"folder holding {DEFAULT_FILE} (or --file) and the images it names"
    main_file = DEFAULT_FILE
    choice_option, default_choice = "file", DEFAULT_FILE

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        rows = read_csv(self.raw / self.choice, problems,
                        required=("id", "source_image", "edited_image", "instruction", *COLUMNS)) or []
        declared: set[str] = set()
        for line, row, edit_id in unique_records(self.progress_bar(rows, desc="checking edits"), problems, self.choice,
                                                 "id", declared):
            check = RecordCheck(problems, self.choice, line, images)
            instruction = check.text(row["instruction"], "instruction must be non-empty")
            human = {}
            for column, key in COLUMNS.items():
                value = finite_float(row[column])
                if value is None:
                    check.fail(f"{column} must be a finite number, got {row[column]!r}")
                human[key] = value
            source = self.file_image(check, row["source_image"], "source_image")
            edited = self.file_image(check, row["edited_image"], "edited_image")
            if check.ok:
                self.add_edit(EditItem(id=edit_id, sources=[source], edited=edited, instruction=instruction.strip(),
                                       human=human, editing_model=row.get("editing_model", "")),
                              (self.choice, line), problems)
