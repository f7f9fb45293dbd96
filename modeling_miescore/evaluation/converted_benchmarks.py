"""Converted external benchmarks (``miescore convert-benchmark``) and MER-Bench, as the benchmark runner reads them:
which benchmark a dataset folder is, its rows as metadata frames (images never decoded), and predictions joined
onto them by **edited-image id** (the pointwise ``id``, or a pairwise row's ``edited_a_id`` / ``edited_b_id``).

How a benchmark is scored and which report columns it fills come from its declaration (:func:`declared_benchmarks`),
never from its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..data.converters.schema import HUMAN_COLUMNS, LABELS, SPLIT
from ..data.schema import MER_SPLITS
from ..data.dataset_splits import load_split
from ..data.errors import BenchmarkInputError
from ..data.builders.mer_bench import MERBenchBuilder
from ..data.converters import CONVERTERS
from ..data.converters.converted_card import read_benchmark_metadata
from ..data.dataset_splits import mer_bench_frame
from .prediction_files import Alignment, align_predictions, read_group_predictions, read_score_predictions

__all__ = ["BenchmarkData", "attach_predictions", "attach_scores", "benchmarks_in", "declared_benchmarks", "edit_ids",
           "load_benchmark", "pairwise_frame", "pointwise_frame", "report_columns", "require_report"]


@dataclass
class BenchmarkData:
    """A benchmark dataset opened for evaluation: its name, card metadata, the rows of each config and its
    declaration (``protocol``, ``columns``, ``column_headers``, ``title``: a converter's spec or MER-Bench's
    builder)."""

    dataset: str
    name: str
    metadata: dict
    frames: dict = field(default_factory=dict)  # config -> DataFrame (converted) or split -> Dataset (mer-bench)
    declaration: object = None

    @property
    def protocol(self) -> str:
        return self.declaration.protocol


def declared_benchmarks() -> dict[str, object]:
    """Every benchmark the reports know, by name: the registered converters' specs, then MER-Bench's builder (each
    with ``title``, ``protocol``, ``columns`` and ``column_headers``)."""
    return {**{name: cls.spec for name, cls in CONVERTERS.items()}, "mer-bench": MERBenchBuilder}


def benchmarks_in(report: str) -> list[str]:
    """Names of the declared benchmarks that fill columns of ``report`` (``zero-shot``, ``reward``, ``editors``)."""
    return [name for name, declared in declared_benchmarks().items() if report in declared.columns]


def report_columns(report: str) -> dict[str, dict]:
    """``column key -> {"benchmark", "value", "header"}`` over every benchmark filling ``report``, in registry order
    (``header``: the declaration's own header for the column, or None)."""
    out = {}
    for name, declared in declared_benchmarks().items():
        for column, value in declared.columns.get(report, {}).items():
            out[column] = {"benchmark": name, "value": value, "header": declared.column_headers.get(column)}
    return out


def require_report(data: BenchmarkData, report: str, table: str) -> None:
    """Refuse a benchmark whose declaration fills no column of ``report`` (``zero-shot``: Table 6, ``reward``:
    Table 1), naming the benchmarks that do and the other report's command when the benchmark fills that one."""
    columns = data.declaration.columns
    if report in columns:
        return
    other = next((r for r in ("zero-shot", "reward") if r != report and r in columns), None)
    hint = f"; use 'miescore benchmark {other}' for it" if other else ""
    raise BenchmarkInputError(f"'{data.dataset}' is {data.name}, not a {table} benchmark "
                              f"({', '.join(benchmarks_in(report))}){hint}")


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
    metadata = read_benchmark_metadata(dataset)
    declared = declared_benchmarks()
    if metadata is None:
        if _is_mer_bench(dataset):
            return BenchmarkData(dataset, "mer-bench", {"name": "mer-bench", "kinds": list(MER_SPLITS)},
                                 {s: load_split(dataset, s) for s in MER_SPLITS}, declared["mer-bench"])
        raise BenchmarkInputError(
            f"dataset '{dataset}' is neither a converted benchmark (its README.md has no miescore_benchmark block; "
            "make it with 'miescore convert-benchmark') nor a MER-Bench build (splits 2pair/3pair/4pair)")
    name = str(metadata.get("name"))
    spec = declared.get(name)
    if spec is None:
        raise BenchmarkInputError(f"dataset '{dataset}' is the benchmark {name!r}, which this version does not know "
                                  f"({', '.join(declared)})")
    if getattr(spec, "editor", None) is not None:
        raise BenchmarkInputError(f"dataset '{dataset}' is an editor benchmark ({name}: editing inputs, no edited "
                                  "images or human labels); evaluate an editor on it with 'miescore benchmark "
                                  f"{spec.editor.name}'")
    frames = {}
    for config in metadata.get("kinds", []):
        ds = load_split(dataset, SPLIT, config)
        frames[config] = pointwise_frame(ds) if config == "pointwise" else pairwise_frame(ds)
    return BenchmarkData(dataset, name, metadata, frames, spec)


def edit_ids(frame, config: str) -> list[str]:
    """The edited-image ids a config's rows need scores for, first-seen order."""
    if config == "pointwise":
        return frame["id"].tolist()
    ids = np.column_stack([frame["edited_a_id"].to_numpy(), frame["edited_b_id"].to_numpy()]).ravel()
    return list(dict.fromkeys(str(v) for v in ids))


def attach_predictions(data: BenchmarkData, protocol, predictions_path, *,
                       allow_missing: bool) -> tuple[object, Alignment]:
    """The rows of ``data`` that ``protocol`` (its :class:`~.benchmark_protocols.ScoringProtocol`) scores, with
    the predictions of ``predictions_path`` attached: an ``edit`` protocol's config rows (:func:`attach_scores`),
    or, for a ``group`` protocol (MER-Bench), every K-pair group with a ``scores`` column."""
    source = str(predictions_path)
    if protocol.unit == "group":
        frame = mer_bench_frame(data.frames)
        scores = read_group_predictions(predictions_path, frame)
        alignment = align_predictions(frame["pair_id"].tolist(), scores, allow_missing=allow_missing, source=source,
                                      what="pair id")
        frame = frame[frame["pair_id"].isin(set(scores))].reset_index(drop=True)
        frame["scores"] = [scores[p] for p in frame["pair_id"]]
        return frame, alignment
    return attach_scores(data.frames[protocol.config], protocol.config, data.metadata,
                         read_score_predictions(predictions_path), allow_missing=allow_missing, source=source)


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
