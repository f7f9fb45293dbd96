"""Each external benchmark's own scoring protocol, applied to rows with predictions attached
(:func:`~.converted_benchmarks.attach_scores`): pairwise accuracy with that benchmark's tie rule, per-dimension
SRCC, and the aggregate its paper reports.

Tie rules (the converters' ``SPEC.tie_rule`` cites the source of each):

* ``genai-bench``, ``aurora-bench``: human ties (and GenAI-Bench's both-bad votes) are ties; a prediction is a tie
  when ``|score_a - score_b| <= epsilon`` with epsilon tie-calibrated on the data (Deutsch et al. 2023), the
  "accuracy with ties" of EditReward's ``eval_bench.py``.
* ``editscore-bench``: no human ties; correct iff the preferred edit scores strictly higher on the judged dimension
  (a predicted tie is wrong); accuracy per task type, averaged over task types, per dimension.
* ``mmrb2``: no human ties; strictly higher is correct, a tie is wrong; Single / Multi / Ovrl. (micro).
* pointwise benchmarks: SRCC per dimension (average ranks for ties), the mean over the benchmark's dimensions.

A missing score (NaN) is always wrong / left out of the correlation (it only happens with ``--allow-missing``).
"""

from __future__ import annotations

import numpy as np

from ..data.converters.schema import HUMAN_COLUMNS
from .errors import BenchmarkInputError
from .metrics.correlation import srcc
from .metrics.pairwise import pairwise_accuracy

__all__ = ["CALIBRATED", "editscore_accuracy", "human_signs", "mmrb2_accuracy", "pairwise_result", "pointwise_srcc"]

CALIBRATED = ("genai-bench", "aurora-bench")
_SIGNS = {"a": 1, "b": -1, "tie": 0, "both_bad": 0}


def human_signs(labels) -> np.ndarray:
    """``a`` -> +1, ``b`` -> -1, ``tie`` / ``both_bad`` -> 0."""
    return np.array([_SIGNS[label] for label in labels], dtype=np.int64)


def pairwise_result(frame, *, calibrated: bool) -> dict:
    """Accuracy of ``pred_a`` / ``pred_b`` on the rows' labels: tie-calibrated, or strict (ties wrong)."""
    if len(frame) == 0:
        raise BenchmarkInputError("no pair has predictions for both edited images")
    signs = human_signs(frame["label"])
    a, b = frame["pred_a"].to_numpy(np.float64), frame["pred_b"].to_numpy(np.float64)
    if calibrated:
        return pairwise_accuracy(a, b, signs, tie_policy="calibrated")
    if (signs == 0).any():
        raise BenchmarkInputError(f"{int((signs == 0).sum())} human tie label(s) in a benchmark scored without ties")
    return pairwise_accuracy(a, b, signs, tie_policy="wrong")


def editscore_accuracy(frame, dimensions: dict[str, str]) -> dict:
    """EditScore's protocol: per dimension, strict accuracy per task type (``subset``) and their mean.

    Returns ``{"by_dimension": {native: {"key", "accuracy", "n", "by_task": {task: acc}}}, "mean": mean over the
    dimensions}`` (the mean is the MIEScore paper's Table 6 value; the per-dimension values are the SpatialReward
    paper's Table 1 PF / Cons. / Ovrl.).
    """
    out = {}
    for native, key in dimensions.items():
        rows = frame[frame["dimension"] == key]
        if len(rows) == 0:
            continue
        by_task = {task: pairwise_result(group, calibrated=False)["accuracy"]
                   for task, group in rows.groupby("subset", sort=True)}
        out[native] = {"key": key, "accuracy": float(np.mean(list(by_task.values()))), "n": int(len(rows)),
                       "by_task": by_task}
    if not out:
        raise BenchmarkInputError("no pair of any EditScore dimension has predictions")
    return {"by_dimension": out, "mean": float(np.mean([v["accuracy"] for v in out.values()]))}


def mmrb2_accuracy(frame) -> dict:
    """MMRB2's protocol: strict accuracy on single-image pairs, multi-image pairs and all pairs (micro)."""
    out = {"overall": pairwise_result(frame, calibrated=False)["accuracy"], "n": int(len(frame))}
    for subset in ("single", "multi"):
        rows = frame[frame["subset"] == subset]
        out[subset] = pairwise_result(rows, calibrated=False)["accuracy"] if len(rows) else None
        out[f"n_{subset}"] = int(len(rows))
    return out


def pointwise_srcc(frame, dimensions: dict[str, str]) -> dict:
    """SRCC between ``pred_<key>`` and ``human_<key>`` per benchmark dimension, and their mean."""
    out = {}
    for native, key in dimensions.items():
        pred = frame[f"pred_{key}"].to_numpy(np.float64)
        human = frame[HUMAN_COLUMNS[key]].to_numpy(np.float64)
        keep = np.isfinite(pred) & np.isfinite(human)
        if keep.sum() < 3:
            raise BenchmarkInputError(f"dimension {native!r}: fewer than 3 edits with both a prediction and a "
                                      "human score; SRCC is undefined")
        out[native] = {"key": key, "srcc": srcc(pred[keep], human[keep]), "n": int(keep.sum())}
    return {"by_dimension": out, "mean": float(np.mean([v["srcc"] for v in out.values()]))}
