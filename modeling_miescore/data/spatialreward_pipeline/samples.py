"""The pipeline's input: edits with sources, edited image and instruction, from any of the package's formats.

* a ``score-batch`` JSONL file: ``{"id", "sources": [path, ...], "edited": path, "instruction"}`` per line (paths
  relative to the file), with optional ``domain`` (``"human"`` / ``"general"``: forces the stage-II route),
  ``category`` (e.g. MER-Bench's ``human_basic``) and ``num_regions`` (or ``num_edits``: the ``{box_num}`` of the
  grounding prompt);
* a dataset folder or Hub repo: MIE-Bench, a converted benchmark (``miescore convert-benchmark``: pointwise and
  pairwise edits) or MER-Bench (each candidate one single-source edit, its MER category kept), exported once into
  the output folder by :func:`modeling_miescore.data.dataset_edits.export_dataset_edits`.

A line that cannot be used (not JSON, no id, a repeated id, no instruction) is returned as an input problem with
its line number; the run reports it in the rejection report and goes on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from ...hub.errors import MIEScoreInputError
from ...hub.processing_miescore import EditSample
from ...scoring.jsonl_scoring import iter_input, line_entries, record_to_sample
from ..dataset_edits import export_dataset_edits

__all__ = ["EditRecord", "read_edit_records"]

DOMAINS = ("human", "general")


@dataclass
class EditRecord:
    """One edit to annotate: image paths, instruction and the optional routing hints."""

    id: str
    sources: List[str]
    edited: str
    instruction: str
    domain: Optional[str] = None
    category: Optional[str] = None
    num_regions: Optional[int] = None

    def load(self) -> EditSample:
        """The edit with RGB PIL images (``ImageLoadError``, a ``MIEScoreInputError``, when one is unreadable)."""
        return EditSample(sources=list(self.sources), edited=self.edited, instruction=self.instruction,
                          id=self.id).load()


def _hints(record: dict) -> Tuple[Optional[str], Optional[str], Optional[int]]:
    domain = record.get("domain")
    if domain is not None and domain not in DOMAINS:
        raise MIEScoreInputError(f"'domain' must be one of {DOMAINS} or absent, got {domain!r}")
    count = record.get("num_regions", record.get("num_edits"))
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 16):
        raise MIEScoreInputError(f"'num_regions' must be an integer from 0 to 16, got {count!r}")
    category = record.get("category")
    return domain, (str(category) if category is not None else None), count


def _read_jsonl(path: Path) -> Tuple[List[EditRecord], List[Tuple[str, str]]]:
    records, problems = [], []
    for number, record, error, sample_id in line_entries(iter_input(path)):
        if error is None:
            try:
                sample = record_to_sample(record, path.parent)
                domain, category, count = _hints(record)
            except MIEScoreInputError as err:
                error = str(err)
        if error is not None:
            problems.append((f"{path.name}:{number}", error))
            continue
        records.append(EditRecord(sample_id, [str(Path(s).resolve()) for s in sample.sources],
                                  str(Path(sample.edited).resolve()), sample.instruction, domain, category, count))
    return records, problems


def read_edit_records(source: str, split: Optional[str] = None, work_dir: Optional[Path] = None,
                      progress: bool = True) -> Tuple[List[EditRecord], List[Tuple[str, str]]]:
    """``(records, problems)`` of a JSONL file or a dataset (module docstring); ``problems`` are
    ``(where, message)`` for unusable lines. Dataset images are exported into ``work_dir``; ``split`` as in
    :func:`modeling_miescore.data.dataset_edits.export_dataset_edits`."""
    path = Path(source).expanduser()
    if path.is_file():
        return _read_jsonl(path)
    if work_dir is None:
        raise ValueError("reading a dataset needs a work_dir for its exported images")
    print(f"exporting the images of '{source}' ({split}) to '{work_dir}'", file=sys.stderr)
    # the export writes each edit's category into its line, where _read_jsonl reads it
    return _read_jsonl(export_dataset_edits(source, Path(work_dir), split=split, progress=progress)[0])
