"""Every edited image of one of the package's datasets as a ``score-batch`` input file: what ``miescore judge``
and ``miescore spatialreward-data`` read when given a dataset instead of a JSONL file.

* MIE-Bench (``id, instance_id, source_images, edited_image, instruction``): one edit per row of the split.
* A converted benchmark (``miescore convert-benchmark``; its card names it; split ``test``): every config of the
  card, the ``pointwise`` rows as they are (``group_id`` shares the sources), each ``pairwise`` row as its two
  edits ``edited_a_id`` / ``edited_b_id`` (an image in several pairs once).
* MER-Bench (splits ``2pair`` / ``3pair`` / ``4pair``, those it has; a missing one is named): each candidate of a group is one single-source edit (id
  ``candidate_ids[k]``; a candidate in several groups once), its ``category`` kept (``general``, ``human_basic``,
  ``human_fine``) and its instruction's ``num_edits`` when the dataset has them (the pipeline then asks the
  grounder for one region per edit).

The images are written once, as their original bytes, by
:func:`modeling_miescore.data.input_export.export_mie_inputs`; rows are flattened with ``datasets.map`` so a
large split never sits in memory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

from ..hub.errors import MIEScoreInputError
from .schema import MER_SPLITS
from .dataset_splits import load_split, split_names
from .converters.converted_card import read_benchmark_metadata
from .converters.schema import SPLIT
from .input_export import export_mie_inputs

__all__ = ["export_dataset_edits"]

_COLUMNS = ("id", "instance_id", "instruction", "source_images", "edited_image", "category", "num_edits")
_HINTS = ("category", "num_edits")  # written into the score-batch lines when a row has them


def _features():
    from datasets import Features, Image, List, Value

    return Features({"id": Value("string"), "instance_id": Value("string"), "instruction": Value("string"),
                     "source_images": List(Image(decode=False)), "edited_image": Image(decode=False),
                     "category": Value("string"), "num_edits": Value("int32")})


def _add(out: dict, *values) -> None:
    """One flattened edit: a value per column of :data:`_COLUMNS`, in that order."""
    for name, value in zip(_COLUMNS, values, strict=True):
        out[name].append(value)


def _flat_pairs(batch) -> dict:
    out = {name: [] for name in _COLUMNS}
    for i in range(len(batch["instruction"])):
        for side in ("a", "b"):
            _add(out, str(batch[f"edited_{side}_id"][i]), str(batch["group_id"][i] or batch["id"][i]),
                 batch["instruction"][i], batch["source_images"][i], batch[f"edited_{side}"][i], "", None)
    return out


def _flat_groups(batch) -> dict:
    out = {name: [] for name in _COLUMNS}
    n = len(batch["instruction"])
    candidate_ids = batch["candidate_ids"] if "candidate_ids" in batch else [None] * n
    samples = batch["sample_id"] if "sample_id" in batch else batch["pair_id"]
    categories = batch["category"] if "category" in batch else [""] * n
    num_edits = batch["num_edits"] if "num_edits" in batch else [None] * n
    for i in range(n):
        edited = batch["edited_images"][i]
        ids = candidate_ids[i] or [f"{batch['pair_id'][i]}-{k}" for k in range(len(edited))]
        for candidate, image in zip(ids, edited):
            _add(out, str(candidate), str(samples[i]), batch["instruction"][i], [batch["original_image"][i]], image,
                 str(categories[i] or ""), num_edits[i])
    return out


def _flat(ds, kind: str):
    """One row per edit with the columns of :func:`_features` (images undecoded), each id once."""
    from datasets import Image, List

    if kind == "pairwise":
        ds = ds.cast_column("edited_a", Image(decode=False)).cast_column("edited_b", Image(decode=False))
        ds = ds.cast_column("source_images", List(Image(decode=False)))
        ds = ds.map(_flat_pairs, batched=True, remove_columns=ds.column_names, features=_features())
    elif kind == "groups":
        ds = ds.cast_column("original_image", Image(decode=False)).cast_column("edited_images",
                                                                               List(Image(decode=False)))
        ds = ds.map(_flat_groups, batched=True, remove_columns=ds.column_names, features=_features())
    elif kind == "pointwise":  # kind "flat": already in this shape (several configs concatenated)
        if "instance_id" not in ds.column_names:
            ds = ds.rename_column("group_id", "instance_id") if "group_id" in ds.column_names \
                else ds.add_column("instance_id", [str(i) for i in ds["id"]])
        ds = (ds.select_columns(list(_COLUMNS[:5])).add_column("category", [""] * len(ds))
              .add_column("num_edits", [None] * len(ds)).cast(_features()))
    seen: set = set()

    def first(edit_id) -> bool:
        if edit_id in seen:
            return False
        seen.add(edit_id)
        return True

    return ds.filter(first, input_columns="id")


def _splits(dataset: str, split: Optional[str]):
    """``[(loaded split, kind)]`` of a dataset (module docstring)."""
    metadata = read_benchmark_metadata(dataset)
    if metadata is not None and "editing" in metadata.get("kinds", []):
        raise MIEScoreInputError(f"dataset '{dataset}' is an editor benchmark (editing inputs, no edited images); "
                                 f"judge an editor's outputs on it with 'miescore benchmark "
                                 f"{str(metadata.get('name')).split('-')[0]} --edits ...'")
    if metadata is not None:
        return [(load_split(dataset, split or SPLIT, config), config) for config in metadata.get("kinds", [])]
    names = split_names(dataset)
    present = [name for name in MER_SPLITS if name in names]
    if present:  # MER-Bench: every K-pair split it has (a release may lack one, as `benchmark mer-bench` allows)
        missing = [name for name in MER_SPLITS if name not in names]
        if missing and split is None:
            print(f"note: MER-Bench dataset '{dataset}' has no {' or '.join(repr(m) for m in missing)} split; "
                  f"using {', '.join(present)}", file=sys.stderr)
        return [(load_split(dataset, name), "groups") for name in ([split] if split else present)]
    return [(load_split(dataset, split or "test"), "pointwise")]


def export_dataset_edits(dataset: str, work_dir, *, split: Optional[str] = None,
                         progress: bool = True) -> Tuple[Path, Dict[str, str]]:
    """Write the dataset's edits into ``work_dir`` (``inputs.jsonl`` + ``images/``); returns the JSONL path and
    the ``category`` of each edit id that has one. ``split``: default ``test`` (MIE-Bench, converted benchmarks)
    or every split (MER-Bench)."""
    from datasets import concatenate_datasets


    parts = []
    for ds, kind in _splits(dataset, split):
        if kind == "pointwise" and not {"source_images", "edited_image"} <= set(ds.column_names):
            raise MIEScoreInputError(f"dataset '{dataset}' has no source_images / edited_image columns: not a "
                                     "MIE-Bench, converted-benchmark or MER-Bench dataset")
        parts.append(_flat(ds, kind))
    if not parts:
        raise MIEScoreInputError(f"dataset '{dataset}' has no edits to export")
    flat = _flat(concatenate_datasets(parts), "flat") if len(parts) > 1 else parts[0]
    categories = {i: c for i, c in zip(flat["id"], flat["category"]) if c}
    return export_mie_inputs(flat, Path(work_dir), progress=progress, hint_columns=_HINTS), categories
