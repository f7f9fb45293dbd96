"""The scoring protocols of the converted benchmarks, applied to rows with predictions attached: :data:`PROTOCOLS`,
``name -> ScoringProtocol``. A benchmark names its protocol in its declaration (``BenchmarkSpec.protocol``) and the
reports dispatch on that name; the converters' ``SPEC.tie_rule`` cites the source of each rule.

* ``calibrated`` (GenAI-Bench, AURORA-Bench): human ties (and GenAI-Bench's both-bad votes) are ties; a prediction
  is a tie when ``|score_a - score_b| <= epsilon`` with epsilon tie-calibrated on the data (Deutsch et al. 2023),
  the "accuracy with ties" of EditReward's ``eval_bench.py``.
* ``strict``: no human ties; a predicted tie is wrong.
* ``editscore`` (EditScore's EditReward-Bench): strict, per task type, averaged over task types, per dimension.
* ``mmrb2``: strict; ``single`` / ``multi`` (pairs with one / several input images) / ``overall`` (micro).
* ``srcc`` (pointwise benchmarks): SRCC per dimension (average ranks for ties).
* ``mer`` (MER-Bench): K-pair groups, one predictions line per group (:func:`~.mer_bench_report.mer_bench_report`).

A missing score (NaN) is always wrong / left out of the correlation (it only happens with ``--allow-missing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..data.converters.schema import HUMAN_COLUMNS
from ..data.errors import BenchmarkInputError
from .metrics.correlation import srcc
from .metrics.pairwise import pairwise_accuracy
from .mer_bench_report import mer_bench_report

__all__ = ["PROTOCOLS", "ScoringProtocol", "editscore_accuracy", "human_signs", "mer_group_result", "mmrb2_accuracy",
           "pairwise_result", "pointwise_srcc", "scoring_protocol"]

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


def mer_group_result(frame, dimensions=None, bootstrap=None) -> dict:
    """MER-Bench's protocol on its groups with predictions attached (``scores``: each group's K predicted scores in
    the dataset's order, :func:`~.converted_benchmarks.attach_predictions`)."""
    report = mer_bench_report(frame, dict(zip(frame["pair_id"], frame["scores"])), bootstrap=bootstrap)
    return {key: report[key] for key in ("accuracy", "tau", "tau_as_released", "meta")}


def _mer_values(details: dict) -> dict:
    acc = details["accuracy"]
    return {**{size: acc["by_size"].get(size, {}).get("value") for size in ("2", "3", "4")},
            "overall": acc["overall"]["value"], "tau_as_released": details["tau_as_released"]["overall"]["value"],
            "tau_ties0": details["tau"]["overall"]["value"]}


@dataclass(frozen=True)
class ScoringProtocol:
    """How one kind of benchmark is scored. ``measure``: ``accuracy`` (a share of pairs or groups, Table 6 prints
    it in %) or ``srcc``; ``values(details)``: the named numbers a benchmark's report columns take
    (``BenchmarkSpec.columns``); ``unit``: what one predictions line scores, ``"edit"`` (the ``score-batch``
    format) or ``"group"`` (``{"pair_id", "scores"}``)."""

    name: str
    config: str
    measure: str
    run: Callable[..., dict]
    values: Callable[[dict], dict]
    unit: str = "edit"


def _by_dimension(metric: str) -> Callable[[dict], dict]:
    return lambda details: {"mean": details["mean"],
                            **{native: d[metric] for native, d in details["by_dimension"].items()}}


PROTOCOLS: dict[str, ScoringProtocol] = {p.name: p for p in (
    ScoringProtocol("calibrated", "pairwise", "accuracy",
                    lambda frame, _, bootstrap=None: pairwise_result(frame, calibrated=True),
                    lambda details: {"accuracy": details["accuracy"]}),
    ScoringProtocol("strict", "pairwise", "accuracy",
                    lambda frame, _, bootstrap=None: pairwise_result(frame, calibrated=False),
                    lambda details: {"accuracy": details["accuracy"]}),
    ScoringProtocol("editscore", "pairwise", "accuracy",
                    lambda frame, dimensions, bootstrap=None: editscore_accuracy(frame, dimensions),
                    _by_dimension("accuracy")),
    ScoringProtocol("mmrb2", "pairwise", "accuracy", lambda frame, _, bootstrap=None: mmrb2_accuracy(frame),
                    lambda details: {key: details[key] for key in ("single", "multi", "overall")}),
    ScoringProtocol("srcc", "pointwise", "srcc",
                    lambda frame, dimensions, bootstrap=None: pointwise_srcc(frame, dimensions), _by_dimension("srcc")),
    ScoringProtocol("mer", "groups", "accuracy", mer_group_result, _mer_values, unit="group"),
)}


def scoring_protocol(name: str) -> ScoringProtocol:
    """The protocol a benchmark declares (``BenchmarkSpec.protocol``); a clear error for an unknown name."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise BenchmarkInputError(f"benchmark protocol {name!r} is not a scoring protocol "
                                  f"({', '.join(PROTOCOLS)})") from None
