"""MER-Bench without the CLI: the tau of the authors' script (ties +1) against an independent re-implementation
of its stable-sort ranking, and the re-aggregation of SpatialReward sub-scores over the aggregation-weight grid
(SpatialReward paper B.1.3 / figure 10) against a hand-written reward formula."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from modeling_miescore.evaluation.aggregation_grid import (
    DEFAULT_GRID,
    aggregation_grid,
    grid_summary,
    parse_grid_values,
)
from modeling_miescore.data.errors import BenchmarkInputError
from modeling_miescore.evaluation.metrics.group_ranking import TIE_SCORE_AS_RELEASED, kendall_tau_groups
from modeling_miescore.evaluation.prediction_files import read_group_sub_scores


def _released_tau(scores) -> float:
    """Kendall tau the way the released MER-Bench script computes it: rank the candidates by score with a stable
    sort (ties keep the human order), then tau-a between that ranking and the human ranking 0..K-1."""
    pred_rank = [i for i, _ in sorted(enumerate(scores), key=lambda x: x[1], reverse=True)]
    n = len(pred_rank)
    conc = disc = 0
    for a, b in itertools.combinations(range(n), 2):
        sign = (pred_rank[a] - pred_rank[b]) * (a - b)
        conc += sign > 0
        disc += sign < 0
    return (conc - disc) / (0.5 * n * (n - 1))


def test_tau_as_released_matches_the_stable_sort_of_the_reference_script():
    rng = np.random.default_rng(5)
    groups = [rng.integers(0, 4, size=k).astype(float).tolist() for k in rng.choice([2, 3, 4], size=300)]
    ours = kendall_tau_groups(groups, tie_score=TIE_SCORE_AS_RELEASED)
    expected = np.mean([_released_tau(g) for g in groups])
    assert ours["overall"] == pytest.approx(expected, abs=1e-12)
    default = kendall_tau_groups(groups)["overall"]
    assert default < ours["overall"]  # ties (frequent with 4 score levels) count 0 by default, +1 as released
    assert kendall_tau_groups([[3.0, 3.0, 3.0]], tie_score=TIE_SCORE_AS_RELEASED)["overall"] == 1.0


def _reward(s, alpha, w_if, w_con):
    """The sec. 3.1 reward, written out here independently of modeling_miescore.hub.spatialreward_aggregation."""
    sc = (w_if * s[:, 0] + w_con * s[:, 1]) / 25.0
    pq = (0.5 * s[:, 2] + 0.5 * s[:, 3]) / 25.0
    return sc ** alpha * pq ** (1.0 - alpha)


def _accuracy(groups, alpha, w_con):
    right = [bool(np.all(np.diff(_reward(g, alpha, 1 - w_con, w_con)) < 0)) for g in groups]
    return float(np.mean(right))


def _groups(seed=0, n=60):
    """Groups (best first) whose source consistency follows the human order while instruction following is
    noisy: weighting s_con more should help."""
    rng = np.random.default_rng(seed)
    groups = []
    for k in rng.choice([2, 3, 4], size=n):
        truth = np.linspace(22, 6, k)
        s_if = np.clip(truth + rng.normal(0, 8, k), 0, 25)
        s_con = np.clip(truth + rng.normal(0, 2, k), 0, 25)
        pq = np.clip(truth[:, None] + rng.normal(0, 6, (k, 2)), 1, 25)
        groups.append(np.column_stack([s_if, s_con, pq]))
    return groups


def test_grid_accuracy_equals_the_reward_formula_cell_by_cell():
    groups = _groups()
    groups[0][1] = groups[0][0]  # two identical candidates: a tie, wrong in every cell
    groups[1][0, 2] = np.nan  # a missing sub-score: wrong in every cell
    cells = aggregation_grid(groups)
    assert len(cells) == len(DEFAULT_GRID) ** 2
    for cell in cells:
        assert cell["w_if"] == pytest.approx(1 - cell["w_con"])
        assert cell["accuracy"] == pytest.approx(_accuracy(groups[2:], cell["alpha"], cell["w_con"]) * 58 / 60)
    assert grid_summary(cells, len(groups))["best"] == []  # searched on the reported groups: no best cell picked
    held_out = aggregation_grid(_groups(seed=1))  # the same grid on other groups, reported
    summary = grid_summary(cells, len(groups), searched_on=["validation"], reported_cells=held_out,
                           reported_on=["test"])
    best = max(c["accuracy"] for c in cells)
    assert [{k: c[k] for k in ("alpha", "w_if", "w_con", "accuracy")} for c in summary["best"]] == \
        [c for c in cells if c["accuracy"] == best]
    by_cell = {(c["alpha"], c["w_con"]): c["accuracy"] for c in held_out}
    assert all(c["reported_accuracy"] == by_cell[(c["alpha"], c["w_con"])] for c in summary["best"])
    readings = summary["paper_readings"]
    assert (readings["sec_3_1"]["w_if"], readings["sec_3_1"]["w_con"], readings["b_1_3"]["w_con"]) == (0.6, 0.4, 0.6)
    # the data were made so that source consistency is the reliable sub-score
    assert readings["b_1_3"]["accuracy"] > readings["sec_3_1"]["accuracy"]
    assert all(c["w_con"] >= 0.5 for c in summary["best"])
    json.dumps(summary)  # goes into report.json as is


def test_grid_values_are_checked():
    assert parse_grid_values("0.8, 0.2,0.8", "--grid-alpha") == (0.2, 0.8)
    for bad in ("", "a,b", "0.5,1.5", "-0.1"):
        with pytest.raises(BenchmarkInputError, match="--grid-alpha must be comma-separated numbers in"):
            parse_grid_values(bad, "--grid-alpha")
    with pytest.raises(BenchmarkInputError, match="no groups"):
        aggregation_grid([])


def test_sub_scores_are_read_per_group_and_every_gap_is_named(tmp_path):
    frame = pd.DataFrame({"pair_id": ["p1", "p2"], "k": [2, 3]})
    sub = {"s_if": 20, "s_con": 18.5, "naturalness": None, "artifacts": 9}
    lines = [{"pair_id": "p1", "scores": [1, 0], "sub_scores": [sub, sub]},
             {"pair_id": "p2", "scores": [3, 2, 1], "sub_scores": [sub] * 3},
             {"pair_id": "other", "scores": [1, 0]}]  # not evaluated: its missing sub_scores do not matter
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    subs = read_group_sub_scores(path, frame)
    assert subs["p2"].shape == (3, 4)
    np.testing.assert_array_equal(subs["p1"][0], [20.0, 18.5, np.nan, 9.0])
    for broken, message in (({"sub_scores": [sub]}, "needs 'sub_scores' with 2 entries"),
                            ({"sub_scores": None}, "got none; predictions written by 'miescore benchmark"),
                            ({"sub_scores": [sub, {"s_if": 1}]}, r"sub_scores\[1\] must be an object with keys"),
                            ({"sub_scores": [sub, {**sub, "s_con": "x"}]},
                             r"p.jsonl:1: sub_scores\[1\].s_con must be a")):
        path.write_text(json.dumps({**lines[0], **broken}) + "\n" + json.dumps(lines[1]) + "\n")
        with pytest.raises(BenchmarkInputError, match=message):
            read_group_sub_scores(path, frame)
