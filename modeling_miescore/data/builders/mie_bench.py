"""MIE-Bench builder: raw release (JSON Lines + ratings CSV + images) -> Hub-native Parquet dataset.

Raw layout (all paths relative to the raw folder; extra keys/columns/files are ignored)::

    instances.jsonl   {"instance_id": str, "task": one of TASKS, "instruction": str,
                       "sources": [relative image path, ...]}            # >= 1 source
    edits.jsonl       {"edit_id": str, "instance_id": str, "editing_model": str,
                       "image": relative image path}
    ratings.csv       subject_id,edit_id,dimension,rating
                      dimension in visual_quality / instruction_following /
                      attribute_preservation (aliases vq / if / ap); rating in [0, 5]
      or mos.csv      edit_id,mos_vq,mos_if,mos_ap[,std_vq,std_if,std_ap,n_vq,n_if,n_ap]
                      MOS already on the paper's 0-100 scale

Output: ``data/{train,validation,test}-XXXXX-of-YYYYY.parquet`` + ``README.md`` (``configs``, ``dataset_info``,
statistics) + ``screening_report.json``; one row per edited image (columns:
:data:`.mie_bench_card.COLUMNS`). Paper (MIEScore): 16 tasks in 3 categories, 12 editing models (Table 2), three
0-5 dimensions and 15 raters per image, BT.500 screening + z-score MOS (eq. 1), overall = VQ^0.3 IF^0.4 AP^0.3
(eq. 2), the 3:1:1 split (:mod:`.mie_bench_split`).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...utils.numbers import finite_float
from ..schema import DIMENSION_ABBREVIATIONS, DIMENSIONS, MIE_SPLITS, MOS_RANGE, RATING_RANGE, TASK_CATEGORY, TASKS
from . import mie_bench_card
from .base import BuildSummary, BuildUsageError, DatasetBuilder
from .mie_bench_split import (DEFAULT_SPLIT_SALT, SPLIT_METHODS, read_split_file, small_split_warnings, split_of,
                              stratified_splits)
from .output_folder import format_bytes
from .raw_files import (ImageChecker, ImageRef, ProblemCollector, RecordCheck, read_csv, read_edited_images,
                        read_jsonl, unique_records)

MOS_SOURCES = ("auto", "ratings", "mos")
INSTANCES, EDITS, RATINGS, MOS_CSV = "instances.jsonl", "edits.jsonl", "ratings.csv", "mos.csv"

# Spellings of the rating dimensions accepted in ratings.csv (lower-cased): names, abbreviations, prose.
_DIMENSION_ALIASES = {
    **{d: d for d in DIMENSIONS},
    **{short: d for d, short in DIMENSION_ABBREVIATIONS.items()},
    **{d.replace("_", " "): d for d in DIMENSIONS},
}


@dataclass
class Instance:
    instance_id: str
    task: str
    instruction: str
    sources: list  # [ImageRef]
    line: int


@dataclass
class Edit:
    edit_id: str
    instance_id: str
    editing_model: str
    image: ImageRef
    line: int


def normalise_task(value: Any) -> str | None:
    """The task name for ``value`` (case, ``-`` and spaces forgiven), or ``None`` when it is not a task."""
    if not isinstance(value, str):
        return None
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return key if key in TASK_CATEGORY else None


def _check_sources(check: RecordCheck, instance_id: str, sources: Any) -> list:
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list):
        check.fail(f"instance {instance_id!r}: 'sources' must be a list of image paths, got {type(sources).__name__}")
        return []
    if not sources:
        check.fail(f"instance {instance_id!r} has no sources (an MIE instance needs at least one source image)")
        return []
    resolved = []
    for j, rel in enumerate(sources, start=1):
        image = check.image(rel, f"instance {instance_id!r}, source {j}")
        if image is not None:
            resolved.append(image)
    return resolved


def read_instances(raw: Path, problems: ProblemCollector, images: ImageChecker, bar: Callable):
    """``({instance_id: Instance}, declared ids)`` from ``instances.jsonl``."""
    entries = read_jsonl(raw / INSTANCES, problems, required=("instance_id", "task", "instruction", "sources"))
    declared: set[str] = set()
    out: dict[str, Instance] = {}
    for line, obj, iid in unique_records(bar(entries, desc="checking instances"), problems, INSTANCES,
                                         "instance_id", declared):
        check = RecordCheck(problems, INSTANCES, line, images)
        task = normalise_task(obj["task"])
        if task is None:
            check.fail(f"unknown task {obj['task']!r} for instance {iid!r}; expected one of: {', '.join(TASKS)}")
        instruction = check.instruction(obj["instruction"], f"instance {iid!r}")
        sources = _check_sources(check, iid, obj["sources"])
        if check.ok:
            out[iid] = Instance(iid, task, instruction, sources, line)
    return out, declared


def read_edits(raw: Path, problems: ProblemCollector, images: ImageChecker, declared_instances: set, bar: Callable):
    """``({edit_id: Edit}, declared ids)`` from ``edits.jsonl``."""
    records, declared = read_edited_images(raw / EDITS, problems, images, id_key="edit_id", what="edit",
                                           parent_key="instance_id", parent_file=INSTANCES,
                                           declared_parents=declared_instances, bar=bar)
    return {eid: Edit(eid, iid, model, image, line) for line, eid, iid, model, image in records}, declared


def _check_rating(check: RecordCheck, row: dict, declared_edits: set) -> tuple[str | None, float | None]:
    if not row["subject_id"]:
        check.fail("empty subject_id")
    check.known(row["edit_id"], declared_edits, f"rating for unknown edit_id {row['edit_id']!r} (not in {EDITS})")
    dimension = _DIMENSION_ALIASES.get(row["dimension"].strip().lower())
    if dimension is None:
        check.fail(f"unknown dimension {row['dimension']!r}; expected one of: {', '.join(DIMENSIONS)}")
    value = finite_float(row["rating"])
    lo, hi = RATING_RANGE  # "Subjective Experiment Setup": a 0-5 continuous scale
    if value is None:
        check.fail(f"rating {row['rating']!r} is not a number")
    elif not lo <= value <= hi:
        check.fail(f"rating {value:g} out of range [{lo:g}, {hi:g}]")
    return dimension, value


def read_ratings(raw: Path, problems: ProblemCollector, declared_edits: set, bar: Callable) -> dict | None:
    """Columns ``subject_id, item_id, dimension, rating`` (for :func:`~modeling_miescore.data.mos.compute_mos`)
    from ``ratings.csv``; ``None`` when the file is missing or unusable."""
    rows = read_csv(raw / RATINGS, problems, required=("subject_id", "edit_id", "dimension", "rating"))
    if rows is None:
        return None
    first_line: dict[tuple, int] = {}
    columns: dict[str, list] = {"subject_id": [], "item_id": [], "dimension": [], "rating": []}
    for line, row in bar(rows, desc="checking ratings"):
        check = RecordCheck(problems, RATINGS, line)
        dimension, value = _check_rating(check, row, declared_edits)
        if not check.ok:
            continue
        subject, edit_id = row["subject_id"], row["edit_id"]
        key = (subject, edit_id, dimension)
        if key in first_line:
            check.fail(f"duplicate rating of edit {edit_id!r} ({dimension}) by subject {subject!r} "
                       f"(first on line {first_line[key]})")
            continue
        first_line[key] = line
        for column, v in zip(columns, (subject, edit_id, dimension, value)):
            columns[column].append(v)
    return columns


def _optional_number(check: RecordCheck, text: str, column: str, integer: bool = False) -> float | int | None:
    """An optional ``std_*`` (a number) or ``n_*`` (``integer``) column: None when empty."""
    if not text:
        return None
    value = finite_float(text)
    if value is None or value < 0 or (integer and value != int(value)):
        check.fail(f"{column} {text!r} must be a non-negative {'integer' if integer else 'number'} or empty")
        return None
    return int(value) if integer else value


def _mos_record(check: RecordCheck, row: dict) -> dict:
    record: dict[str, Any] = {}
    lo, hi = MOS_RANGE
    for short in DIMENSION_ABBREVIATIONS.values():
        text = row[f"mos_{short}"]
        value = finite_float(text)
        if value is None:
            check.fail(f"mos_{short} {text!r} is not a number")
        elif not lo <= value <= hi:
            check.fail(f"mos_{short} {value:g} out of range [{lo:g}, {hi:g}]")
        record[f"mos_{short}"] = value
        record[f"std_{short}"] = _optional_number(check, row.get(f"std_{short}", ""), f"std_{short}")
        record[f"n_{short}"] = _optional_number(check, row.get(f"n_{short}", ""), f"n_{short}", integer=True)
    return record


def read_mos_csv(raw: Path, problems: ProblemCollector, declared_edits: set) -> tuple[dict | None, set]:
    """``({edit_id: {mos_*, std_*, n_*}}, edit ids mentioned)`` from ``mos.csv`` (``None`` when unusable)."""
    rows = read_csv(raw / MOS_CSV, problems, required=("edit_id", "mos_vq", "mos_if", "mos_ap"))
    if rows is None:
        return None, set()
    out: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    for line, row in rows:
        check = RecordCheck(problems, MOS_CSV, line)
        edit_id = row["edit_id"]
        check.known(edit_id, declared_edits, f"MOS for unknown edit_id {edit_id!r} (not in {EDITS})")
        if edit_id in first_line:
            check.fail(f"duplicate edit_id {edit_id!r} (first on line {first_line[edit_id]})")
            continue
        record = _mos_record(check, row)
        first_line[edit_id] = line
        if check.ok:
            out[edit_id] = record
    return out, set(first_line)


# MIEScore paper, "Ethics Statement": the images, prompts and source images are released under CC BY 4.0, and the
# annotators consented to the use of their annotations for non-commercial research only. Every row carries MOS
# made from those annotations, so a build defaults to the terms that honour both: CC BY-NC 4.0.
LICENSE = "cc-by-nc-4.0"


def mie_bench_features():
    """The ``datasets.Features`` of a MIE-Bench row."""
    from datasets import ClassLabel, Features, Image, List, Value

    return Features(
        {
            "id": Value("string"),
            "instance_id": Value("string"),
            "task": ClassLabel(names=list(TASKS)),
            "category": Value("string"),
            "instruction": Value("string"),
            "source_images": List(Image()),
            "num_sources": Value("int32"),
            "edited_image": Image(),
            "editing_model": Value("string"),
            **{f"mos_{s}": Value("float64") for s in (*DIMENSION_ABBREVIATIONS.values(), "overall")},
            **{f"std_{s}": Value("float64") for s in DIMENSION_ABBREVIATIONS.values()},
            **{f"n_{s}": Value("int32") for s in DIMENSION_ABBREVIATIONS.values()},
        }
    )


@dataclass(kw_only=True)
class MIEBenchSummary(BuildSummary):
    """What a MIE-Bench build produced."""

    dataset = "mie-bench"
    mos_source: str
    split_method: str = "stratified"  # "stratified", "hash" or "file"
    num_rows: int = 0
    num_instances: int = 0
    screening: dict | None = None

    def headline(self) -> str:
        parts = ", ".join(f"{k} {v['num_instances']} instances / {v['num_examples']} rows"
                          for k, v in self.splits.items())
        return (f"MIE-Bench written to {self.out_dir}: {self.num_rows} rows from {self.num_instances} instances "
                f"({parts}); {format_bytes(self.total_bytes)} in {self.elapsed_s:.1f} s")

    def details(self) -> list[str]:
        if not self.screening:
            return []
        rejected = self.screening.get("rejected_subjects", [])
        return [f"screening ({self.screening.get('rule')}): {len(rejected)} subject(s) rejected {rejected}, "
                f"{100 * self.screening.get('removed_fraction', 0):.2f}% of ratings removed"]


def _mos_from_ratings(ratings: dict, rule: str) -> tuple[dict, Any]:
    """MOS per edit from raw ratings: BT.500 screening and z-score MOS (paper eq. 1), overall (eq. 2)."""
    import pandas as pd

    from ..mos import compute_mos, pivot_mos  # deferred: loads pandas

    mos_table, report = compute_mos(pd.DataFrame(ratings), rule=rule)
    mos = {}
    for edit_id, rec in pivot_mos(mos_table).set_index("item_id").iterrows():
        mos[edit_id] = {"mos_overall": finite_float(rec["mos_overall"])}
        for dim, short in DIMENSION_ABBREVIATIONS.items():
            mos[edit_id].update({f"mos_{short}": finite_float(rec[f"mos_{dim}"]),
                                 f"std_{short}": finite_float(rec[f"std_{dim}"]), f"n_{short}": int(rec[f"n_{dim}"])})
    return mos, report


def _mos_with_overall(mos_rows: dict) -> dict:
    """MOS given in ``mos.csv``, plus the overall score (paper eq. 2)."""
    from ..mos import overall_mos  # deferred: loads pandas

    return {edit_id: dict(rec, mos_overall=float(overall_mos(rec["mos_vq"], rec["mos_if"], rec["mos_ap"])))
            for edit_id, rec in mos_rows.items()}


class MIEBenchBuilder(DatasetBuilder):
    """Validate a raw MIE-Bench release and write it as a Hub-native Parquet dataset.

    Options besides the common ones of :class:`~.base.DatasetBuilder`: ``rule`` (subject screening of
    :func:`modeling_miescore.data.mos.compute_mos`: ``"bt500"`` or ``"paper"``), ``mos_source`` (``"ratings"``,
    ``"mos"`` as given, or ``"auto"``: ratings.csv when present), ``split_method`` (``"stratified"`` or ``"hash"``,
    :mod:`.mie_bench_split`), ``split_file`` (CSV or JSON assigning every instance; replaces ``split_method``) and
    ``split_salt`` (of the instance-id hash; keep the default to reproduce published builds).
    """

    title = "MIE-Bench"
    raw_help = "raw release folder (instances.jsonl, edits.jsonl, ratings.csv or mos.csv, images)"
    default_license = LICENSE
    license_help = ("license id for the card (default: %(default)s: the paper releases images and prompts under "
                    "CC BY 4.0 and its annotations for non-commercial research only)")
    split_names = MIE_SPLITS
    card = mie_bench_card.CARD

    def __init__(self, raw_dir, out_dir, *, rule: str = "bt500", mos_source: str = "auto",
                 split_method: str | None = None, split_file: str | os.PathLike | None = None,
                 split_salt: str = DEFAULT_SPLIT_SALT, **common):
        super().__init__(raw_dir, out_dir, **common)
        from ..mos import RULES  # deferred: loads pandas

        if rule not in RULES:
            raise BuildUsageError(f"unknown screening rule {rule!r}; expected one of {list(RULES)}")
        if mos_source not in MOS_SOURCES:
            raise BuildUsageError(f"mos_source must be 'auto', 'ratings' or 'mos', got {mos_source!r}")
        if split_method is not None and split_method not in SPLIT_METHODS:
            raise BuildUsageError(f"split_method must be one of {', '.join(SPLIT_METHODS)}, got {split_method!r}")
        if split_method is not None and split_file is not None:
            raise BuildUsageError("split_file assigns the splits itself; give split_file or split_method, not both")
        self.rule, self.mos_source, self.split_salt = rule, mos_source, split_salt
        self.split_file = Path(split_file).absolute() if split_file is not None else None
        self.split_method = "file" if split_file is not None else split_method or "stratified"
        self.split_entries: dict | None = None
        self.ratings: dict | None = None
        self.mos_rows: dict | None = None
        self.screening: dict | None = None

    # ------------------------------------------------------------------ read -> validate

    def _source(self) -> str:
        if self.mos_source != "auto":
            return self.mos_source
        return "mos" if (self.raw / "mos.csv").is_file() and not (self.raw / "ratings.csv").is_file() else "ratings"

    def input_paths(self) -> dict:
        return {**super().input_paths(), "split_file": self.split_file}

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        bar = self.progress_bar
        self.instances, self.declared_instances = read_instances(self.raw, problems, images, bar)
        self.edits, declared_edits = read_edits(self.raw, problems, images, self.declared_instances, bar)
        if self.split_file is not None:
            self.split_entries = read_split_file(self.split_file, problems)
        self.source = self._source()
        if self.source == "mos":
            self.mos_rows, self.mos_mentioned = read_mos_csv(self.raw, problems, declared_edits)
            return
        if self.mos_source == "auto" and not (self.raw / "ratings.csv").is_file():
            problems.add("ratings.csv", None,
                         "neither ratings.csv (raw ratings) nor mos.csv (MOS on 0-100) found; add one of them")
            return
        self.ratings = read_ratings(self.raw, problems, declared_edits, bar)
        if (self.raw / "mos.csv").is_file():
            self.warnings.append("both ratings.csv and mos.csv exist; MOS computed from ratings.csv (mos.csv ignored)")

    def validate(self, problems: ProblemCollector) -> None:
        """Every edit has MOS input (ratings in all three dimensions, or a row of ``mos.csv``), and a split file
        names exactly the instances.

        (An unusable ratings, MOS or split file is already reported; nothing to check against it.)
        """
        if self.split_entries is not None:
            self._validate_split_file(problems)
        if self.ratings is not None:
            rated = defaultdict(set)
            for edit_id, dim in zip(self.ratings["item_id"], self.ratings["dimension"]):
                rated[edit_id].add(dim)
            for e in self.edits.values():
                missing = [d for d in DIMENSIONS if d not in rated.get(e.edit_id, ())]
                if missing:
                    problems.add("edits.jsonl", e.line,
                                 f"edit {e.edit_id!r} has no ratings for {', '.join(missing)} in ratings.csv")
        elif self.mos_rows is not None:
            for e in self.edits.values():
                if e.edit_id not in self.mos_mentioned:
                    problems.add("edits.jsonl", e.line, f"edit {e.edit_id!r} has no row in mos.csv")

    def _validate_split_file(self, problems: ProblemCollector) -> None:
        name = self.split_file.name
        for instance_id, (_, line) in self.split_entries.items():
            if instance_id not in self.declared_instances:
                problems.add(name, line, f"unknown instance {instance_id!r} (not in {INSTANCES})")
        for inst in self.instances.values():
            if inst.instance_id not in self.split_entries:
                problems.add(INSTANCES, inst.line, f"instance {inst.instance_id!r} has no split in {name}")

    # ------------------------------------------------------------------ MOS -> split

    def label(self) -> None:
        if self.source == "ratings":
            self.mos, report = _mos_from_ratings(self.ratings, self.rule)
            self.screening = report.to_dict()
            self.warnings += [f"screening: {w}" for w in report.warnings]
        else:
            self.mos = _mos_with_overall(self.mos_rows)

    def _split_of_instances(self, instances: list[Instance]) -> dict[str, str]:
        if self.split_method == "file":
            return {inst.instance_id: self.split_entries[inst.instance_id][0] for inst in instances}
        if self.split_method == "hash":
            return {inst.instance_id: split_of(inst.instance_id, self.split_salt) for inst in instances}
        return stratified_splits({inst.instance_id: inst.task for inst in instances}, self.split_salt)

    def split(self) -> dict[str, list[tuple[Instance, Edit]]]:
        """``(instance, edit)`` rows per split: instances in file order, their edits in file order."""
        edits_by_instance: dict[str, list[Edit]] = defaultdict(list)
        for e in self.edits.values():
            edits_by_instance[e.instance_id].append(e)
        self.rows_by_split = {s: [] for s in MIE_SPLITS}
        self.split_instances: Counter = Counter()
        no_edits = [inst.instance_id for inst in self.instances.values() if inst.instance_id not in edits_by_instance]
        with_edits = [inst for inst in self.instances.values() if inst.instance_id in edits_by_instance]
        split_of_instance = self._split_of_instances(with_edits)
        for inst in with_edits:
            edits = edits_by_instance[inst.instance_id]
            split = split_of_instance[inst.instance_id]
            self.split_instances[split] += 1
            self.rows_by_split[split].extend((inst, e) for e in edits)
        if no_edits:
            shown = ", ".join(no_edits[:10]) + (f", ... ({len(no_edits)} in all)" if len(no_edits) > 10 else "")
            self.warnings.append(f"{len(no_edits)} instance(s) have no edits and give no rows: {shown}")
        self.warnings += small_split_warnings(self.split_instances, len(with_edits))
        return self.rows_by_split

    def empty_dataset_problem(self) -> tuple[str, str]:
        return "edits.jsonl", "no edits: the dataset would be empty"

    # ------------------------------------------------------------------ write -> card

    def features(self, split=None):
        return mie_bench_features()

    def make_row(self, item: tuple[Instance, Edit]) -> dict:
        inst, e = item
        return {
            "id": e.edit_id,
            "instance_id": inst.instance_id,
            "task": TASKS.index(inst.task),
            "category": TASK_CATEGORY[inst.task],
            "instruction": inst.instruction,
            "source_images": [image.struct() for image in inst.sources],
            "num_sources": len(inst.sources),
            "edited_image": e.image.struct(),
            "editing_model": e.editing_model,
            **self.mos[e.edit_id],
        }

    def row_size(self, item: tuple[Instance, Edit]) -> int:
        inst, e = item
        return sum(image.size() for image in (*inst.sources, e.image)) + len(inst.instruction.encode("utf-8")) + 256

    def write_splits(self, folder: Path, rows_by_split: dict) -> dict[str, dict]:
        info = super().write_splits(folder, rows_by_split)
        for split, split_info in info.items():
            split_info["num_instances"] = self.split_instances[split]
        return info

    def card_context(self, split_info: dict[str, dict]) -> dict[str, Any]:
        return mie_bench_card.card_context(self, split_info)

    def write_extra_files(self, folder: Path) -> None:
        if self.screening is not None:  # ScreeningReport.to_dict() is JSON-ready (NaN -> None)
            text = json.dumps(self.screening, indent=2, sort_keys=True, allow_nan=False) + "\n"
            (folder / "screening_report.json").write_text(text, encoding="utf-8")

    def summary(self, split_info: dict[str, dict]) -> MIEBenchSummary:
        keys = ("num_examples", "num_instances", "files", "num_bytes", "file_bytes")
        return MIEBenchSummary(
            out_dir=str(self.out),
            mos_source=self.source,
            split_method=self.split_method,
            splits={k: {kk: v[kk] for kk in keys} for k, v in split_info.items()},
            num_rows=sum(v["num_examples"] for v in split_info.values()),
            num_instances=sum(self.split_instances.values()),
            screening=self.screening,
        )

    # ------------------------------------------------------------------ command line

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rule", choices=("bt500", "paper"), default="bt500",
                            help="subject screening rule (default: %(default)s)")
        parser.add_argument("--mos-source", choices=MOS_SOURCES, default="auto",
                            help="compute MOS from ratings.csv or take mos.csv as given (default: %(default)s)")
        parser.add_argument("--split-method", choices=SPLIT_METHODS, default=None,
                            help="stratified: exactly 3:1:1 train/validation/test within each task (default); hash: "
                                 "a hash of the instance id (adding instances never moves existing ones)")
        parser.add_argument("--split-file", metavar="FILE", type=Path, default=None,
                            help="assign splits from this file instead: CSV instance_id,split or JSON "
                                 "{instance_id: split} (e.g. a release's official split)")
        parser.add_argument("--split-salt", default=DEFAULT_SPLIT_SALT,
                            help="salt of the instance-id hash behind both split methods (default: %(default)s)")


def build_mie_bench(raw_dir: str | os.PathLike, out_dir: str | os.PathLike, **options) -> MIEBenchSummary:
    """Validate a raw MIE-Bench release (``instances.jsonl``, ``edits.jsonl``, ``ratings.csv`` or ``mos.csv``) and
    write it to ``out_dir`` as a Hub-native Parquet dataset. ``options``: :class:`MIEBenchBuilder`'s and the common
    ones of :class:`~.base.DatasetBuilder`; errors as :meth:`~.base.DatasetBuilder.build` raises them."""
    return MIEBenchBuilder(raw_dir, out_dir, **options).build()


__all__ = ["Edit", "Instance", "LICENSE", "MIEBenchBuilder", "MIEBenchSummary", "MOS_SOURCES", "build_mie_bench",
           "mie_bench_features", "read_edits", "read_instances", "read_mos_csv", "read_ratings"]
