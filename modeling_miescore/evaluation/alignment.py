"""Match prediction ids with dataset ids: counts and examples of missing and extra ids, and the joined frame.

A mismatch stops the run with :class:`PredictionMismatchError` unless the caller allows missing
predictions, in which case the ids present in both are evaluated and the report says how many were left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..data.schema import SCORE_KEYS
from ..data.errors import EXAMPLES, BenchmarkInputError

__all__ = ["Alignment", "PredictionMismatchError", "align_predictions", "join_scores"]


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
        return {
            "n_dataset": self.n_dataset,
            "n_predictions": self.n_predictions,
            "n_matched": self.n_matched,
            "n_missing": len(self.missing),
            "n_extra": len(self.extra),
            "missing_examples": list(map(str, self.missing[:EXAMPLES])),
            "extra_examples": list(map(str, self.extra[:EXAMPLES])),
            "allow_missing": self.allowed,
        }



class PredictionMismatchError(BenchmarkInputError):
    """Prediction ids and dataset ids differ; ``alignment`` holds the counts and examples."""

    def __init__(self, message: str, alignment: Alignment):
        super().__init__(message)
        self.alignment = alignment

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


def join_scores(frame, preds, *, allow_missing: bool, source: str):
    """Align a score-predictions frame (:func:`~.prediction_files.read_score_predictions`) with dataset rows.

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
