"""Read prediction files (JSON Lines, one object per line) for the benchmark reports, and match their ids with the
dataset's. ``null`` means "no prediction"; in a MER-Bench group it counts as wrong. A malformed line stops the read
with :class:`~modeling_miescore.data.errors.BenchmarkInputError` naming the file and line; a mismatch of ids stops
the run with :class:`PredictionMismatchError` unless the caller allows missing predictions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data.schema import DIMENSIONS, SCORE_KEYS
from ..hub.errors import MIEScoreInputError
from ..scoring.jsonl_scoring import iter_input
from ..data.errors import EXAMPLES, BenchmarkInputError

__all__ = ["Alignment", "PredictionMismatchError", "SUB_SCORE_KEYS", "align_predictions", "join_scores",
           "read_group_predictions", "read_group_sub_scores", "read_score_predictions"]

# SpatialReward's sub-scores (paper sec. 3.1): instruction following, source consistency (SC); naturalness,
# artifacts (PQ). The order is the argument order of ``aggregation.spatial_reward``.
SUB_SCORE_KEYS = ("s_if", "s_con", "naturalness", "artifacts")


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


def _keyed_lines(path: Path, key: str, what: str = "", hint: str = "") -> Iterable[tuple[int, str, dict]]:
    """``(line number, the line's key, record)``: a line without ``key`` (``what`` says what it is) or repeating one
    (``hint`` says what to do) stops the read, and so does a file without a line."""
    first_line: dict[str, int] = {}
    for number, record in _iter_jsonl(path):
        if record.get(key) in (None, ""):
            raise BenchmarkInputError(f"{path}:{number}: missing '{key}'{what}")
        ident = str(record[key])
        if ident in first_line:
            raise BenchmarkInputError(f"{path}:{number}: duplicate {key} '{ident}' (first at line {first_line[ident]})"
                                      f"{hint}")
        first_line[ident] = number
        yield number, ident, record
    if not first_line:
        raise BenchmarkInputError(f"predictions file '{path}' has no prediction lines")


def _as_score(value: Any, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BenchmarkInputError(f"{where} must be a number or null, got {json.dumps(value)[:40]}")
    try:
        value = float(value)
    except OverflowError:  # an integer with hundreds of digits
        raise BenchmarkInputError(f"{where} is an integer too large for a score (about "
                                  f"{int(value.bit_length() * 0.30103) + 1} digits); write the score, or null for a "
                                  "missing prediction") from None
    if math.isinf(value):
        raise BenchmarkInputError(f"{where} is infinite; write null for a missing prediction")
    return value


_META_KEYS = ("editing_model", "task", "instance_id", "category")


def read_score_predictions(path, keys: Sequence[str] = SCORE_KEYS):
    """Read a score predictions JSONL file (``{"id", <score keys>}``, any subset) into a DataFrame indexed by ``id``.

    A missing ``overall`` is computed from the three dimensions with the MIEScore paper's eq. 2 (the frame's
    ``attrs["overall_computed"]`` is then True).
    """
    import pandas as pd

    path = Path(path)
    ids: list[str] = []
    rows: list[dict] = []
    for number, sid, record in _keyed_lines(path, "id", " (the dataset's id column)", "; keep one prediction per id"):
        row = {k: _as_score(record[k], f"{path}:{number}: '{k}'") for k in keys if k in record}
        for k in _META_KEYS:
            if k in record and record[k] is not None:
                row[k] = str(record[k])
        ids.append(sid)
        rows.append(row)
    df = pd.DataFrame(rows, index=pd.Index(ids, name="id"))
    present = [k for k in keys if k in df.columns]
    if not present:
        raise BenchmarkInputError(
            f"predictions file '{path}' has none of the score keys {', '.join(keys)}; "
            'each line should look like {"id": ..., "visual_quality": ..., "overall": ...}'
        )
    df.attrs["overall_computed"] = False
    dims3 = list(DIMENSIONS)
    if "overall" in keys and "overall" not in df.columns and all(k in df.columns for k in dims3):
        from ..hub.miescore_overall import overall_score

        df["overall"] = overall_score(*(df[k].to_numpy() for k in dims3))
        df.attrs["overall_computed"] = True
    return df


def read_group_predictions(path, frame) -> dict[str, np.ndarray]:
    """Read MER-Bench predictions ``{"pair_id", "scores": [s_1, ..., s_K]}`` (the dataset's order, best first;
    ``null``: NaN, counted wrong) into ``{pair_id: scores (K,)}``; unknown pair ids are left to the alignment."""
    path = Path(path)
    sizes = dict(zip(frame["pair_id"], frame["k"]))
    out: dict[str, np.ndarray] = {}
    for number, pid, record in _keyed_lines(path, "pair_id"):
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
    return out


def _as_sub_score(value: Any, where: str, score_range: float) -> float:
    """A sub-score on SpatialReward's 0..``score_range`` scale (D.1: 0-25), ``null`` -> NaN; NaN written as a
    number or a value off the scale is refused (it would bend every cell of the grid)."""
    number = _as_score(value, where)
    if value is not None and math.isnan(number):
        raise BenchmarkInputError(f"{where} is NaN; write null for a failed sub-score")
    if value is not None and not 0 <= number <= score_range:
        raise BenchmarkInputError(f"{where} is {number:g}, outside the sub-score scale 0..{score_range:g}")
    return number


def read_group_sub_scores(path, frame, score_range: float = 25) -> dict[str, np.ndarray]:
    """Read the ``sub_scores`` of MER-Bench predictions (per image ``{"s_if", "s_con", "naturalness",
    "artifacts"}``, SpatialReward's D.1 scale 0-25, ``null`` -> NaN) into ``{pair_id: (K, 4) array}`` for
    ``frame``'s groups, columns in :data:`SUB_SCORE_KEYS` order."""
    path = Path(path)
    sizes = dict(zip(frame["pair_id"], frame["k"]))
    out: dict[str, np.ndarray] = {}
    for number, record in _iter_jsonl(path):
        pid = str(record.get("pair_id"))
        if pid not in sizes:
            continue
        subs = record.get("sub_scores")
        if not isinstance(subs, list) or len(subs) != sizes[pid]:
            got = "none" if subs is None else (f"{len(subs)} entries" if isinstance(subs, list) else "not a list")
            raise BenchmarkInputError(
                f"{path}:{number}: pair '{pid}' needs 'sub_scores' with {sizes[pid]} entries (one per edited image) "
                f"for --grid, got {got}; predictions written by 'miescore benchmark mer-bench --model' have them")
        rows = []
        for i, entry in enumerate(subs):
            if not isinstance(entry, dict) or any(k not in entry for k in SUB_SCORE_KEYS):
                raise BenchmarkInputError(
                    f"{path}:{number}: sub_scores[{i}] must be an object with keys {', '.join(SUB_SCORE_KEYS)}")
            rows.append([_as_sub_score(entry[k], f"{path}:{number}: sub_scores[{i}].{k}", score_range)
                         for k in SUB_SCORE_KEYS])
        out[pid] = np.asarray(rows, dtype=np.float64)
    missing = [p for p in frame["pair_id"] if p not in out]
    if missing:
        raise BenchmarkInputError(f"'{path}' has no line for {len(missing)} evaluated pair(s), e.g. {missing[0]}")
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
            ex = ", ".join(map(str, self.missing[:EXAMPLES]))
            parts.append(f"{len(self.missing)} of {self.n_dataset} dataset {what}s have no prediction (e.g. {ex})")
        if self.extra:
            ex = ", ".join(map(str, self.extra[:EXAMPLES]))
            parts.append(f"{len(self.extra)} of {self.n_predictions} prediction {what}s are not in the split "
                         f"(e.g. {ex})")
        return "; ".join(parts) if parts else f"all {self.n_dataset} {what}s matched"

    def to_dict(self) -> dict:
        return {"n_dataset": self.n_dataset, "n_predictions": self.n_predictions, "n_matched": self.n_matched,
                "n_missing": len(self.missing), "n_extra": len(self.extra),
                "missing_examples": list(map(str, self.missing[:EXAMPLES])),
                "extra_examples": list(map(str, self.extra[:EXAMPLES])), "allow_missing": self.allowed}


class PredictionMismatchError(BenchmarkInputError):
    """Prediction ids and dataset ids differ; ``alignment`` holds the counts and examples."""

    def __init__(self, message: str, alignment: Alignment):
        super().__init__(message)
        self.alignment = alignment


def align_predictions(dataset_ids: Sequence[str], prediction_ids: Iterable[str], *, allow_missing: bool,
                      source: str = "predictions", what: str = "id") -> Alignment:
    """Compare ids; raise :class:`PredictionMismatchError` on any difference unless ``allow_missing`` (then the
    caller evaluates the ``n_matched`` ids present in both, never zero)."""
    pred = list(prediction_ids)
    pset = set(pred)
    dset = set(dataset_ids)
    missing = [i for i in dataset_ids if i not in pset]
    extra = [i for i in pred if i not in dset]
    al = Alignment(len(dataset_ids), len(pred), len(dset & pset), missing, extra, allowed=allow_missing)
    if al.n_matched == 0:
        raise PredictionMismatchError(
            f"no {what} of '{source}' is in the dataset split ({al.describe(what)}); wrong split or wrong file?", al)
    if not al.ok and not allow_missing:
        raise PredictionMismatchError(
            f"'{source}' does not match the dataset split: {al.describe(what)}. Fix the file, or pass "
            f"--allow-missing to evaluate the {al.n_matched} {what}s present in both", al)
    return al


def join_scores(frame, preds, *, allow_missing: bool, source: str):
    """``(dataset rows joined with pred_<dim> columns, Alignment)``; predictions whose scores are all NaN count as
    missing."""
    dims = [k for k in SCORE_KEYS if k in preds.columns]
    has_any = preds[dims].notna().any(axis=1)
    al = align_predictions(frame["id"].tolist(), preds.index[has_any].tolist(), allow_missing=allow_missing,
                           source=source)
    extra_ids = set(preds.index[~has_any])
    if extra_ids and not allow_missing:  # lines with only nulls
        raise PredictionMismatchError(
            f"'{source}' has {len(extra_ids)} prediction(s) with only null scores (e.g. "
            f"{', '.join(sorted(extra_ids)[:EXAMPLES])}); fix them or pass --allow-missing", al)
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
