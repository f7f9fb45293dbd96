"""Benchmark an evaluator (or editing models) on MIE-Bench / MER-Bench: load, align, compute the report data.

Three reports, each a plain JSON-serialisable dict that :mod:`modeling_miescore.evaluation.report` renders as Markdown and
:mod:`modeling_miescore.evaluation.plots` draws:

* :func:`mie_bench_report`: how human-aligned is an evaluator? SRCC/KRCC/PLCC per dimension (MIEScore paper,
  table 3), SRCC per task and category (tables 12-15), the editing-model leaderboard human vs predicted with
  ranks and "SRCC to human" (table 4), and the MOS distributions (figure 2).
* :func:`mer_bench_report`: K-pair group accuracy (2-P / 3-P / 4-P / overall) and Kendall tau, overall and per
  category (SpatialReward paper, tables 1-2; MER-Bench definitions in :mod:`modeling_miescore.evaluation.metrics`).
* :func:`editing_models_report`: how good are editing models, judged by predicted scores? Mean predicted
  VQ/IF/AP/overall per editing model and task (layout of the MIEScore paper's tables 8-11).

Every metric comes from :mod:`modeling_miescore.evaluation.metrics`; this module only selects, aligns and resamples.
Headline numbers carry percentile-bootstrap confidence intervals that resample whole *instances* (the 12 edits
of one MIE-Bench instance, the groups of one MER-Bench sample), because edits of one instance share sources and
instruction and are not independent. All sections use the same seed, so they see the same resamples.

Predictions files (JSON Lines, one object per line):

* MIE-Bench / editing models: ``{"id": <dataset id>, "visual_quality": x, "instruction_following": x,
  "attribute_preservation": x, "overall": x}`` (the output of ``miescore score-batch``). Any subset of the
  four score keys works; a missing ``overall`` is computed from the three dimensions with the paper's eq. 2.
  ``null`` means "no prediction" for that item.
* MER-Bench: ``{"pair_id": <dataset pair_id>, "scores": [s_1, ..., s_K]}`` with one score per edited image in
  the dataset's order (best first); higher = better; ``null`` entries (e.g. a failed parse) count as wrong.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..scoring.jsonl_scoring import iter_input
from ..image_io import MIEScoreInputError
from ..data.schema import (LONG_NAMES, MER_CATEGORY_LABELS, MIE_CATEGORIES, MOS_COLUMN_OF, SCORE_KEYS, SHORT_NAMES,
                           TASK_CATEGORY, TASKS)
from .metrics import (
    CI,
    MetricWarning,
    bootstrap_ci,
    correlations,
    fit_logistic,
    group_accuracy,
    kendall_tau_groups,
    model_ranking_srcc,
    per_model_means,
    srcc,
)

__all__ = [
    "Alignment",
    "BenchmarkInputError",
    "PredictionMismatchError",
    "align_predictions",
    "editing_models_report",
    "load_split",
    "mer_bench_frame",
    "mer_bench_report",
    "mie_bench_frame",
    "mie_bench_report",
    "read_group_predictions",
    "read_score_predictions",
]

_IMAGE_COLUMNS = ("source_images", "edited_image", "original_image", "edited_images")
_EXAMPLES = 5


class BenchmarkInputError(MIEScoreInputError):
    """Bad benchmark input (dataset, split, predictions file); the message names the file/field and the fix."""


class PredictionMismatchError(BenchmarkInputError):
    """Prediction ids and dataset ids differ; ``alignment`` holds the counts and examples."""

    def __init__(self, message: str, alignment: "Alignment"):
        super().__init__(message)
        self.alignment = alignment


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------
# datasets
# ---------------------------------------------------------------------------------------------------------


def _looks_like_repo(ref: str) -> bool:
    return ref.count("/") == 1 and not ref.startswith((".", "/", "~")) and all(ref.split("/"))


def load_split(dataset: str, split: str):
    """``datasets.load_dataset(dataset, split=split)`` with one-line errors for the usual mistakes.

    ``dataset``: a local Hub-native folder (Parquet + README) or a Hub repo id (``user/name``).
    """
    import datasets

    path = Path(dataset).expanduser()
    if not path.exists():
        if not _looks_like_repo(dataset):
            raise BenchmarkInputError(
                f"dataset '{dataset}' is not a folder and not a Hub repo id (user/name); check the path"
            )
        ref = dataset
    elif not path.is_dir():
        raise BenchmarkInputError(f"dataset '{dataset}' is a file; pass the dataset folder (with README.md + data/)")
    else:
        ref = str(path)
    try:
        return datasets.load_dataset(ref, split=split)
    except ValueError as err:
        if "split" in str(err).lower():
            try:
                names = datasets.get_dataset_split_names(ref)
            except Exception:  # noqa: BLE001 - only used to improve the message
                names = []
            hint = f"; available: {', '.join(names)}" if names else ""
            raise BenchmarkInputError(f"dataset '{dataset}' has no split '{split}'{hint}") from None
        raise BenchmarkInputError(f"cannot load dataset '{dataset}': {err}") from None
    except (OSError, FileNotFoundError) as err:
        raise BenchmarkInputError(
            f"cannot load dataset '{dataset}' ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
            "pass a local folder written by 'miescore build-dataset' or a reachable Hub repo id"
        ) from None
    except Exception as err:  # noqa: BLE001 - datasets raises many types for unusable folders
        raise BenchmarkInputError(
            f"cannot load dataset '{dataset}' ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from None


def _metadata(ds, columns: Sequence[str]):
    """The non-image columns of a ``datasets.Dataset`` as a pandas DataFrame (images are never decoded)."""
    keep = [c for c in columns if c in ds.column_names]
    return ds.select_columns(keep).to_pandas()


def _task_names(ds, values) -> list[str]:
    feature = ds.features.get("task")
    names = getattr(feature, "names", None)
    if names is not None:
        return [names[int(v)] for v in values]
    return [str(v) for v in values]


def mie_bench_frame(ds, *, require_mos: bool = True):
    """Per-edit metadata of a MIE-Bench split (no images): one row per edited image.

    Columns: ``id, instance_id, task`` (name), ``category, editing_model, num_sources`` and the available
    ``mos_*`` columns. ``require_mos=False`` accepts datasets without human scores (editing-model leaderboards).
    """
    required = ["id", "instance_id", "task", "editing_model"] + (list(MOS_COLUMN_OF.values())[:3] if require_mos else [])
    missing = [c for c in required if c not in ds.column_names]
    if missing:
        raise BenchmarkInputError(
            f"dataset split lacks column(s) {', '.join(missing)}; is it a MIE-Bench dataset "
            "(built with 'miescore build-dataset mie-bench')?"
        )
    df = _metadata(ds, ["id", "instance_id", "task", "category", "editing_model", "num_sources", *MOS_COLUMN_OF.values()])
    df["id"] = df["id"].astype(str)
    df["instance_id"] = df["instance_id"].astype(str)
    df["task"] = _task_names(ds, df["task"].tolist())
    if "category" not in df.columns:
        df["category"] = [TASK_CATEGORY.get(t, "other") for t in df["task"]]
    if "num_sources" not in df.columns:
        df["num_sources"] = -1
    if require_mos and "mos_overall" not in df.columns:
        from ..overall import overall_score

        df["mos_overall"] = overall_score(df["mos_vq"].to_numpy(), df["mos_if"].to_numpy(), df["mos_ap"].to_numpy())
    dup = df["id"][df["id"].duplicated()]
    if len(dup):
        raise BenchmarkInputError(f"dataset has {len(dup)} duplicated id(s), e.g. {', '.join(dup.head(_EXAMPLES))}")
    if df.empty:
        raise BenchmarkInputError("dataset split is empty")
    return df.reset_index(drop=True)


def _size_from_split(split: str) -> int | None:
    m = re.fullmatch(r"(\d+)\s*pair", split.strip().lower())
    return int(m.group(1)) if m else None


def mer_bench_frame(splits: dict):
    """Per-group metadata of MER-Bench splits (``{"2pair": ds, ...}``), no images decoded.

    Columns: ``pair_id, split, k`` (group size), ``sample_id, category, subtask``.
    """
    import pandas as pd

    frames = []
    for name, ds in splits.items():
        missing = [c for c in ("pair_id",) if c not in ds.column_names]
        if missing or ("edited_images" not in ds.column_names and "editing_models" not in ds.column_names):
            raise BenchmarkInputError(
                f"MER-Bench split '{name}' lacks pair_id / edited_images; is it a MER-Bench dataset?"
            )
        df = _metadata(ds, ["pair_id", "sample_id", "category", "label", "subtask", "editing_models", "candidate_ids"])
        if "editing_models" in df.columns:
            df["k"] = [len(v) for v in df["editing_models"]]
        elif "candidate_ids" in df.columns:
            df["k"] = [len(v) for v in df["candidate_ids"]]
        elif _size_from_split(name):
            df["k"] = _size_from_split(name)
        else:  # count the images without decoding them
            from datasets import Image, List

            raw = ds.select_columns(["edited_images"]).cast_column("edited_images", List(Image(decode=False)))
            df["k"] = [len(v) for v in raw["edited_images"]]
        if "category" not in df.columns:
            df["category"] = df["label"] if "label" in df.columns else "all"
        if "sample_id" not in df.columns:
            df["sample_id"] = df["pair_id"]
        if "subtask" not in df.columns:
            df["subtask"] = ""
        df["split"] = name
        frames.append(df[["pair_id", "split", "k", "sample_id", "category", "subtask"]])
    df = pd.concat(frames, ignore_index=True)
    df["pair_id"] = df["pair_id"].astype(str)
    df["sample_id"] = df["sample_id"].astype(str)
    df["category"] = df["category"].astype(str)
    dup = df["pair_id"][df["pair_id"].duplicated()]
    if len(dup):
        raise BenchmarkInputError(
            f"MER-Bench has {len(dup)} duplicated pair_id(s), e.g. {', '.join(dup.head(_EXAMPLES))}")
    if df.empty:
        raise BenchmarkInputError("MER-Bench splits are empty")
    return df


# ---------------------------------------------------------------------------------------------------------
# predictions
# ---------------------------------------------------------------------------------------------------------


def _iter_jsonl(path: Path) -> Iterable[tuple[int, dict]]:
    """``(line number, record)`` of a predictions file; the first bad line stops the run with its number."""
    if not path.is_file():
        raise BenchmarkInputError(f"predictions file '{path}' does not exist")
    try:
        for number, record, error in iter_input(path):
            if error is not None:
                raise BenchmarkInputError(f"{path}:{number}: {error}; fix or remove the line")
            yield number, record
    except MIEScoreInputError as err:
        if isinstance(err, BenchmarkInputError):
            raise
        raise BenchmarkInputError(str(err).replace("input file", "predictions file")) from None


def _as_score(value: Any, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BenchmarkInputError(f"{where} must be a number or null, got {json.dumps(value)[:40]}")
    value = float(value)
    if math.isinf(value):
        raise BenchmarkInputError(f"{where} is infinite; write null for a missing prediction")
    return value


_META_KEYS = ("editing_model", "task", "instance_id", "category")


def read_score_predictions(path, keys: Sequence[str] = SCORE_KEYS):
    """Read a score predictions JSONL file into a DataFrame indexed by ``id``.

    Columns: the score keys found in the file (a key absent from a line is NaN there), plus any of
    ``editing_model, task, instance_id, category`` present in the lines. When ``overall`` is absent and the
    three dimensions are present, ``overall`` is computed with the MIEScore paper's eq. 2 and the frame's
    ``attrs["overall_computed"]`` is True. Raises :class:`BenchmarkInputError` for malformed lines, missing ids,
    duplicated ids, non-numeric scores, or a file with none of ``keys``.
    """
    import pandas as pd

    path = Path(path)
    ids: list[str] = []
    first_line: dict[str, int] = {}
    rows: list[dict] = []
    for number, record in _iter_jsonl(path):
        if record.get("id") in (None, ""):
            raise BenchmarkInputError(f"{path}:{number}: missing 'id' (the dataset's id column)")
        sid = str(record["id"])
        if sid in first_line:
            raise BenchmarkInputError(
                f"{path}:{number}: duplicate id '{sid}' (first at line {first_line[sid]}); keep one prediction per id"
            )
        first_line[sid] = number
        row = {k: _as_score(record[k], f"{path}:{number}: '{k}'") for k in keys if k in record}
        for k in _META_KEYS:
            if k in record and record[k] is not None:
                row[k] = str(record[k])
        ids.append(sid)
        rows.append(row)
    if not rows:
        raise BenchmarkInputError(f"predictions file '{path}' has no prediction lines")
    df = pd.DataFrame(rows, index=pd.Index(ids, name="id"))
    present = [k for k in keys if k in df.columns]
    if not present:
        raise BenchmarkInputError(
            f"predictions file '{path}' has none of the score keys {', '.join(keys)}; "
            'each line should look like {"id": ..., "visual_quality": ..., "overall": ...}'
        )
    df.attrs["overall_computed"] = False
    dims3 = list(SCORE_KEYS[:3])
    if "overall" in keys and "overall" not in df.columns and all(k in df.columns for k in dims3):
        from ..overall import overall_score

        df["overall"] = overall_score(*(df[k].to_numpy() for k in dims3))
        df.attrs["overall_computed"] = True
    return df


def read_group_predictions(path, frame) -> dict[str, np.ndarray]:
    """Read MER-Bench predictions ``{"pair_id", "scores": [...]}``; returns ``{pair_id: scores (K,)}``.

    Every ``scores`` list must have the group's K entries (from ``frame``, the :func:`mer_bench_frame`), numbers
    or ``null`` (NaN: counted wrong). Unknown pair ids are kept here and reported by the alignment.
    """
    path = Path(path)
    sizes = dict(zip(frame["pair_id"], frame["k"]))
    out: dict[str, np.ndarray] = {}
    first_line: dict[str, int] = {}
    for number, record in _iter_jsonl(path):
        if record.get("pair_id") in (None, ""):
            raise BenchmarkInputError(f"{path}:{number}: missing 'pair_id'")
        pid = str(record["pair_id"])
        if pid in first_line:
            raise BenchmarkInputError(f"{path}:{number}: duplicate pair_id '{pid}' (first at line {first_line[pid]})")
        first_line[pid] = number
        scores = record.get("scores")
        if not isinstance(scores, list):
            raise BenchmarkInputError(
                f"{path}:{number}: 'scores' must be a list with one score per edited image (best first in the dataset)"
            )
        values = np.array([_as_score(v, f"{path}:{number}: scores[{i}]") for i, v in enumerate(scores)],
                          dtype=np.float64)
        k = sizes.get(pid)
        if k is not None and values.shape[0] != k:
            raise BenchmarkInputError(
                f"{path}:{number}: pair '{pid}' has {k} edited images but {values.shape[0]} scores"
            )
        out[pid] = values
    if not out:
        raise BenchmarkInputError(f"predictions file '{path}' has no prediction lines")
    return out


@dataclass
class Alignment:
    """How prediction ids match dataset ids."""

    n_dataset: int
    n_predictions: int
    n_matched: int
    missing: list = field(default_factory=list)  # dataset ids without a prediction
    extra: list = field(default_factory=list)  # prediction ids not in the dataset split
    allowed: bool = False

    @property
    def ok(self) -> bool:
        return not self.missing and not self.extra

    def describe(self, what: str = "id") -> str:
        parts = []
        if self.missing:
            ex = ", ".join(map(str, self.missing[:_EXAMPLES]))
            parts.append(f"{len(self.missing)} of {self.n_dataset} dataset {what}s have no prediction (e.g. {ex})")
        if self.extra:
            ex = ", ".join(map(str, self.extra[:_EXAMPLES]))
            parts.append(f"{len(self.extra)} of {self.n_predictions} prediction {what}s are not in the split "
                         f"(e.g. {ex})")
        return "; ".join(parts) if parts else f"all {self.n_dataset} {what}s matched"

    def to_dict(self) -> dict:
        return {
            "n_dataset": self.n_dataset,
            "n_predictions": self.n_predictions,
            "n_matched": self.n_matched,
            "n_missing": len(self.missing),
            "n_extra": len(self.extra),
            "missing_examples": list(map(str, self.missing[:_EXAMPLES])),
            "extra_examples": list(map(str, self.extra[:_EXAMPLES])),
            "allow_missing": self.allowed,
        }


def align_predictions(dataset_ids: Sequence[str], prediction_ids: Iterable[str], *, allow_missing: bool,
                      source: str = "predictions", what: str = "id") -> Alignment:
    """Compare ids; raise :class:`PredictionMismatchError` on any difference unless ``allow_missing``.

    With ``allow_missing`` the caller evaluates the ``n_matched`` ids present in both (never zero).
    """
    pred = list(prediction_ids)
    pset = set(pred)
    dset = set(dataset_ids)
    missing = [i for i in dataset_ids if i not in pset]
    extra = [i for i in pred if i not in dset]
    al = Alignment(len(dataset_ids), len(pred), len(dset & pset), missing, extra, allowed=allow_missing)
    if al.n_matched == 0:
        raise PredictionMismatchError(
            f"no {what} of '{source}' is in the dataset split ({al.describe(what)}); wrong split or wrong file?", al
        )
    if not al.ok and not allow_missing:
        raise PredictionMismatchError(
            f"'{source}' does not match the dataset split: {al.describe(what)}. Fix the file, or pass "
            f"--allow-missing to evaluate the {al.n_matched} {what}s present in both", al
        )
    return al


# ---------------------------------------------------------------------------------------------------------
# bootstrap helpers
# ---------------------------------------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _with_ci(tree: Any) -> Any:
    """Nested dict of :class:`CI` -> nested dict of ``{"value", "ci": [low, high]}`` (NaN -> None)."""
    if isinstance(tree, CI):
        return {"value": _num(tree.point), "ci": [_num(tree.low), _num(tree.high)]}
    if isinstance(tree, dict):
        return {k: _with_ci(v) for k, v in tree.items()}
    v = _num(tree)
    return {"value": v, "ci": [None, None]}


class _Bootstrap:
    """Runs :func:`bootstrap_ci` over row indices resampled by instance, with a progress bar and collected notes.

    ``n == 0`` computes point estimates only (CIs ``None``).
    """

    def __init__(self, groups: np.ndarray, n: int, seed: int, level: float, progress: bool):
        self.groups = np.asarray(groups)
        self.n = int(n)
        self.seed = int(seed)
        self.level = float(level)
        self.progress = progress
        self.notes: list[str] = []

    def __call__(self, fn: Callable[[np.ndarray], Any], desc: str, rows: np.ndarray | None = None,
                 record_notes: bool = True) -> Any:
        """Bootstrap ``fn(row_indices)``; ``rows`` restricts resampling to a subset (stratified CIs, e.g. one
        task's instances). CIs are left out (None) when fewer than 2 instances can be drawn."""
        idx = np.arange(self.groups.shape[0]) if rows is None else np.asarray(rows)
        groups = self.groups[idx]
        n = self.n if np.unique(groups).shape[0] >= 2 else 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MetricWarning)
            if n == 0:
                result = _with_ci(_plain(fn(idx)))
            else:
                bar = None
                if self.progress:
                    from tqdm.auto import tqdm

                    bar = tqdm(total=n + 1, desc=f"bootstrap {desc}", unit="resample", file=sys.stderr, leave=False)

                def ticking(i):
                    try:
                        return fn(i)
                    finally:
                        if bar is not None:
                            bar.update(1)

                try:
                    result = _with_ci(bootstrap_ci(ticking, idx, n=n, seed=self.seed, groups=groups, level=self.level))
                finally:
                    if bar is not None:
                        bar.close()
        if record_notes:
            for w in caught:
                if issubclass(w.category, MetricWarning):
                    note = f"{desc}: {w.message}"
                    if note not in self.notes:
                        self.notes.append(note)
        return result


def _plain(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _plain(v) for k, v in tree.items()}
    v = _num(tree)
    return CI(math.nan if v is None else v, math.nan, math.nan)


_NO_VALUE = {"value": None, "ci": [None, None]}


def _ordered(values, canonical: Sequence[str]) -> list[str]:
    """Distinct labels of ``values``: those in ``canonical`` first, in its (paper) order, then the rest sorted."""
    present = set(values)
    return [c for c in canonical if c in present] + sorted(present - set(canonical))


def _safe(fn: Callable[[], float]) -> float:
    try:
        return float(fn())
    except ValueError:  # too few items (e.g. a task absent from a resample)
        return math.nan


# ---------------------------------------------------------------------------------------------------------
# MIE-Bench: evaluator vs humans
# ---------------------------------------------------------------------------------------------------------


def _describe(values: np.ndarray) -> dict:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"n": 0}
    q = np.quantile(v, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {"n": int(v.size), "mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(q[0]), "q25": float(q[1]), "median": float(q[2]), "q75": float(q[3]), "max": float(q[4])}


HIST_EDGES = np.linspace(0.0, 100.0, 21)  # 5-point MOS bins on the paper's 0-100 scale (figure 2)


def mos_distribution(frame, dims: Sequence[str] = SCORE_KEYS) -> dict:
    """MOS summaries and histograms: all edits, 2 sources, >= 3 sources (MIEScore paper, figure 2)."""
    ns = frame["num_sources"].to_numpy()
    subsets = {"all": np.ones(len(frame), dtype=bool), "2_sources": ns == 2, "3plus_sources": ns >= 3}
    out: dict[str, Any] = {"bin_edges": HIST_EDGES.tolist(), "subsets": {k: int(m.sum()) for k, m in subsets.items()}}
    for d in dims:
        col = MOS_COLUMN_OF[d]
        if col not in frame.columns:
            continue
        vals = frame[col].to_numpy(dtype=np.float64)
        out[d] = {}
        for name, mask in subsets.items():
            sel = vals[mask & np.isfinite(vals)]
            stats = _describe(sel)
            stats["histogram"] = np.histogram(np.clip(sel, 0, 100), bins=HIST_EDGES)[0].astype(int).tolist()
            out[d][name] = stats
    return out


def mie_bench_report(
    frame,
    dims: Sequence[str] | None = None,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = True,
) -> dict:
    """All numbers of the MIE-Bench evaluator report.

    ``frame``: :func:`mie_bench_frame` rows aligned with predictions in columns ``pred_<dim>`` (NaN = no
    prediction; such items are left out of that dimension). ``dims``: the score keys to evaluate (default: those
    with a ``pred_`` column). Returns a JSON-serialisable dict with sections ``meta, correlations, per_task,
    model_ranking, mos_distribution, notes``; every metric is ``{"value", "ci": [low, high]}``.
    """
    dims = [d for d in (dims or SCORE_KEYS) if f"pred_{d}" in frame.columns]
    if not dims:
        raise BenchmarkInputError("no predicted score column to evaluate")
    n = len(frame)
    if n < 3:
        raise BenchmarkInputError(f"need at least 3 edits with predictions to compute correlations, got {n}")
    P = {d: frame[f"pred_{d}"].to_numpy(dtype=np.float64) for d in dims}
    M = {d: frame[MOS_COLUMN_OF[d]].to_numpy(dtype=np.float64) for d in dims}
    boot = _Bootstrap(frame["instance_id"].to_numpy(), n_bootstrap, seed, level, progress)

    # --- table 3: SRCC / KRCC / PLCC (raw and after the 4-parameter logistic) per dimension
    def corr_fn(idx):
        return {d: correlations(P[d][idx], M[d][idx], nan_policy="omit") for d in dims}

    corr = boot(corr_fn, "correlations")
    for d in dims:
        ok = np.isfinite(P[d]) & np.isfinite(M[d])
        fit = fit_logistic(P[d][ok], M[d][ok])
        corr[d]["n"] = int(ok.sum())
        corr[d]["logistic"] = {"params": [_num(p) for p in fit.params], "success": fit.success,
                               "message": fit.message}

    # --- tables 12-15: SRCC per task, and per category
    task_names = _ordered(frame["task"], TASKS)
    tcode = frame["task"].map({t: i for i, t in enumerate(task_names)}).to_numpy()
    cat_names = _ordered(frame["category"], MIE_CATEGORIES)
    ccode = frame["category"].map({c: i for i, c in enumerate(cat_names)}).to_numpy()

    def srcc_fn(idx):
        return {d: _safe(lambda: srcc(P[d][idx], M[d][idx], nan_policy="omit")) for d in dims}

    # Stratified: each task's (category's) CI resamples that task's own instances, so the number of items in a
    # task does not vary between resamples as it would when resampling all instances at once.
    per_task: dict[str, dict] = {d: {"tasks": {}, "categories": {}} for d in dims}
    for key, names, codes in (("tasks", task_names, tcode), ("categories", cat_names, ccode)):
        for k, name in enumerate(names):
            res = boot(srcc_fn, f"SRCC {name}", rows=np.flatnonzero(codes == k), record_notes=False)
            for d in dims:
                per_task[d][key][name] = res[d]
    task_info = []
    for k, name in enumerate(task_names):
        sel = tcode == k
        task_info.append({"task": name, "category": TASK_CATEGORY.get(name, str(frame["category"][sel].iloc[0])),
                          "n_items": int(sel.sum()), "n_instances": int(frame["instance_id"][sel].nunique())})

    # --- table 4: editing-model leaderboard human vs predicted, "SRCC to human"
    models = frame["editing_model"].astype(str).to_numpy()
    model_names = sorted(set(models))
    ranking: dict[str, Any] = {"available": len(model_names) >= 3, "models": model_names}
    if len(model_names) >= 3:
        # integer model codes: np.unique inside the per-model means is several times faster on ints than strings
        mcode = np.searchsorted(np.asarray(model_names), models)

        def rank_fn(idx):
            out = {}
            for d in dims:
                r = model_ranking_srcc(P[d][idx], M[d][idx], mcode[idx], nan_policy="omit")
                means = {model_names[row["model"]]: {"human": row["mean_mos"], "pred": row["mean_pred"]}
                         for row in r.table}
                out[d] = {"srcc": r.srcc, "krcc": r.krcc, "means": means}
            return out

        boot_rank = boot(rank_fn, "model ranking")
        for d in dims:
            full = model_ranking_srcc(P[d], M[d], models, nan_policy="omit")
            table = []
            for row in full.table:  # sorted by human rank
                means = boot_rank[d]["means"].get(row["model"], {})
                table.append({"model": row["model"], "human": means.get("human"), "pred": means.get("pred"),
                              "rank_human": row["rank_mos"], "rank_pred": row["rank_pred"]})
            ranking[d] = {"srcc": boot_rank[d]["srcc"], "krcc": boot_rank[d]["krcc"], "table": table}
    else:
        ranking["reason"] = f"model-ranking SRCC needs at least 3 editing models, the split has {len(model_names)}"

    report = {
        "benchmark": "mie-bench",
        "meta": {
            "n_items": n,
            "n_instances": int(frame["instance_id"].nunique()),
            "n_editing_models": len(model_names),
            "n_tasks": len(task_names),
            "dimensions": list(dims),
            "bootstrap": {"n": int(n_bootstrap), "seed": int(seed), "level": float(level),
                          "resampling": "instances, all edits of a drawn instance_id together"},
        },
        "correlations": corr,
        "per_task": {"tasks": task_info, "categories": cat_names, "srcc": per_task},
        "model_ranking": ranking,
        "mos_distribution": mos_distribution(frame, dims),
        "notes": boot.notes,
    }
    return report


# ---------------------------------------------------------------------------------------------------------
# MER-Bench: K-pair groups
# ---------------------------------------------------------------------------------------------------------


def mer_bench_report(
    frame,
    scores: dict[str, np.ndarray],
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = True,
) -> dict:
    """MER-Bench accuracy and Kendall tau (SpatialReward paper, tables 1-2).

    ``frame``: :func:`mer_bench_frame` rows to evaluate; ``scores``: ``{pair_id: (K,) predicted scores in the
    dataset's order, best first}``. A group is correct only if its scores strictly decrease (ties and NaN are
    wrong); tau is the mean per-group Kendall tau-a with predicted ties scored 0
    (:func:`modeling_miescore.evaluation.metrics.group_kendall_tau`). CIs resample samples (``sample_id``): the groups cut
    from one original image and instruction move together.
    """
    groups = [scores[p] for p in frame["pair_id"]]
    sizes = frame["k"].to_numpy(dtype=np.int64)
    # fixed-width unicode, not object dtype: metrics' per-category summary calls .item() on the labels
    cats = np.asarray(frame["category"].astype(str).tolist(), dtype=str)
    boot = _Bootstrap(frame["sample_id"].to_numpy(), n_bootstrap, seed, level, progress)

    def fn(idx):
        g = [groups[i] for i in idx]
        acc = group_accuracy(g, categories=cats[idx])
        tau = kendall_tau_groups(g, categories=cats[idx])
        return {
            "accuracy": {"overall": acc["overall"], "by_size": {str(k): v for k, v in acc["by_size"].items()},
                         "by_category": acc["by_category"]},
            "tau": {"overall": tau["overall"], "by_size": {str(k): v for k, v in tau["by_size"].items()},
                    "by_category": tau["by_category"]},
        }

    res = boot(fn, "MER-Bench")
    full_acc = group_accuracy(groups, categories=cats)
    # size x category accuracy (no CI: cells hold few groups)
    matrix = {}
    for k in sorted(set(sizes.tolist())):
        sel = sizes == k
        a = group_accuracy([groups[i] for i in np.flatnonzero(sel)], categories=cats[sel])
        matrix[str(k)] = a["by_category"]
    flat = np.concatenate(groups) if groups else np.array([])
    n_ties = int(sum(np.unique(g[np.isfinite(g)]).size < np.isfinite(g).sum() for g in groups))
    n_nan = int(sum(bool(np.isnan(g).any()) for g in groups))
    return {
        "benchmark": "mer-bench",
        "meta": {
            "n_groups": int(len(groups)),
            "n_samples": int(frame["sample_id"].nunique()),
            "n_by_size": {str(k): v for k, v in full_acc["n_by_size"].items()},
            "n_by_category": full_acc["n_by_category"],
            "splits": sorted(set(frame["split"])),
            "n_scores": int(flat.size),
            "groups_with_tied_scores": n_ties,
            "groups_with_missing_scores": n_nan,
            "bootstrap": {"n": int(n_bootstrap), "seed": int(seed), "level": float(level),
                          "resampling": "samples, all groups of a drawn sample_id together"},
            "definitions": {
                "accuracy": "a group is correct only if the predicted scores strictly decrease in the human order "
                            "(equal or missing scores are wrong); overall = mean over all groups",
                "tau": "mean per-group Kendall tau-a; a predicted tie scores 0 (the reference script scores it +1)",
            },
        },
        "accuracy": res["accuracy"],
        "tau": res["tau"],
        "accuracy_by_size_and_category": matrix,
        "notes": boot.notes,
    }


# ---------------------------------------------------------------------------------------------------------
# editing models judged by predicted scores (tables 8-11 layout)
# ---------------------------------------------------------------------------------------------------------


def editing_models_report(
    frame,
    dims: Sequence[str] | None = None,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = True,
) -> dict:
    """Leaderboard of editing models by mean predicted score, per dimension, task and category.

    ``frame``: rows with ``instance_id, task, category, editing_model`` and ``pred_<dim>`` columns. Models are
    ranked by their mean over all their edits (``"all"``). CIs resample instances.
    """
    dims = [d for d in (dims or SCORE_KEYS) if f"pred_{d}" in frame.columns]
    if not dims:
        raise BenchmarkInputError("no predicted score column to rank editing models by")
    models = frame["editing_model"].astype(str).to_numpy()
    model_names = sorted(set(models))
    task_names = _ordered(frame["task"], TASKS)
    cat_names = _ordered(frame["category"], MIE_CATEGORIES)
    tasks = frame["task"].to_numpy()
    cats = frame["category"].to_numpy()
    P = {d: frame[f"pred_{d}"].to_numpy(dtype=np.float64) for d in dims}
    boot = _Bootstrap(frame["instance_id"].to_numpy(), n_bootstrap, seed, level, progress)

    # integer codes (model, and model x task / model x category cells): fast np.unique in per_model_means
    mcode = np.searchsorted(np.asarray(model_names), models)
    n_t, n_c = len(task_names), len(cat_names)
    tcell = mcode * n_t + frame["task"].map({t: i for i, t in enumerate(task_names)}).to_numpy()
    ccell = mcode * n_c + frame["category"].map({c: i for i, c in enumerate(cat_names)}).to_numpy()

    def means(values, labels) -> dict[int, float]:
        lab, m = per_model_means(values, labels, nan_policy="omit")
        return dict(zip(lab.tolist(), m.tolist()))

    def fn(idx):
        out = {}
        for d in dims:
            v = P[d][idx]
            out[d] = {"all": {model_names[k]: x for k, x in means(v, mcode[idx]).items()}}
            for name, cells, names, width in (("tasks", tcell, task_names, n_t), ("categories", ccell, cat_names, n_c)):
                block: dict[str, dict] = {}
                for cell, x in means(v, cells[idx]).items():
                    block.setdefault(model_names[cell // width], {})[names[cell % width]] = x
                out[d][name] = block
        return out

    res = boot(fn, "editing-model means")
    leaderboard = {}
    for d in dims:
        rows = []
        for m in model_names:
            rows.append({
                "model": m,
                "all": res[d]["all"].get(m, _NO_VALUE),
                "categories": {c: res[d]["categories"].get(m, {}).get(c, _NO_VALUE) for c in cat_names},
                "tasks": {t: res[d]["tasks"].get(m, {}).get(t, _NO_VALUE) for t in task_names},
                "n_items": int((models == m).sum()),
            })
        rows.sort(key=lambda r: -(r["all"]["value"] if r["all"]["value"] is not None else -math.inf))
        for rank, r in enumerate(rows, start=1):
            r["rank"] = rank
        leaderboard[d] = rows
    return {
        "benchmark": "editing-models",
        "meta": {
            "n_items": int(len(frame)),
            "n_instances": int(frame["instance_id"].nunique()),
            "n_editing_models": len(model_names),
            "dimensions": list(dims),
            "tasks": task_names,
            "task_category": {t: TASK_CATEGORY.get(t, str(cats[tasks == t][0])) for t in task_names},
            "categories": cat_names,
            "bootstrap": {"n": int(n_bootstrap), "seed": int(seed), "level": float(level),
                          "resampling": "instances, all edits of a drawn instance_id together"},
        },
        "leaderboard": leaderboard,
        "notes": boot.notes,
    }


# ---------------------------------------------------------------------------------------------------------
# joining predictions and dataset
# ---------------------------------------------------------------------------------------------------------


def join_scores(frame, preds, *, allow_missing: bool, source: str, require_all_dims: bool = False):
    """Align a score-predictions frame (:func:`read_score_predictions`) with dataset rows.

    Returns ``(joined frame with pred_<dim> columns, Alignment)``. Predictions whose scores are all NaN count as
    missing. Raises :class:`PredictionMismatchError` unless ``allow_missing``.
    """
    dims = [k for k in SCORE_KEYS if k in preds.columns]
    has_any = preds[dims].notna().any(axis=1)
    al = align_predictions(frame["id"].tolist(), preds.index[has_any].tolist(), allow_missing=allow_missing,
                           source=source)
    extra_ids = set(preds.index[~has_any])
    if extra_ids and not allow_missing:  # lines with only nulls
        raise PredictionMismatchError(
            f"'{source}' has {len(extra_ids)} prediction(s) with only null scores (e.g. "
            f"{', '.join(sorted(extra_ids)[:_EXAMPLES])}); fix them or pass --allow-missing", al)
    joined = frame[frame["id"].isin(set(preds.index[has_any]))].copy()
    sub = preds.loc[joined["id"], dims]
    for d in dims:
        joined[f"pred_{d}"] = sub[d].to_numpy(dtype=np.float64)
    partial = {d: int(np.isnan(joined[f"pred_{d}"]).sum()) for d in dims}
    if any(partial.values()) and not allow_missing:
        worst = max(partial, key=partial.get)
        raise PredictionMismatchError(
            f"'{source}' has null '{worst}' for {partial[worst]} id(s); fix them or pass --allow-missing", al)
    return joined.reset_index(drop=True), al


def frame_from_predictions(preds, source: str):
    """Rows for the editing-model leaderboard taken from the predictions themselves (no dataset): each line needs
    ``editing_model`` and ``task``; ``instance_id`` (for the bootstrap) defaults to the id."""
    import pandas as pd

    missing = [k for k in ("editing_model", "task") if k not in preds.columns]
    if missing or preds[["editing_model", "task"]].isna().any().any():
        raise BenchmarkInputError(
            f"without --dataset every line of '{source}' needs 'editing_model' and 'task'; "
            "pass --dataset to take them from a MIE-Bench dataset"
        )
    df = pd.DataFrame({"id": preds.index.astype(str)})
    df["editing_model"] = preds["editing_model"].to_numpy()
    df["task"] = preds["task"].to_numpy()
    df["instance_id"] = preds["instance_id"].to_numpy() if "instance_id" in preds.columns else df["id"]
    df["instance_id"] = df["instance_id"].fillna(df["id"])
    if "category" in preds.columns:
        df["category"] = preds["category"].fillna("other").to_numpy()
    else:
        df["category"] = [TASK_CATEGORY.get(t, "other") for t in df["task"]]
    for d in SCORE_KEYS:
        if d in preds.columns:
            df[f"pred_{d}"] = preds[d].to_numpy(dtype=np.float64)
    return df


# ---------------------------------------------------------------------------------------------------------
# scoring a dataset split with a MIEScore checkpoint (resumable)
# ---------------------------------------------------------------------------------------------------------


def _image_ext(data: bytes) -> str:
    from PIL import Image

    import io

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = (im.format or "").lower()
    except Exception:  # noqa: BLE001 - an unreadable image is reported by the scorer with its id
        return ".img"
    suffixes = {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "bmp": ".bmp", "tiff": ".tif", "gif": ".gif"}
    return suffixes.get(fmt, ".img")


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120]


def export_mie_inputs(ds, cache_dir, *, progress: bool = True) -> Path:
    """Write a MIE-Bench split's images (exact bytes, no re-encoding) and a ``score-batch`` input JSONL.

    Layout: ``cache_dir/images/<instance>_s<k>.<ext>`` (sources, once per instance), ``<id>_edited.<ext>`` and
    ``cache_dir/inputs.jsonl`` (``{"id", "sources", "edited", "instruction"}``, paths relative to it). Images
    already written are kept, so a rerun only writes what is missing. Returns the JSONL path.
    """
    from datasets import Image, List

    cache = Path(cache_dir)
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    cols = ["id", "instance_id", "instruction", "source_images", "edited_image"]
    missing = [c for c in cols if c not in ds.column_names]
    if missing:
        raise BenchmarkInputError(f"dataset split lacks column(s) {', '.join(missing)} needed to score it")
    raw = (ds.select_columns(cols)
             .cast_column("edited_image", Image(decode=False))
             .cast_column("source_images", List(Image(decode=False))))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(raw), desc="export images", unit="edit", file=sys.stderr, leave=False)
    lines = []
    written_sources: dict[str, list[str]] = {}

    def store(entry: dict, stem: str) -> str:
        data = entry.get("bytes")
        if data is None:  # an image stored as a path outside the Parquet file
            p = entry.get("path")
            if not p or not Path(p).is_file():
                raise BenchmarkInputError(f"image '{stem}' has neither bytes nor a readable path in the dataset")
            return str(Path(p).resolve())
        name = stem + _image_ext(data)
        target = images / name
        if not target.exists() or target.stat().st_size != len(data):
            _write_bytes_atomic(target, data)
        return f"images/{name}"

    try:
        for row in raw:
            iid = str(row["instance_id"])
            if iid not in written_sources:
                written_sources[iid] = [store(e, f"{_safe_name(iid)}_s{k + 1}")
                                        for k, e in enumerate(row["source_images"])]
            edited = store(row["edited_image"], f"{_safe_name(str(row['id']))}_edited")
            lines.append(json.dumps({"id": str(row["id"]), "sources": written_sources[iid], "edited": edited,
                                     "instruction": row["instruction"]}))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    out = cache / "inputs.jsonl"
    _write_bytes_atomic(out, ("\n".join(lines) + "\n").encode("utf-8"))
    return out


def check_prediction_cache(out_dir, identity: dict) -> None:
    """Refuse to resume ``out_dir/predictions.jsonl`` made with another model/dataset/split; record the identity."""
    out = Path(out_dir)
    meta = out / "cache" / "predictions_source.json"
    preds = out / "predictions.jsonl"
    if meta.is_file() and preds.exists():
        try:
            old = json.loads(meta.read_text())
        except (OSError, json.JSONDecodeError):
            old = None
        if old is not None and old != identity:
            diff = ", ".join(f"{k} {old.get(k)!r} -> {identity.get(k)!r}"
                             for k in identity if old.get(k) != identity.get(k))
            raise BenchmarkInputError(
                f"'{preds}' holds predictions of a different run ({diff}); use another --out or delete the file"
            )
    meta.parent.mkdir(parents=True, exist_ok=True)
    _write_bytes_atomic(meta, (json.dumps(identity, indent=2) + "\n").encode("utf-8"))


def _read_done_pairs(path: Path) -> set[str]:
    """pair ids already in a MER predictions cache; cuts off an incomplete last line left by a crash."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as handle:
            handle.truncate(cut)
        data = data[:cut]
    done = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if raw.strip():
            try:
                done.add(str(json.loads(raw)["pair_id"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchmarkInputError(
                    f"'{path}' line {number} is not a MER-Bench prediction; move the file away before resuming"
                ) from None
    return done


def score_mer_with_spatialreward(splits: dict, model: str, out_dir, *, device: str = "auto", dtype: str = "auto",
                                 batch_size: int = 8, progress: bool = True, identity: dict | None = None) -> Path:
    """Score every MER-Bench group with a SpatialReward checkpoint into ``out_dir/predictions.jsonl``.

    One line per group, ``{"pair_id", "scores": [reward per edited image, dataset order], "failed": [bool]}``;
    a candidate whose judgement could not be parsed gets ``null`` (counted wrong by the group metrics, never a
    made-up number). Written group by group with fsync per chunk, so a rerun resumes after the last full line.
    """
    from ..scoring.loading import load_spatialreward

    out = Path(out_dir)
    preds = out / "predictions.jsonl"
    check_prediction_cache(out, identity or {"model": model, "splits": sorted(splits)})
    done = _read_done_pairs(preds)
    todo = {name: [i for i, p in enumerate(ds["pair_id"]) if str(p) not in done] for name, ds in splits.items()}
    total = sum(len(v) for v in todo.values())
    if total == 0:
        return preds
    scorer = load_spatialreward(model, device=device, dtype=dtype)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="scoring groups", unit="group", file=sys.stderr)
    # enough groups per chunk to fill a few generate batches; a crash loses at most one chunk
    chunk_groups = max(1, (4 * batch_size) // 3)
    try:
        with open(preds, "a", encoding="utf-8") as handle:
            for name, indices in todo.items():
                ds = splits[name]
                for start in range(0, len(indices), chunk_groups):
                    rows = ds.select(indices[start:start + chunk_groups])
                    samples, spans = [], []
                    for row in rows:
                        first = len(samples)
                        samples += [{"sources": [row["original_image"]], "edited": img,
                                     "instruction": row["instruction"]} for img in row["edited_images"]]
                        spans.append((str(row["pair_id"]), first, len(samples)))
                    results = scorer.evaluate_edits(samples, batch_size=batch_size)
                    for pid, a, b in spans:
                        group = results[a:b]
                        handle.write(json.dumps({"pair_id": pid,
                                                 "scores": [None if r.failed else float(r.reward) for r in group],
                                                 "failed": [bool(r.failed) for r in group]}) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    if bar is not None:
                        bar.update(len(spans))
    finally:
        if bar is not None:
            bar.close()
    return preds
