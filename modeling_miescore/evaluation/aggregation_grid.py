"""Re-aggregate SpatialReward sub-scores over a grid of aggregation weights (SpatialReward paper, B.1.3 and
figure 10), without running the model again.

MER-Bench predictions written by ``miescore benchmark mer-bench --model`` keep each edited image's four 0-25
sub-scores (:func:`~.prediction_files.read_group_sub_scores`). For every cell of the grid the reward is
recomputed with :func:`modeling_miescore.hub.spatialreward_aggregation.spatial_reward` (the checkpoint's own formula,
sec. 3.1)::

    SC = w_if * s_if + w_con * s_con        PQ = 0.5 * naturalness + 0.5 * artifacts   (sec. 5.1)
    R  = (SC/25)**alpha * (PQ/25)**(1 - alpha)

and scored as MER-Bench group accuracy: a group is right only if the rewards strictly decrease in the human
order (ties and missing sub-scores are wrong), micro mean over all groups of the evaluated splits
(:func:`~.metrics.group_ranking.group_correct`).

Why a grid: sec. 3.1 / 5.1 write ``S_SC = w_1 s_if + w_2 s_con`` with ``w_SC = {0.6, 0.4}``, i.e. 0.6 on
instruction following, while B.1.3 and figure 10 define ``w_SC^(0)`` as the weight of *source consistency*
with its optimum at 0.60, i.e. 0.6 on source consistency. The grid spans both readings (the two SC weights sum to
1, so ``w_if = 1 - w_con``) and says which one the data prefer.

Where the best cell is picked: the paper searches "on a disjoint 2,000-sample validation set" (B.1.3) and reports
elsewhere. :func:`grid_summary` picks a best cell only when the grid was searched on groups that are not the ones
reported (``miescore benchmark mer-bench --grid --grid-split SPLITS``, splits of the dataset kept out of
``--split``); the best cell's accuracy on the reported groups sits beside its search accuracy. A grid computed on
the reported groups themselves is shown, but no best cell is named (an in-sample optimum is optimistic); the
paper's two readings, fixed in advance, are shown either way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..hub.spatialreward_aggregation import spatial_reward
from ..data.errors import BenchmarkInputError
from .metrics.group_ranking import group_correct

__all__ = ["DEFAULT_GRID", "PAPER_READINGS", "PQ_WEIGHTS", "aggregation_grid", "grid_summary", "parse_grid_values"]

DEFAULT_GRID = tuple(round(0.1 * i, 2) for i in range(11))  # 0.0, 0.1, ..., 1.0 for alpha and for w_con
PQ_WEIGHTS = (0.5, 0.5)  # sec. 5.1: w_PQ = {0.5, 0.5} for (naturalness, artifacts)
# The two readings of the paper's SC weights, both at alpha = 0.80 (sec. 5.1 / B.1.3).
PAPER_READINGS = {
    "sec_3_1": {"label": "sec. 3.1 / 5.1 (the checkpoints' default): SC = 0.6 s_if + 0.4 s_con",
                "alpha": 0.8, "w_if": 0.6, "w_con": 0.4},
    "b_1_3": {"label": "B.1.3 / figure 10: SC = 0.4 s_if + 0.6 s_con", "alpha": 0.8, "w_if": 0.4, "w_con": 0.6},
}


def parse_grid_values(text: str, name: str) -> tuple[float, ...]:
    """``"0,0.2,0.4"`` -> ``(0.0, 0.2, 0.4)``: distinct numbers in [0, 1], sorted; a clear error otherwise."""
    try:
        values = sorted({round(float(x), 6) for x in text.split(",") if x.strip()})
    except ValueError:
        raise BenchmarkInputError(f"{name} must be comma-separated numbers in [0, 1], got '{text}'") from None
    if not values or values[0] < 0 or values[-1] > 1:
        raise BenchmarkInputError(f"{name} must be comma-separated numbers in [0, 1], got '{text}'")
    return tuple(values)


def aggregation_grid(sub_scores: Sequence[np.ndarray], alphas: Sequence[float] = DEFAULT_GRID,
                     w_cons: Sequence[float] = DEFAULT_GRID) -> list[dict]:
    """Group accuracy for every ``(alpha, w_con)`` cell, ``w_if = 1 - w_con``.

    ``sub_scores``: one ``(K, 4)`` array per group (columns s_if, s_con, naturalness, artifacts; rows in the
    human order, best first). Returns the cells ``{"alpha", "w_if", "w_con", "accuracy"}``, alpha-major.
    """
    if not len(sub_scores):
        raise BenchmarkInputError("no groups to re-aggregate")
    flat = np.concatenate([np.asarray(g, dtype=np.float64).reshape(-1, 4) for g in sub_scores])
    sizes = np.array([len(g) for g in sub_scores], dtype=np.int64)
    s_if, s_con, s_nat, s_art = flat.T
    cells = []
    for alpha in alphas:
        for w_con in w_cons:
            w_if = round(1.0 - float(w_con), 6)
            reward = spatial_reward(s_if, s_con, s_nat, s_art, alpha=float(alpha), w_sc=(w_if, float(w_con)),
                                    w_pq=PQ_WEIGHTS)
            accuracy = float(group_correct(reward, sizes).mean())
            cells.append({"alpha": float(alpha), "w_if": w_if, "w_con": float(w_con), "accuracy": accuracy})
    return cells


def _find(cells: list[dict], alpha: float, w_con: float) -> dict | None:
    for cell in cells:
        if np.isclose(cell["alpha"], alpha) and np.isclose(cell["w_con"], w_con):
            return cell
    return None


def grid_summary(cells: list[dict], n_groups: int, *, searched_on: Sequence[str] = (),
                 reported_cells: list[dict] | None = None, reported_on: Sequence[str] = ()) -> dict:
    """The report entry: what the grid spans, the paper's two readings when they are on the grid, and the best
    cell(s) (every cell at the maximum accuracy).

    ``cells`` were computed on ``n_groups`` groups of the splits ``searched_on``. ``reported_cells`` (the same grid on
    the groups the report evaluates, splits ``reported_on``) is given when the search ran on held-out splits: then
    the best cells are picked on ``cells`` and carry ``reported_accuracy``; without it the grid ran on the reported
    groups and no best cell is picked (``best`` empty, ``best_refused`` says why).
    """
    readings = {key: _find(cells, r["alpha"], r["w_con"]) for key, r in PAPER_READINGS.items()}
    summary = {
        "n_groups": int(n_groups),
        "n_cells": len(cells),
        "alphas": sorted({c["alpha"] for c in cells}),
        "w_cons": sorted({c["w_con"] for c in cells}),
        "pq_weights": list(PQ_WEIGHTS),
        "searched_on": list(searched_on),
        "held_out": reported_cells is not None,
        "reported_on": list(reported_on),
        "paper_readings": {key: {"label": PAPER_READINGS[key]["label"], **cell}
                           for key, cell in readings.items() if cell is not None},
        "file": "grid.json",
    }
    if reported_cells is None:
        summary["best"] = []
        summary["best_refused"] = ("the grid was searched on the groups this report evaluates, where the best cell is "
                                   "an in-sample optimum; no best cell is picked. Search on held-out splits with "
                                   "--grid-split (the paper searches on a disjoint validation set, B.1.3)")
        return summary
    best = max(c["accuracy"] for c in cells)
    summary["best"] = [{**c, "reported_accuracy": _find(reported_cells, c["alpha"], c["w_con"])["accuracy"]}
                       for c in cells if c["accuracy"] == best]
    for key, reading in summary["paper_readings"].items():
        reading["reported_accuracy"] = _find(reported_cells, reading["alpha"], reading["w_con"])["accuracy"]
    return summary
