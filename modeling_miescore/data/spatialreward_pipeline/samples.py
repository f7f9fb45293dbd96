"""The pipeline's input: edits with sources, edited image and instruction, from any of the package's formats.

* a ``score-batch`` JSONL file: ``{"id", "sources": [path, ...], "edited": path, "instruction"}`` per line (paths
  relative to the file), with optional ``domain`` (``"human"`` / ``"general"``: forces the stage-II route),
  ``category`` (e.g. MER-Bench's ``human_basic``) and ``num_regions`` (or ``num_edits``: the ``{box_num}`` of the
  grounding prompt);
* a MIE-Bench-format dataset folder or Hub repo (``id, source_images, edited_image, instruction`` and
  ``instance_id``, or ``group_id`` as in the single-source converted benchmarks): its images are exported once
  into the output folder (:func:`modeling_miescore.evaluation.input_export.export_mie_inputs`);
* a MER-Bench dataset folder (``pair_id, original_image, edited_images, candidate_ids, category``): every
  candidate edit becomes one single-source edit (a candidate in several groups once), its MER category kept.

A line that cannot be used (not JSON, no id, a repeated id, no instruction) is returned as an input problem with
its line number; the run reports it in the rejection report and goes on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...image_io import MIEScoreInputError
from ...processing_miescore import EditSample

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
    meta: Dict[str, Any] = field(default_factory=dict)

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
    from ...scoring.jsonl_scoring import line_entries, iter_input, record_to_sample

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


def _flatten_mer(ds):
    """MER-Bench groups -> one single-source row per candidate (MIE-Bench columns), images never decoded."""
    from datasets import Dataset, Features, Image, List, Value

    raw = (ds.cast_column("original_image", Image(decode=False))
             .cast_column("edited_images", List(Image(decode=False))))
    rows: Dict[str, dict] = {}
    for group in raw:
        ids = group.get("candidate_ids") or [f"{group['pair_id']}-{k}" for k in range(len(group["edited_images"]))]
        for candidate, edited in zip(ids, group["edited_images"]):
            rows.setdefault(str(candidate), {
                "id": str(candidate), "instance_id": str(group.get("sample_id") or group["pair_id"]),
                "instruction": group["instruction"], "source_images": [group["original_image"]],
                "edited_image": edited, "category": group.get("category") or ""})
    features = Features({"id": Value("string"), "instance_id": Value("string"), "instruction": Value("string"),
                         "source_images": List(Image(decode=False)), "edited_image": Image(decode=False),
                         "category": Value("string")})
    return Dataset.from_list(list(rows.values()), features=features)


def _read_dataset(dataset: str, split: str, work_dir: Path, progress: bool):
    from ...evaluation.dataset_splits import load_split
    from ...evaluation.input_export import export_mie_inputs

    ds = load_split(dataset, split)
    categories: Dict[str, str] = {}
    if "edited_images" in ds.column_names and "original_image" in ds.column_names:
        ds = _flatten_mer(ds)
        categories = dict(zip(ds["id"], ds["category"]))
    elif "instance_id" not in ds.column_names and "group_id" in ds.column_names:
        ds = ds.rename_column("group_id", "instance_id")
    elif not {"source_images", "edited_image"} <= set(ds.column_names):
        raise MIEScoreInputError(f"dataset '{dataset}' split '{split}' has neither MIE-Bench columns (source_images, "
                                 "edited_image) nor MER-Bench columns (original_image, edited_images)")
    inputs = export_mie_inputs(ds, work_dir, progress=progress)
    records, problems = _read_jsonl(inputs)
    for record in records:
        record.category = record.category or categories.get(record.id) or None
    return records, problems


def read_edit_records(source: str, split: str = "train", work_dir: Optional[Path] = None,
                      progress: bool = True) -> Tuple[List[EditRecord], List[Tuple[str, str]]]:
    """``(records, problems)`` of a JSONL file or a dataset (module docstring); ``problems`` are
    ``(where, message)`` for unusable lines. Dataset images are exported into ``work_dir``."""
    path = Path(source).expanduser()
    if path.is_file():
        return _read_jsonl(path)
    if work_dir is None:
        raise ValueError("reading a dataset needs a work_dir for its exported images")
    print(f"exporting the images of '{source}' ({split}) to '{work_dir}'", file=sys.stderr)
    return _read_dataset(source, split, Path(work_dir), progress)
