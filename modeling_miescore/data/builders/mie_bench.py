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

Output: ``data/{train,validation,test}-XXXXX-of-YYYYY.parquet`` + ``README.md`` (YAML ``configs`` and
``dataset_info``, statistics generated from the data) + ``screening_report.json``. One row per edited
image; see :data:`COLUMNS` for the columns. ``datasets.load_dataset(out_dir)`` (and
``streaming=True``) needs no loading script.

Paper references (MIEScore paper): 16 tasks in 3 categories ("Editing Tasks Define" in the appendix),
12 editing models (Table 2), three 0-5 rating dimensions and 15 raters per image ("Subjective
Experiment Setup"), BT.500 screening + z-score MOS (eq. 1, "Subjective Data Processing"), overall =
VQ^0.3 IF^0.4 AP^0.3 (eq. 2), and the 3:1:1 train/validation/test split ("Implementation Details").
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..schema import (DIMENSION_ABBREVIATIONS, DIMENSIONS, MIE_CATEGORIES, MIE_SPLITS, MOS_COLUMNS, MOS_RANGE, MOS_SCALE,
                      RATING_RANGE, TASK_CATEGORY, TASKS)
from .common import (
    DEFAULT_MAX_SHARD_BYTES,
    DEFAULT_ROWS_PER_GROUP,
    DatasetValidationError,
    ImageChecker,
    ProblemCollector,
    dataset_card_yaml,
    format_bytes,
    hash_bucket,
    image_struct,
    iter_progress,
    md_table,
    parse_size,
    progress_bar,
    push_folder_to_hub,
    run_build,
    size_arg,
    start_build,
    read_csv,
    read_jsonl,
    size_category,
    write_dataset_card,
    write_json,
    write_parquet_split,
)

__all__ = [
    "DEFAULT_SPLIT_SALT",
    "MIEBenchSummary",
    "add_cli_arguments",
    "build_mie_bench",
    "mie_bench_features",
    "run_cli",
    "split_of",
]

SHORT = DIMENSION_ABBREVIATIONS
_DIM_ALIASES = {
    **{d: d for d in DIMENSIONS},
    **{s: d for d, s in SHORT.items()},
    "visual quality": "visual_quality", "instruction following": "instruction_following",
    "attribute preservation": "attribute_preservation",
}

# "Implementation Details": train/validation/test = 3:1:1, by instance.
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)
DEFAULT_SPLIT_SALT = "mie-bench-v1"

LICENSE = "cc-by-4.0"  # paper, "Ethics Statement": released under CC BY 4.0
CITATION = """@misc{miescore,
  title        = {MIEScore: Human-Aligned Evaluation for Multi-Source Image Editing},
  note         = {MIE-Bench dataset and MIEScore model},
  howpublished = {\\url{https://github.com/IntMeGroup/MIEScore}}
}"""

COLUMNS = {
    "id": "edit id (unique per row)",
    "instance_id": "editing instance (sources + instruction); all its edits are in the same split",
    "task": "one of the 16 MIE-Bench tasks (ClassLabel)",
    "category": "regional / global / reasoning",
    "instruction": "editing instruction",
    "source_images": "the source images, in the order the instruction refers to them",
    "num_sources": "number of source images",
    "edited_image": "the edited image",
    "editing_model": "the model that produced the edit",
    "mos_vq": "MOS, visual quality (0-100, paper eq. 1)",
    "mos_if": "MOS, instruction following (0-100)",
    "mos_ap": "MOS, attribute preservation (0-100)",
    "mos_overall": "VQ^0.3 * IF^0.4 * AP^0.3 (paper eq. 2)",
    "std_vq": "standard deviation of the raters' z-scores on the MOS scale (opinion spread), VQ",
    "std_if": "same, IF",
    "std_ap": "same, AP",
    "n_vq": "valid ratings behind mos_vq (after screening)",
    "n_if": "valid ratings behind mos_if",
    "n_ap": "valid ratings behind mos_ap",
}


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
            "mos_vq": Value("float64"),
            "mos_if": Value("float64"),
            "mos_ap": Value("float64"),
            "mos_overall": Value("float64"),
            "std_vq": Value("float64"),
            "std_if": Value("float64"),
            "std_ap": Value("float64"),
            "n_vq": Value("int32"),
            "n_if": Value("int32"),
            "n_ap": Value("int32"),
        }
    )


def split_of(instance_id: str, salt: str = DEFAULT_SPLIT_SALT) -> str:
    """Split of an instance: a hash bucket of its id alone (3:1:1), so rebuilds and additions never
    move an instance."""
    u = hash_bucket(instance_id, salt)
    if u < SPLIT_FRACTIONS[0]:
        return "train"
    if u < SPLIT_FRACTIONS[0] + SPLIT_FRACTIONS[1]:
        return "validation"
    return "test"


def normalise_task(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return key if key in TASK_CATEGORY else None


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


@dataclass
class MIEBenchSummary:
    """What a build produced. ``to_dict()`` is JSON-serialisable."""

    out_dir: str
    mos_source: str
    splits: dict = field(default_factory=dict)  # name -> {num_examples, num_instances, files, ...}
    num_rows: int = 0
    num_instances: int = 0
    total_bytes: int = 0
    screening: dict | None = None
    warnings: list = field(default_factory=list)
    hub_url: str | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "dataset": "mie-bench",
            "out_dir": self.out_dir,
            "mos_source": self.mos_source,
            "splits": self.splits,
            "num_rows": self.num_rows,
            "num_instances": self.num_instances,
            "total_bytes": self.total_bytes,
            "screening": self.screening,
            "warnings": list(self.warnings),
            "hub_url": self.hub_url,
            "elapsed_s": self.elapsed_s,
        }

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v['num_examples']}" for k, v in self.splits.items())
        lines = [
            f"MIE-Bench written to {self.out_dir}: {self.num_rows} rows from {self.num_instances} instances "
            f"({parts}); {format_bytes(self.total_bytes)} in {self.elapsed_s:.1f} s"
        ]
        if self.screening:
            rej = self.screening.get("rejected_subjects", [])
            lines.append(
                f"screening ({self.screening.get('rule')}): {len(rej)} subject(s) rejected {rej}, "
                f"{100 * self.screening.get('removed_fraction', 0):.2f}% of ratings removed"
            )
        lines += [f"warning: {w}" for w in self.warnings]
        if self.hub_url:
            lines.append(f"pushed to {self.hub_url}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Reading and validation
# --------------------------------------------------------------------------------------------


@dataclass
class _Instance:
    instance_id: str
    task: str
    instruction: str
    sources: list  # [(rel, Path)]
    line: int


@dataclass
class _Edit:
    edit_id: str
    instance_id: str
    editing_model: str
    image: tuple  # (rel, Path)
    line: int


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _read_instances(raw: Path, pc: ProblemCollector, images: ImageChecker, progress: bool):
    fname = "instances.jsonl"
    entries = read_jsonl(raw / fname, pc, required=("instance_id", "task", "instruction", "sources"))
    declared: set[str] = set()
    first_line: dict[str, int] = {}
    out: dict[str, _Instance] = {}
    for line, obj in iter_progress(entries, "checking instances", progress):
        ok = True
        iid = obj["instance_id"]
        if not _nonempty_str(iid):
            pc.add(fname, line, f"instance_id must be a non-empty string, got {iid!r}")
            continue
        declared.add(iid)
        if iid in first_line:
            pc.add(fname, line, f"duplicate instance_id {iid!r} (first on line {first_line[iid]})")
            continue
        first_line[iid] = line
        task = normalise_task(obj["task"])
        if task is None:
            pc.add(fname, line, f"unknown task {obj['task']!r} for instance {iid!r}; expected one of: {', '.join(TASKS)}")
            ok = False
        instr = obj["instruction"]
        if not _nonempty_str(instr):
            pc.add(fname, line, f"instance {iid!r}: instruction must be a non-empty string")
            ok = False
        sources = obj["sources"]
        resolved = []
        if isinstance(sources, str):
            sources = [sources]
        if not isinstance(sources, list):
            pc.add(fname, line, f"instance {iid!r}: 'sources' must be a list of image paths, got {type(sources).__name__}")
            ok = False
        elif not sources:
            pc.add(fname, line, f"instance {iid!r} has no sources (an MIE instance needs at least one source image)")
            ok = False
        else:
            for j, rel in enumerate(sources, start=1):
                path, err = images(rel)
                if err:
                    pc.add(fname, line, f"instance {iid!r}, source {j}: {err}")
                    ok = False
                else:
                    resolved.append((rel, path))
        if ok:
            out[iid] = _Instance(iid, task, instr, resolved, line)
    return out, declared


def _read_edits(raw: Path, pc: ProblemCollector, images: ImageChecker, declared_instances: set, progress: bool):
    fname = "edits.jsonl"
    entries = read_jsonl(raw / fname, pc, required=("edit_id", "instance_id", "editing_model", "image"))
    declared: set[str] = set()
    first_line: dict[str, int] = {}
    out: dict[str, _Edit] = {}
    for line, obj in iter_progress(entries, "checking edits", progress):
        ok = True
        eid = obj["edit_id"]
        if not _nonempty_str(eid):
            pc.add(fname, line, f"edit_id must be a non-empty string, got {eid!r}")
            continue
        declared.add(eid)
        if eid in first_line:
            pc.add(fname, line, f"duplicate edit_id {eid!r} (first on line {first_line[eid]})")
            continue
        first_line[eid] = line
        iid = obj["instance_id"]
        if not isinstance(iid, str) or iid not in declared_instances:
            pc.add(fname, line, f"edit {eid!r} points to unknown instance_id {iid!r} (not in instances.jsonl)")
            ok = False
        model = obj["editing_model"]
        if not _nonempty_str(model):
            pc.add(fname, line, f"edit {eid!r}: editing_model must be a non-empty string")
            ok = False
        path, err = images(obj["image"])
        if err:
            pc.add(fname, line, f"edit {eid!r}: {err}")
            ok = False
        if ok:
            out[eid] = _Edit(eid, iid, model.strip(), (obj["image"], path), line)
    return out, declared


def _parse_float(text: str) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _read_ratings(raw: Path, pc: ProblemCollector, declared_edits: set, progress: bool):
    fname = "ratings.csv"
    rows = read_csv(raw / fname, pc, required=("subject_id", "edit_id", "dimension", "rating"))
    if rows is None:
        return None
    seen: dict[tuple, int] = {}
    subj, item, dim, val = [], [], [], []
    lo, hi = RATING_RANGE
    for line, row in iter_progress(rows, "checking ratings", progress):
        ok = True
        s, e, d, r = row["subject_id"], row["edit_id"], row["dimension"], row["rating"]
        if not s:
            pc.add(fname, line, "empty subject_id")
            ok = False
        if e not in declared_edits:
            pc.add(fname, line, f"rating for unknown edit_id {e!r} (not in edits.jsonl)")
            ok = False
        dn = _DIM_ALIASES.get(d.strip().lower())
        if dn is None:
            pc.add(fname, line, f"unknown dimension {d!r}; expected one of: {', '.join(DIMENSIONS)}")
            ok = False
        v = _parse_float(r)
        if v is None:
            pc.add(fname, line, f"rating {r!r} is not a number")
            ok = False
        elif not lo <= v <= hi:
            pc.add(fname, line, f"rating {v:g} out of range [{lo:g}, {hi:g}]")
            ok = False
        if ok:
            key = (s, e, dn)
            if key in seen:
                pc.add(fname, line, f"duplicate rating of edit {e!r} ({dn}) by subject {s!r} (first on line {seen[key]})")
                continue
            seen[key] = line
            subj.append(s)
            item.append(e)
            dim.append(dn)
            val.append(v)
    return {"subject_id": subj, "item_id": item, "dimension": dim, "rating": val}


def _read_mos_csv(raw: Path, pc: ProblemCollector, declared_edits: set):
    fname = "mos.csv"
    rows = read_csv(raw / fname, pc, required=("edit_id", "mos_vq", "mos_if", "mos_ap"))
    if rows is None:
        return None, set()
    out: dict[str, dict] = {}
    first: dict[str, int] = {}
    lo, hi = MOS_RANGE
    for line, row in rows:
        ok = True
        e = row["edit_id"]
        if e not in declared_edits:
            pc.add(fname, line, f"MOS for unknown edit_id {e!r} (not in edits.jsonl)")
            ok = False
        if e in first:
            pc.add(fname, line, f"duplicate edit_id {e!r} (first on line {first[e]})")
            continue
        rec: dict[str, Any] = {}
        for s in ("vq", "if", "ap"):
            v = _parse_float(row[f"mos_{s}"])
            if v is None:
                pc.add(fname, line, f"mos_{s} {row[f'mos_{s}']!r} is not a number")
                ok = False
            elif not lo <= v <= hi:
                pc.add(fname, line, f"mos_{s} {v:g} out of range [{lo:g}, {hi:g}]")
                ok = False
            rec[f"mos_{s}"] = v
            std_text = row.get(f"std_{s}", "")
            if std_text:
                sv = _parse_float(std_text)
                if sv is None or sv < 0:
                    pc.add(fname, line, f"std_{s} {std_text!r} must be a non-negative number or empty")
                    ok = False
                rec[f"std_{s}"] = sv
            else:
                rec[f"std_{s}"] = None
            n_text = row.get(f"n_{s}", "")
            if n_text:
                nv = _parse_float(n_text)
                if nv is None or nv < 0 or nv != int(nv):
                    pc.add(fname, line, f"n_{s} {n_text!r} must be a non-negative integer or empty")
                    ok = False
                    nv = None
                rec[f"n_{s}"] = int(nv) if nv is not None else None
            else:
                rec[f"n_{s}"] = None
        first[e] = line
        if ok:
            out[e] = rec
    return out, set(first)


def _choose_mos_source(raw: Path, mos_source: str) -> str:
    if mos_source not in ("auto", "ratings", "mos"):
        raise ValueError(f"mos_source must be 'auto', 'ratings' or 'mos', got {mos_source!r}")
    if mos_source != "auto":
        return mos_source
    return "mos" if (raw / "mos.csv").is_file() and not (raw / "ratings.csv").is_file() else "ratings"


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


def build_mie_bench(
    raw_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    max_shard_bytes: int | str = DEFAULT_MAX_SHARD_BYTES,
    rule: str = "bt500",
    mos_source: str = "auto",
    split_salt: str = DEFAULT_SPLIT_SALT,
    license: str = LICENSE,
    rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
    max_image_pixels: int | None = None,
    push_to_hub: str | None = None,
    private: bool | None = None,
    token: str | None = None,
    progress: bool = True,
) -> MIEBenchSummary:
    """Validate a raw MIE-Bench release and write it as a Hub-native Parquet dataset.

    Args:
        raw_dir: folder with ``instances.jsonl``, ``edits.jsonl`` and ``ratings.csv`` (or ``mos.csv``).
        out_dir: output folder; written atomically (temporary folder beside it, then renamed).
        overwrite: replace an existing non-empty ``out_dir``.
        max_shard_bytes: upper bound of a Parquet shard (estimated from image file sizes), an int or
            a string such as ``"256MB"``.
        rule: subject-screening rule passed to :func:`modeling_miescore.data.mos.compute_mos`
            (``"bt500"`` or ``"paper"``).
        mos_source: ``"ratings"`` (raw ratings -> screening -> MOS), ``"mos"`` (``mos.csv`` as given)
            or ``"auto"`` (``ratings.csv`` when present, else ``mos.csv``).
        split_salt: salt of the instance-id hash that assigns splits. Keep the default to stay
            compatible with published splits.
        license: card license id.
        push_to_hub: ``"user/name"``: after the local build succeeds, upload the folder as one commit.
        progress: show tqdm bars on stderr.

    Returns:
        :class:`MIEBenchSummary`.

    Raises:
        DatasetValidationError: the raw release has problems; ``.problems`` lists every one with
            file and line. Nothing is written.
        OutputExistsError: ``out_dir`` exists and ``overwrite`` is false (checked before any work).
        HubPushError: ``push_to_hub`` is impossible (offline, bad id) — checked before building —
            or the upload failed (the local dataset is then complete).
    """
    t0 = time.perf_counter()
    raw = Path(raw_dir).absolute()
    out = Path(out_dir).absolute()
    max_shard = parse_size(max_shard_bytes)
    if rows_per_group < 1:
        raise ValueError(f"rows_per_group must be >= 1, got {rows_per_group}")
    from ..mos import RULES

    if rule not in RULES:
        raise ValueError(f"unknown screening rule {rule!r}; expected one of {list(RULES)}")
    atomic = start_build(raw, out, overwrite, push_to_hub)

    # ---- 1. read and validate everything, collecting every problem ----
    pc = ProblemCollector(raw)
    images = ImageChecker(raw, max_image_pixels)
    instances, declared_instances = _read_instances(raw, pc, images, progress)
    edits, declared_edits = _read_edits(raw, pc, images, declared_instances, progress)
    source = _choose_mos_source(raw, mos_source)
    warnings_: list[str] = []
    if source == "ratings" and mos_source == "auto" and not (raw / "ratings.csv").is_file():
        pc.add("ratings.csv", None, "neither ratings.csv (raw ratings) nor mos.csv (MOS on 0-100) found; add one of them")
        ratings = None
    elif source == "ratings":
        ratings = _read_ratings(raw, pc, declared_edits, progress)
        if ratings is not None:  # (an unusable file is already reported)
            have = defaultdict(set)
            for e, d in zip(ratings["item_id"], ratings["dimension"]):
                have[e].add(d)
            for e in edits.values():
                missing = [d for d in DIMENSIONS if d not in have.get(e.edit_id, ())]
                if missing:
                    pc.add("edits.jsonl", e.line, f"edit {e.edit_id!r} has no ratings for {', '.join(missing)} in ratings.csv")
        if (raw / "mos.csv").is_file():
            warnings_.append("both ratings.csv and mos.csv exist; MOS computed from ratings.csv (mos.csv ignored)")
    else:
        mos_rows, mentioned = _read_mos_csv(raw, pc, declared_edits)
        if mos_rows is not None:
            for e in edits.values():
                if e.edit_id not in mentioned:
                    pc.add("edits.jsonl", e.line, f"edit {e.edit_id!r} has no row in mos.csv")
    pc.raise_if_any()

    # ---- 2. MOS ----
    screening = None
    if source == "ratings":
        import pandas as pd

        from ..mos import compute_mos, pivot_mos

        mos_table, report = compute_mos(pd.DataFrame(ratings), rule=rule)
        wide = pivot_mos(mos_table).set_index("item_id")
        screening = report.to_dict()
        warnings_ += [f"screening: {w}" for w in report.warnings]
        mos = {}
        for eid, rec in wide.iterrows():
            mos[eid] = {
                **{f"mos_{SHORT[d]}": _f(rec[f"mos_{d}"]) for d in DIMENSIONS},
                **{f"std_{SHORT[d]}": _f(rec[f"std_{d}"]) for d in DIMENSIONS},
                **{f"n_{SHORT[d]}": int(rec[f"n_{d}"]) for d in DIMENSIONS},
                "mos_overall": _f(rec["mos_overall"]),
            }
    else:
        from ..mos import overall_mos

        mos = {}
        for eid, rec in mos_rows.items():
            mos[eid] = dict(rec, mos_overall=float(overall_mos(rec["mos_vq"], rec["mos_if"], rec["mos_ap"])))

    # ---- 3. rows, grouped by split (instances in file order, edits in file order) ----
    edits_by_instance: dict[str, list[_Edit]] = defaultdict(list)
    for e in edits.values():
        edits_by_instance[e.instance_id].append(e)
    split_rows: dict[str, list[tuple[_Instance, _Edit]]] = {s: [] for s in MIE_SPLITS}
    split_instances: dict[str, int] = Counter()
    no_edits = []
    for inst in instances.values():
        es = edits_by_instance.get(inst.instance_id, [])
        if not es:
            no_edits.append(inst.instance_id)
            continue
        sp = split_of(inst.instance_id, split_salt)
        split_instances[sp] += 1
        split_rows[sp].extend((inst, e) for e in es)
    if no_edits:
        warnings_.append(f"{len(no_edits)} instance(s) have no edits and give no rows: {_short_list(no_edits)}")
    n_rows = sum(len(v) for v in split_rows.values())
    if n_rows == 0:
        raise DatasetValidationError(
            [_problem("edits.jsonl", None, "no edits: the dataset would be empty")], source=raw
        )

    features = mie_bench_features()
    task_index = {t: i for i, t in enumerate(TASKS)}

    def make_row(pair) -> dict:
        inst, e = pair
        m = mos[e.edit_id]
        return {
            "id": e.edit_id,
            "instance_id": inst.instance_id,
            "task": task_index[inst.task],
            "category": TASK_CATEGORY[inst.task],
            "instruction": inst.instruction,
            "source_images": [image_struct(p, rel) for rel, p in inst.sources],
            "num_sources": len(inst.sources),
            "edited_image": image_struct(e.image[1], e.image[0]),
            "editing_model": e.editing_model,
            **{k: m[k] for k in ("mos_vq", "mos_if", "mos_ap", "mos_overall", "std_vq", "std_if", "std_ap",
                                 "n_vq", "n_if", "n_ap")},
        }

    def row_size(pair) -> int:
        inst, e = pair
        return (
            sum(_file_size(p) for _, p in inst.sources)
            + _file_size(e.image[1])
            + len(inst.instruction.encode("utf-8"))
            + 256
        )

    # ---- 4. write atomically ----
    split_info: dict[str, dict] = {}
    with atomic as tmp:
        bar = progress_bar(n_rows, "writing MIE-Bench", progress)
        try:
            for sp in MIE_SPLITS:
                rows = split_rows[sp]
                if not rows:
                    continue
                info = write_parquet_split(
                    tmp, sp, len(rows), [row_size(r) for r in rows], lambda i, rows=rows: make_row(rows[i]),
                    features, max_shard_bytes=max_shard, rows_per_group=rows_per_group, progress=bar,
                )
                info["num_instances"] = split_instances[sp]
                info["pattern"] = f"data/{sp}-*.parquet"
                split_info[sp] = info
        finally:
            bar.close()
        stats = _collect_stats(split_rows, mos)
        header = dataset_card_yaml(
            configs=[{"config_name": "default", "default": True, "features": features, "splits": split_info}],
            license=license,
            pretty_name="MIE-Bench",
            task_categories=["image-to-image", "visual-question-answering"],
            tags=["image-editing", "image-quality-assessment", "multi-source-image-editing", "mos", "miescore"],
            size_categories=size_category(n_rows),
        )
        body = _card_body(split_info, stats, screening, source, rule, split_salt, max_shard, warnings_, license)
        write_dataset_card(tmp, header, body)
        if screening is not None:
            write_json(tmp / "screening_report.json", screening)
        total = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())

    summary = MIEBenchSummary(
        out_dir=str(out),
        mos_source=source,
        splits={
            k: {kk: v[kk] for kk in ("num_examples", "num_instances", "files", "num_bytes", "file_bytes")}
            for k, v in split_info.items()
        },
        num_rows=n_rows,
        num_instances=sum(split_instances.values()),
        total_bytes=total,
        screening=screening,
        warnings=warnings_,
    )
    if push_to_hub:
        summary.hub_url = push_folder_to_hub(out, push_to_hub, private=private, token=token,
                                             commit_message="Upload MIE-Bench (built with miescore)")
    summary.elapsed_s = time.perf_counter() - t0
    return summary


def _problem(file, line, message):
    from .common import Problem

    return Problem(file, line, message)


def _f(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _file_size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _short_list(items, n: int = 10) -> str:
    items = list(items)
    s = ", ".join(map(str, items[:n]))
    return s + (f", ... ({len(items)} in all)" if len(items) > n else "")


# --------------------------------------------------------------------------------------------
# Dataset card
# --------------------------------------------------------------------------------------------


def _collect_stats(split_rows, mos) -> dict:
    per_task = defaultdict(lambda: {"instances": set(), "edits": 0})
    per_model = defaultdict(lambda: defaultdict(list))
    per_nsrc = defaultdict(lambda: {"instances": set(), "edits": 0})
    dims = defaultdict(list)
    n_counts = defaultdict(list)
    for sp, rows in split_rows.items():
        for inst, e in rows:
            m = mos[e.edit_id]
            per_task[inst.task]["instances"].add(inst.instance_id)
            per_task[inst.task]["edits"] += 1
            k = len(inst.sources)
            per_nsrc[k]["instances"].add(inst.instance_id)
            per_nsrc[k]["edits"] += 1
            for key in ("mos_vq", "mos_if", "mos_ap", "mos_overall"):
                if m[key] is not None:
                    per_model[e.editing_model][key].append(m[key])
                    dims[key].append(m[key])
            per_model[e.editing_model]["count"].append(1)
            for s in ("vq", "if", "ap"):
                if m[f"n_{s}"] is not None:
                    n_counts[s].append(m[f"n_{s}"])
    return {"task": per_task, "model": per_model, "nsrc": per_nsrc, "dims": dims, "n": n_counts}


def _fmt(v, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _quantiles(xs):
    import numpy as np

    if not xs:
        return [None] * 7
    a = np.asarray(xs, dtype=float)
    return [float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else None, float(a.min()),
            *[float(q) for q in np.quantile(a, [0.25, 0.5, 0.75])], float(a.max())]


def _card_body(split_info, stats, screening, source, rule, salt, max_shard, warnings_, license) -> str:
    n_rows = sum(v["num_examples"] for v in split_info.values())
    n_inst = sum(v["num_instances"] for v in split_info.values())
    models = sorted(stats["model"])
    out = []
    out.append("# MIE-Bench\n")
    out.append(
        "Multi-source image editing (MIE) benchmark with human mean opinion scores (MOS) on three dimensions: "
        "visual quality (VQ), instruction following (IF) and attribute preservation (AP), from the MIEScore "
        "paper. One row per edited image: the instance's source images and instruction, the edited image, the "
        "editing model and the three MOS (0–100) plus the overall score.\n"
    )
    out.append(
        f"This build: **{n_rows} edited images** from **{n_inst} instances**, **{len(models)} editing models**, "
        f"**{len(stats['task'])} of 16 tasks**. This card is generated from the data by "
        "`miescore build-dataset mie-bench` (`modeling_miescore.data.builders.mie_bench`).\n"
    )
    out.append("## Usage\n")
    out.append(
        "```python\nfrom datasets import load_dataset\n\n"
        "ds = load_dataset(\"path/or/repo\")          # DatasetDict: train / validation / test\n"
        "row = ds[\"test\"][0]\n"
        "row[\"source_images\"]   # list of PIL images\n"
        "row[\"edited_image\"]    # PIL image\n"
        "ds[\"test\"].features[\"task\"].int2str(row[\"task\"])\n"
        "stream = load_dataset(\"path/or/repo\", split=\"train\", streaming=True)\n```\n"
    )
    out.append("## Splits\n")
    out.append(
        "Train/validation/test = 3:1:1 **by instance** (paper, implementation details): all edits of an instance "
        f"are in one split. The split is a hash bucket of the instance id alone (`sha256(\"{salt}:\" + instance_id)`, "
        "first 8 bytes as a fraction: < 0.6 train, < 0.8 validation, else test), so a rebuild gives the same "
        "splits and adding instances never moves existing ones.\n"
    )
    out.append(md_table(
        ["split", "instances", "edited images", "shards", "Parquet size"],
        [[k, v["num_instances"], v["num_examples"], len(v["files"]), format_bytes(v["file_bytes"])]
         for k, v in split_info.items()],
    ) + "\n")
    out.append("## Columns\n")
    out.append(md_table(["column", "description"], [[f"`{k}`", v] for k, v in COLUMNS.items()]) + "\n")
    out.append(
        "Images are stored as the original files' bytes (no re-encoding); `path` holds the path in the raw "
        "release.\n"
    )

    out.append("## Counts per task\n")
    rows = []
    for t in TASKS:
        if t in stats["task"]:
            d = stats["task"][t]
            rows.append([t, TASK_CATEGORY[t], len(d["instances"]), d["edits"]])
    out.append(md_table(["task", "category", "instances", "edited images"], rows) + "\n")
    cat_rows = []
    for c in MIE_CATEGORIES:
        ts = [t for t in TASKS if TASK_CATEGORY[t] == c and t in stats["task"]]
        cat_rows.append([c, sum(len(stats["task"][t]["instances"]) for t in ts), sum(stats["task"][t]["edits"] for t in ts)])
    out.append(md_table(["category", "instances", "edited images"], cat_rows) + "\n")

    out.append("## Counts and mean MOS per editing model (best overall first)\n")
    out.append(md_table(
        ["editing model", "edited images", "MOS VQ", "MOS IF", "MOS AP", "overall"],
        [[m, len(stats["model"][m]["count"])] + [_fmt(_mean(stats["model"][m][k])) for k in ("mos_vq", "mos_if", "mos_ap", "mos_overall")]
         for m in sorted(models, key=lambda m: (-(_mean(stats["model"][m]["mos_overall"]) or 0.0), m))],
    ) + "\n")

    out.append("## Counts per number of source images\n")
    out.append(md_table(
        ["sources", "instances", "edited images"],
        [[k, len(v["instances"]), v["edits"]] for k, v in sorted(stats["nsrc"].items())],
    ) + "\n")

    out.append("## MOS summary\n")
    names = {"mos_vq": "visual quality", "mos_if": "instruction following", "mos_ap": "attribute preservation",
             "mos_overall": "overall"}
    out.append(md_table(
        ["dimension", "mean", "std", "min", "25%", "median", "75%", "max"],
        [[names[k]] + [_fmt(v) for v in _quantiles(stats["dims"][k])] for k in names],
    ) + "\n")
    if source == "ratings":
        out.append(
            "MOS computation (paper, \"Subjective Data Processing\", eq. 1): outlier ratings and unreliable subjects "
            f"are removed by ITU-R BT.500 screening (rule `{rule}`), the remaining ratings are z-scored per subject "
            "and dimension, averaged per image and mapped to MOS = 100 (z + 3) / 6. Overall = VQ^0.3 · IF^0.4 · AP^0.3 "
            "(eq. 2). `std_*` is the spread of the raters' z-scores on the same scale; `n_*` counts the valid ratings.\n"
        )
        if stats["n"]:
            out.append(
                "Valid ratings per image (mean): "
                + ", ".join(f"{s.upper()} {_fmt(_mean(v), 1)}" for s, v in stats["n"].items()) + ".\n"
            )
    else:
        out.append(
            "MOS were taken as given from `mos.csv` (already on the 0–100 scale); overall = VQ^0.3 · IF^0.4 · AP^0.3 "
            "(paper eq. 2). No screening report (no raw ratings).\n"
        )

    if screening is not None:
        out.append("## Screening report\n")
        rej = screening["rejected_subjects"]
        subj = screening["subject_stats"]
        out.append(
            f"Rule `{screening['rule']}` (ITU-R BT.500 Annex 2 §2.3.1"
            + ("; reject when more than 5% of a subject's ratings are outliers and they are symmetric"
               if screening["rule"] == "bt500" else "; reject when more than 5% of a subject's ratings are outliers")
            + f"). {screening['n_ratings']} ratings from {len(subj)} subjects; "
            f"{screening['n_outliers']} outlier ratings ({100 * screening['outlier_fraction']:.2f}%); "
            f"{len(rej)} subject(s) rejected"
            + (f" ({', '.join(map(str, rej))})" if rej else "")
            + f"; {screening['n_removed']} ratings removed in all ({100 * screening['removed_fraction']:.2f}%). "
            "Full report: `screening_report.json`.\n"
        )
        shown = subj[:100]
        out.append(md_table(
            ["subject", "ratings", "P", "Q", "(P+Q)/n", "|P−Q|/(P+Q)", "rejected"],
            [[s["subject"], s["n"], s["P"], s["Q"], _fmt(s["ratio"], 3), _fmt(s["asymmetry"], 2),
              "yes" if s["rejected"] else ""] for s in shown],
        ) + "\n")
        if len(subj) > len(shown):
            out.append(f"({len(subj) - len(shown)} more subjects in `screening_report.json`.)\n")
        for w in screening.get("warnings", []):
            out.append(f"> Warning: {w}\n")
    if warnings_:
        out.append("## Build notes\n")
        out += [f"- {w}" for w in warnings_]
        out.append("")

    out.append("## Raw layout this dataset was built from\n")
    out.append(
        "```text\n"
        "instances.jsonl  {\"instance_id\", \"task\", \"instruction\", \"sources\": [relative image paths]}\n"
        "edits.jsonl      {\"edit_id\", \"instance_id\", \"editing_model\", \"image\": relative image path}\n"
        "ratings.csv      subject_id,edit_id,dimension,rating   (dimension: visual_quality |\n"
        "                 instruction_following | attribute_preservation; rating in [0, 5])\n"
        "  or mos.csv     edit_id,mos_vq,mos_if,mos_ap[,std_*,n_*]   (already 0-100)\n"
        "```\n"
        f"Rebuild: `miescore build-dataset mie-bench --raw RAW --out OUT` "
        f"(or `python dataset_scripts/mie_bench.py --raw RAW --out OUT`); shards are at most "
        f"{format_bytes(max_shard)} (`--max-shard-bytes`). Builds are deterministic: the same raw release gives "
        "byte-identical files (with the same pyarrow version, which is recorded in the Parquet footer).\n"
    )
    out.append("## License\n")
    out.append(
        f"`{license}`. The MIEScore paper releases MIE-Bench (edited images, prompts and source images) under "
        "CC BY 4.0; annotators consented to use of their annotations for non-commercial research.\n"
    )
    out.append("## Citation\n")
    out.append("```bibtex\n" + CITATION + "\n```\n")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def add_cli_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the MIE-Bench builder options to ``parser`` (used by ``miescore build-dataset mie-bench``)."""
    parser.add_argument("--raw", required=True, type=Path, help="raw release folder (instances.jsonl, edits.jsonl, ratings.csv or mos.csv, images)")
    parser.add_argument("--out", required=True, type=Path, help="output dataset folder (written atomically)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    parser.add_argument("--max-shard-bytes", type=size_arg, default=DEFAULT_MAX_SHARD_BYTES,
                        help="maximum Parquet shard size, e.g. 256MB (default: %(default)s bytes)")
    parser.add_argument("--rule", choices=("bt500", "paper"), default="bt500", help="subject screening rule (default: %(default)s)")
    parser.add_argument("--mos-source", choices=("auto", "ratings", "mos"), default="auto",
                        help="compute MOS from ratings.csv or take mos.csv as given (default: %(default)s)")
    parser.add_argument("--split-salt", default=DEFAULT_SPLIT_SALT, help="salt of the instance-id split hash (default: %(default)s)")
    parser.add_argument("--license", default=LICENSE, help="license id for the card (default: %(default)s)")
    parser.add_argument("--push-to-hub", metavar="REPO", default=None, help="after building, upload to this Hub dataset repo (one commit)")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def run_cli(args: argparse.Namespace) -> int:
    """Run a build from parsed arguments; print a summary (stdout) or a clear error (stderr); return the exit code."""
    return run_build(lambda: build_mie_bench(
        args.raw, args.out, overwrite=args.overwrite, max_shard_bytes=args.max_shard_bytes, rule=args.rule,
        mos_source=args.mos_source, split_salt=args.split_salt, license=args.license,
        push_to_hub=args.push_to_hub, private=True if args.private else None, progress=not args.no_progress,
    ))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mie_bench", description="Build the MIE-Bench Parquet dataset from a raw release.")
    add_cli_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
