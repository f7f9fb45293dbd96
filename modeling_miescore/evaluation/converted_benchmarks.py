"""Converted external benchmarks (``miescore convert-benchmark``) and MER-Bench, as the benchmark runner reads them:
which benchmark a dataset folder is, its rows as metadata frames (images never decoded), and predictions joined
onto them by edit id.

Prediction files for converted benchmarks are score files keyed by **edited-image id** (the pointwise ``id``, or a
pairwise row's ``edited_a_id`` / ``edited_b_id``): ``{"id": ..., "visual_quality": x, "instruction_following": x,
"attribute_preservation": x, "overall": x}`` per line, the format of ``miescore score-batch`` (any subset of the
keys; a benchmark dimension needs its key). MER-Bench takes its own group predictions (``{"pair_id", "scores"}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..data.converters.schema import HUMAN_COLUMNS, LABELS, SPLIT
from ..data.schema import MER_SPLITS
from .alignment import Alignment, align_predictions
from .dataset_splits import load_split
from .errors import BenchmarkInputError

__all__ = ["BenchmarkData", "attach_scores", "edit_ids", "load_benchmark", "pairwise_frame", "pointwise_frame"]


@dataclass
class BenchmarkData:
    """A benchmark dataset opened for evaluation: its name, card metadata and the rows of each config."""

    dataset: str
    name: str
    metadata: dict
    frames: dict = field(default_factory=dict)  # config -> DataFrame (converted) or split -> Dataset (mer-bench)


def _frame(ds, columns):
    return ds.select_columns([c for c in columns if c in ds.column_names]).to_pandas()


def pointwise_frame(ds):
    """Pointwise rows without images: ``id, editing_model, group_id, subset, human_*``."""
    df = _frame(ds, ["id", "editing_model", "group_id", "subset", *HUMAN_COLUMNS.values()])
    df["id"] = df["id"].astype(str)
    return df


def pairwise_frame(ds):
    """Pairwise rows without images; ``label`` as its name (a / b / tie / both_bad), ``n_sources`` per row."""
    from datasets import Image, List

    df = _frame(ds, ["id", "edited_a_id", "edited_b_id", "label", "dimension", "subset", "group_id", "model_a",
                     "model_b"])
    df["label"] = [LABELS[int(v)] for v in df["label"]]
    raw = ds.select_columns(["source_images"]).cast_column("source_images", List(Image(decode=False)))
    df["n_sources"] = [len(v) for v in raw["source_images"]]
    return df


def _is_mer_bench(dataset: str) -> bool:
    import datasets

    try:
        return set(MER_SPLITS) <= set(datasets.get_dataset_split_names(dataset))
    except Exception:  # noqa: BLE001 - not a loadable dataset: reported by the caller
        return False


def load_benchmark(dataset: str) -> BenchmarkData:
    """Open a converted benchmark (its card names it) or a MER-Bench build (splits 2pair / 3pair / 4pair)."""
    from ..data.converters.converted_card import read_benchmark_metadata

    metadata = read_benchmark_metadata(dataset)
    if metadata is None:
        if _is_mer_bench(dataset):
            return BenchmarkData(dataset, "mer-bench", {"name": "mer-bench", "kinds": list(MER_SPLITS)},
                                 {s: load_split(dataset, s) for s in MER_SPLITS})
        raise BenchmarkInputError(
            f"dataset '{dataset}' is neither a converted benchmark (its README.md has no miescore_benchmark block; "
            "make it with 'miescore convert-benchmark') nor a MER-Bench build (splits 2pair/3pair/4pair)")
    if "editing" in metadata.get("kinds", []):
        raise BenchmarkInputError(f"dataset '{dataset}' is an editor benchmark ({metadata.get('name')}: editing inputs, "
                                  "no edited images or human labels); evaluate an editor on it with 'miescore benchmark "
                                  f"{str(metadata.get('name')).split('-')[0]}'")
    frames = {}
    for config in metadata.get("kinds", []):
        ds = load_split(dataset, SPLIT, config)
        frames[config] = pointwise_frame(ds) if config == "pointwise" else pairwise_frame(ds)
    return BenchmarkData(dataset, str(metadata.get("name")), metadata, frames)


def edit_ids(frame, config: str) -> list[str]:
    """The edited-image ids a config's rows need scores for, first-seen order."""
    if config == "pointwise":
        return frame["id"].tolist()
    ids = np.column_stack([frame["edited_a_id"].to_numpy(), frame["edited_b_id"].to_numpy()]).ravel()
    return list(dict.fromkeys(str(v) for v in ids))


def _needed_keys(frame, config: str, metadata: dict) -> list[str]:
    if config == "pairwise":
        return sorted(set(frame["dimension"]))
    return sorted(set(metadata.get("dimensions", {}).values()))


def attach_scores(frame, config: str, metadata: dict, preds, *, allow_missing: bool,
                  source: str) -> tuple[object, Alignment]:
    """The rows whose edits all have predictions, with ``pred_<key>`` (pointwise) or ``pred_a`` / ``pred_b``
    (pairwise, on each row's dimension) columns; raises on missing ids unless ``allow_missing``."""
    keys = _needed_keys(frame, config, metadata)
    lacking = [k for k in keys if k not in preds.columns]
    if lacking:
        raise BenchmarkInputError(
            f"'{source}' has no {', '.join(lacking)} scores, which {metadata.get('title', metadata.get('name'))} "
            f"needs (its dimensions map to {', '.join(keys)}); add those keys to the predictions")
    has = preds[keys].notna().all(axis=1)
    known = set(preds.index[has])
    alignment = align_predictions(edit_ids(frame, config), list(known), allow_missing=allow_missing,
                                  source=source, what="edited-image id")
    out = frame.copy()
    if config == "pointwise":
        out = out[out["id"].isin(known)].reset_index(drop=True)
        for key in keys:
            out[f"pred_{key}"] = preds.loc[out["id"], key].to_numpy(dtype=np.float64)
        return out, alignment
    out = out[out["edited_a_id"].isin(known) & out["edited_b_id"].isin(known)].reset_index(drop=True)
    scores = {key: preds[key].to_dict() for key in keys}
    out["pred_a"] = [scores[d][a] for d, a in zip(out["dimension"], out["edited_a_id"])]
    out["pred_b"] = [scores[d][b] for d, b in zip(out["dimension"], out["edited_b_id"])]
    return out, alignment
