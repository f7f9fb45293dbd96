"""Tests of the modeling_miescore.evaluation.metrics modules (numpy/scipy only; runs in a few seconds)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy import stats

from modeling_miescore.evaluation.metrics.bootstrap import CI, bootstrap_ci, distinct_resamples
from modeling_miescore.evaluation.metrics.coefficients import rankdata
from modeling_miescore.evaluation.metrics.correlation import (
    LogisticFitWarning, correlations, fit_logistic, krcc, plcc, srcc,
)
from modeling_miescore.evaluation.metrics.group_ranking import (
    group_accuracy, group_correct, group_kendall_tau, kendall_tau_groups,
)
from modeling_miescore.evaluation.metrics.inputs import ConstantInputWarning, MetricWarning
from modeling_miescore.evaluation.metrics.logistic_fit import degeneracy, logistic4
from modeling_miescore.evaluation.metrics.model_ranking import model_ranking_srcc, per_model_means
from modeling_miescore.evaluation.metrics.pairwise import pairwise_accuracy

# ---------------------------------------------------------------------------------------------------------
# correlations
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ties", [False, True])
def test_correlations_agree_with_scipy(seed, ties):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=500)
    y = 0.6 * x + rng.normal(size=500)
    if ties:  # coarse scores, like integer MLLM outputs
        x, y = np.round(x * 2), np.round(y)
    out = correlations(x, y)
    assert set(out) == {"srcc", "krcc", "plcc", "plcc_logistic"}
    assert out["srcc"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert out["krcc"] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert out["plcc"] == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert srcc(x, y) == pytest.approx(out["srcc"], abs=1e-15)
    assert krcc(x, y) == pytest.approx(out["krcc"], abs=1e-15)
    assert plcc(x, y) == pytest.approx(out["plcc"], abs=1e-15)
    # SRCC is Pearson on average ranks: the private fast ranker must equal scipy's
    np.testing.assert_allclose(rankdata(x), stats.rankdata(x))


def test_plcc_logistic_beats_raw_plcc_on_monotone_nonlinear_predictions():
    rng = np.random.default_rng(0)
    mos = rng.uniform(0, 100, size=400)
    pred = np.exp(mos / 15.0) + rng.normal(scale=1.0, size=400)  # monotone but strongly non-linear
    out = correlations(pred, mos)
    assert out["plcc_logistic"] > out["plcc"] + 0.05
    assert out["plcc_logistic"] > 0.95
    fit = fit_logistic(pred, mos)
    assert fit.success and len(fit.params) == 4
    assert fit.status == "fitted" and fit.message == ""  # a convex relation is not a degenerate fit
    curve = fit(np.linspace(pred.min(), pred.max(), 50))
    assert np.all(np.diff(curve) >= 0)  # monotonic increasing
    assert correlations(pred, mos, logistic=False).keys() == {"srcc", "krcc", "plcc"}


def test_logistic_fit_follows_a_decreasing_relation():
    x = np.linspace(-3, 3, 60)
    y = 10 - 8 / (1 + np.exp(-2 * x))
    fit = fit_logistic(x, y)
    assert fit.success
    np.testing.assert_allclose(fit(x), y, atol=1e-3)
    assert correlations(x, y)["plcc_logistic"] == pytest.approx(-1.0, abs=1e-6)


def test_fit_fails_gracefully_on_constant_predictions():
    mos = np.arange(10.0)
    with pytest.warns(ConstantInputWarning, match="pred is constant"):
        with pytest.warns(LogisticFitWarning, match="constant"):
            out = correlations(np.full(10, 3.0), mos)
    assert np.isnan(out["plcc"]) and np.isnan(out["plcc_logistic"])  # fallback = raw PLCC (undefined here)
    fit = fit_logistic(np.full(10, 3.0), mos)
    assert not fit.success and "constant" in fit.message
    assert np.isnan(fit([1.0, 2.0])).all()


def test_fit_failure_falls_back_to_raw_plcc():
    rng = np.random.default_rng(3)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    with pytest.warns(LogisticFitWarning, match="falls back to raw PLCC"):
        out = correlations(x, y, maxfev=1)  # curve_fit cannot converge in one evaluation
    assert out["plcc_logistic"] == out["plcc"]
    assert np.isfinite(out["plcc"])
    with pytest.warns(LogisticFitWarning):  # 4 items: too few for 4 parameters
        out = correlations([1, 2, 3, 5], [1, 3, 2, 4])
    assert out["plcc_logistic"] == out["plcc"]


def _flat_split():
    """IF predictions and MOS of the two-instance split a random-weight evaluator scores (report_checks)."""
    from report_checks import two_instance_split

    frame = two_instance_split()
    return frame["pred_instruction_following"].to_numpy(), frame["mos_if"].to_numpy()


def test_a_step_through_two_points_is_degenerate_and_plcc_logistic_falls_back():
    pred, mos = _flat_split()
    plain = fit_logistic(pred, mos, constrain=False)
    # what the plain least squares gives (and was reported before): a step that reads PLCC 0.55 beside SRCC 0.09
    assert abs(plcc(logistic4(pred, *plain.params), mos)) > 0.5 and srcc(pred, mos) < 0.1
    assert plain.status == "degenerate" and not plain.success
    assert plain.message.startswith("the fitted curve is a step: 2 of 24 predictions lie on its rise")
    fit = fit_logistic(pred, mos)  # the bounded refit needs the step too: still degenerate
    assert fit.status == "degenerate" and "bounded refit: the transition width rests on its lower bound" in fit.message
    assert np.isnan(fit(pred)).all()
    with pytest.warns(LogisticFitWarning, match=r"fit is degenerate \(the fitted curve is a step.*falls back to raw"):
        out = correlations(pred, mos)
    assert out["plcc_logistic"] == out["plcc"] == pytest.approx(0.157, abs=1e-3)


def test_a_degenerate_plain_fit_is_replaced_by_its_bounded_refit():
    rng = np.random.default_rng(10)  # 24 weakly related items: the plain fit is a step, a bounded one is not
    mos = np.round(rng.uniform(10, 90, 24), 1)
    pred = np.round(mos + rng.normal(0, 40, 24), 1)
    assert fit_logistic(pred, mos, constrain=False).status == "degenerate"
    fit = fit_logistic(pred, mos)
    assert fit.status == "constrained" and fit.success
    assert fit.message.startswith("the least-squares fit was degenerate (the fitted curve is a step")
    b1, b2, b3, b4 = fit.params
    r, width = mos.max() - mos.min(), pred.max() - pred.min()
    assert all(mos.min() - r <= b <= mos.max() + r for b in (b1, b2))
    assert pred.min() <= b3 <= pred.max() and b4 >= width / 16
    assert degeneracy(pred, mos, fit.params) is None
    out = correlations(pred, mos)
    assert out["plcc_logistic"] == pytest.approx(plcc(fit(pred), mos))
    assert abs(out["plcc_logistic"]) - abs(out["srcc"]) < 0.3


def test_too_few_distinct_predictions_and_far_asymptotes_are_named():
    rng = np.random.default_rng(0)
    mos = rng.uniform(10, 90, 24)
    fit = fit_logistic(np.repeat([40.0, 50.0, 60.0, 70.0], 6), mos)  # 24 items, 4 distinct scores
    assert fit.status == "degenerate" and fit.message.startswith("only 4 distinct predictions")
    # a straight relation: the fit uses the middle of a wide curve, a usable fit whose β alone mean little
    from report_checks import two_instance_split

    frame = two_instance_split()
    fit = fit_logistic(frame["pred_visual_quality"], frame["mos_vq"])
    assert fit.status == "fitted" and fit.params[0] > 1000
    assert fit.caveat.startswith("the upper asymptote (7336) lies far outside the MOS range (15 to 85)")


def test_nan_raise_and_omit():
    x = np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0, np.nan])
    y = np.array([1.0, 3.0, 2.0, np.nan, 5.0, 7.0, 6.0])
    with pytest.raises(ValueError, match=r"pred has 2 NaN.*mos has 1 NaN.*nan_policy='omit'"):
        correlations(x, y)
    with pytest.raises(ValueError, match="nan_policy='omit'"):
        srcc(x, y)
    keep = ~(np.isnan(x) | np.isnan(y))
    got = correlations(x, y, nan_policy="omit", logistic=False)
    want = correlations(x[keep], y[keep], logistic=False)
    assert got == want
    with pytest.raises(ValueError, match="nan_policy"):
        correlations(x, y, nan_policy="ignore")


def test_bad_shapes_raise_clear_errors():
    with pytest.raises(ValueError, match="differ in length: 3 vs 4"):
        correlations([1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="at least 3 items"):
        correlations([1, 2], [2, 1])
    with pytest.raises(ValueError, match="at least 3 items"):  # enough rows, too few after omitting NaNs
        correlations([1, 2, np.nan, np.nan], [1, 2, 3, 4], nan_policy="omit")
    with pytest.raises(ValueError, match="1-D"):
        correlations(np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="infinite"):
        correlations([1, 2, np.inf], [1, 2, 3])


def test_constant_mos_gives_nan_with_warning():
    with pytest.warns(ConstantInputWarning, match="mos is constant"):
        assert np.isnan(srcc([1, 2, 3], [5, 5, 5]))


# ---------------------------------------------------------------------------------------------------------
# model ranking (MIEScore table 4)
# ---------------------------------------------------------------------------------------------------------


def test_model_ranking_srcc_hand_made_four_models():
    # per-model means: pred A=4, B=3, C=1, D=2; MOS A=3.5, B=3, C=2, D=1
    models = ["A", "A", "B", "B", "C", "C", "D", "D"]
    pred = [5, 3, 3, 3, 0, 2, 2, 2]
    mos = [3, 4, 2, 4, 2, 2, 1, 1]
    res = model_ranking_srcc(pred, mos, models)
    # ranks pred (1,2,4,3) vs human (1,2,3,4): 1 - 6 * 2 / (4 * 15) = 0.8
    assert res.srcc == pytest.approx(0.8)
    assert res.krcc == pytest.approx(stats.kendalltau([4, 3, 1, 2], [3.5, 3, 2, 1]).statistic)
    assert [r["model"] for r in res.table] == ["A", "B", "C", "D"]  # sorted by human rank
    assert [r["rank_pred"] for r in res.table] == [1, 2, 4, 3]
    assert [r["rank_mos"] for r in res.table] == [1, 2, 3, 4]
    assert res.table[0]["mean_pred"] == 4.0 and res.table[0]["mean_mos"] == 3.5
    # mapping form: per-model scores or already averaged numbers give the same result
    by_model = model_ranking_srcc(
        {"A": [5, 3], "B": 3, "C": [0, 2], "D": 2.0}, {"A": 3.5, "B": [2, 4], "C": 2, "D": 1}
    )
    assert by_model.srcc == pytest.approx(0.8)
    df = res.to_dataframe()
    assert list(df.columns) == ["model", "mean_pred", "mean_mos", "rank_pred", "rank_mos"]
    with pytest.raises(ValueError, match="at least 3 models"):
        model_ranking_srcc([1, 2], [1, 2], ["a", "b"])
    with pytest.raises(ValueError, match="pred has 1 NaN.*nan_policy='omit'"):
        model_ranking_srcc([np.nan] + pred[1:], mos, models)
    omitted = model_ranking_srcc([np.nan] + pred[1:], mos, models, nan_policy="omit")
    assert omitted.table[0]["mean_pred"] == 3.0 and omitted.table[0]["mean_mos"] == 4.0  # A's 1st item dropped
    with pytest.raises(ValueError, match="model keys differ"):
        model_ranking_srcc({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2, "d": 3})


def test_model_ranking_reproduces_miescore_table4():
    # MIEScore paper table 4, Human vs Ours, 12 editing models: SRCC to human 0.944 (VQ), 0.986 (overall)
    human_vq = [57.88, 52.72, 53.38, 53.71, 56.48, 49.64, 46.98, 45.32, 46.88, 49.28, 33.51, 50.35]
    ours_vq = [56.89, 52.91, 53.47, 55.65, 55.43, 50.97, 49.28, 50.26, 48.46, 52.51, 39.70, 55.03]
    human_ov = [58.70, 56.18, 54.50, 50.74, 49.99, 48.70, 46.91, 46.21, 44.85, 41.67, 41.19, 38.26]
    ours_ov = [55.97, 53.78, 52.06, 48.60, 47.07, 47.40, 45.24, 44.84, 43.57, 39.34, 41.18, 36.27]
    names = [f"m{i}" for i in range(12)]
    vq = model_ranking_srcc(dict(zip(names, ours_vq)), dict(zip(names, human_vq)))
    ov = model_ranking_srcc(dict(zip(names, ours_ov)), dict(zip(names, human_ov)))
    assert round(vq.srcc, 3) == 0.944
    assert round(ov.srcc, 3) == 0.986


def test_per_model_means_2d_and_omit():
    labels, means = per_model_means([[1, 10], [3, 30], [5, np.nan]], ["b", "b", "a"], nan_policy="omit")
    assert labels.tolist() == ["a", "b"]
    np.testing.assert_allclose(means, [[5, np.nan], [2, 20]])
    with pytest.raises(ValueError, match="NaN"):
        per_model_means([1, np.nan], ["a", "b"])


# ---------------------------------------------------------------------------------------------------------
# K-pair groups (MER-Bench)
# ---------------------------------------------------------------------------------------------------------

GROUPS = [
    [3, 2, 1],  # right order                         acc 1, tau 1
    [3, 3, 1],  # tie between the two best            acc 0, tau (0 + 1 + 1)/3
    [1, 2],  # reversed                               acc 0, tau -1
    [0.9, 0.1],  # right                              acc 1, tau 1
    [4, 3, 2, 1],  # right                            acc 1, tau 1
    [4, 3, 3, 1],  # one tied pair of 6               acc 0, tau 5/6
    [np.nan, 1],  # failed parse                      acc 0, tau 0
]
CATS = ["g", "h", "g", "h", "g", "g", "h"]


def test_group_accuracy_hand_made_with_ties():
    res = group_accuracy(GROUPS, categories=CATS)
    assert res["overall"] == pytest.approx(3 / 7)
    assert res["by_size"] == {2: pytest.approx(1 / 3), 3: 0.5, 4: 0.5}
    assert res["n_by_size"] == {2: 3, 3: 2, 4: 2}
    assert res["n_groups"] == 7
    assert res["by_category"] == {"g": 0.5, "h": pytest.approx(1 / 3)}
    assert res["n_by_category"] == {"g": 4, "h": 3}
    np.testing.assert_array_equal(group_correct(GROUPS), [1, 0, 0, 1, 1, 0, 0])


def test_kendall_tau_groups_hand_made_with_ties():
    want = np.array([1, 2 / 3, -1, 1, 1, 5 / 6, 0])
    np.testing.assert_allclose(group_kendall_tau(GROUPS), want)
    res = kendall_tau_groups(GROUPS, categories=CATS)
    assert res["overall"] == pytest.approx(want.mean())
    assert res["by_size"][2] == pytest.approx(0.0)
    assert res["by_size"][3] == pytest.approx((1 + 2 / 3) / 2)
    assert res["by_size"][4] == pytest.approx((1 + 5 / 6) / 2)
    assert res["by_category"]["g"] == pytest.approx((1 - 1 + 1 + 5 / 6) / 4)
    # tie as discordant: strictly lower
    np.testing.assert_allclose(group_kendall_tau(GROUPS, tie_score=-1), [1, 1 / 3, -1, 1, 1, 4 / 6, -1])
    # a constant predictor is at chance level, not perfect
    assert kendall_tau_groups([[5, 5, 5]] * 4)["overall"] == 0.0
    with pytest.raises(ValueError, match="tie_score"):
        group_kendall_tau(GROUPS, tie_score=2)


def _reference_tau(scores):
    """SpatialReward eval/MERBench: stable sort by score, tau-a on (pred_rank, gt_rank) index lists."""
    n = len(scores)
    pred_rank = [i for i, _ in sorted(enumerate(scores), key=lambda t: t[1], reverse=True)]
    gt_rank = list(range(n))
    c = d = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (pred_rank[i] - pred_rank[j]) * (gt_rank[i] - gt_rank[j])
            c, d = c + (s > 0), d + (s < 0)
    return (c - d) / (0.5 * n * (n - 1))


def test_tie_score_one_reproduces_reference_code_and_default_is_never_higher():
    rng = np.random.default_rng(0)
    groups = [list(rng.integers(0, 3, size=k).astype(float)) for k in rng.choice([2, 3, 4], size=300)]
    ref = np.array([_reference_tau(g) for g in groups])
    np.testing.assert_allclose(group_kendall_tau(groups, tie_score=1.0), ref)
    assert np.all(group_kendall_tau(groups) <= ref + 1e-12)
    # reference exact match (stable sort order == human order and no duplicate score) == strictly decreasing
    ref_acc = [
        [i for i, _ in sorted(enumerate(g), key=lambda t: t[1], reverse=True)] == list(range(len(g)))
        and len(set(g)) == len(g)
        for g in groups
    ]
    np.testing.assert_array_equal(group_correct(groups), ref_acc)


def test_group_input_forms_agree():
    flat = np.concatenate([np.asarray(g, float) for g in GROUPS])
    sizes = [len(g) for g in GROUPS]
    np.testing.assert_array_equal(group_correct(flat, sizes), group_correct(GROUPS))
    np.testing.assert_allclose(group_kendall_tau(flat, sizes), group_kendall_tau(GROUPS))
    block = np.array([[3, 2, 1], [1, 2, 3], [2, 2, 1]], float)
    assert group_accuracy(block)["overall"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="at least 2 candidates"):
        group_accuracy([[1, 0], [3]])
    with pytest.raises(ValueError, match="sizes sum"):
        group_accuracy([1, 2, 3], sizes=[2, 2])
    with pytest.raises(ValueError, match="one label per group"):
        group_accuracy(GROUPS, categories=["a"])


# ---------------------------------------------------------------------------------------------------------
# pairwise accuracy
# ---------------------------------------------------------------------------------------------------------


def test_pairwise_ties_wrong_vs_calibrated():
    a, b = [3, 2, 1, 5], [1, 2, 2, 5]
    pref = ["A", "A", "B", "B"]  # pairs 2 and 4 are predicted ties -> wrong
    res = pairwise_accuracy(a, b, pref)
    assert res["accuracy"] == 0.5 and res["epsilon"] is None and res["n_pred_ties"] == 2
    assert pairwise_accuracy(a, b, [1, 1, -1, -1])["accuracy"] == 0.5  # sign labels
    # no human ties: calibration cannot help, epsilon stays 0
    cal = pairwise_accuracy(a, b, pref, tie_policy="calibrated")
    assert cal["accuracy"] == 0.5 and cal["epsilon"] == 0.0


def test_pairwise_tie_calibration_by_hand():
    a = [3.0, 2.0, 5.0, 1.0, 4.0]
    b = [1.0, 2.0, 5.0, 2.0, 4.5]  # |a - b| = 2, 0, 0, 1, 0.5
    pref = ["A", "tie", "A=B", "b", "TIE"]
    # eps = 0: 2 ties + 2 signs right -> 4/5; eps = 0.5: 3 ties + 2 signs -> 5/5; eps = 1: 3 + 1 -> 4/5
    res = pairwise_accuracy(a, b, pref, tie_policy="calibrated")
    assert res["epsilon"] == 0.5 and res["accuracy"] == 1.0
    assert res["n_human_ties"] == 3 and res["n_pred_ties"] == 3
    fixed = pairwise_accuracy(a, b, pref, tie_policy="calibrated", epsilon=1.0)
    assert fixed["accuracy"] == pytest.approx(0.8) and fixed["epsilon"] == 1.0
    with pytest.raises(ValueError, match="human tie"):
        pairwise_accuracy(a, b, pref)
    with pytest.raises(ValueError, match="only applies"):
        pairwise_accuracy(a, b, ["A"] * 5, epsilon=0.1)
    with pytest.raises(ValueError, match="unknown preferred"):
        pairwise_accuracy(a, b, ["A", "B", "C", "A", "A"])
    # NaN scores are wrong, never ties
    assert pairwise_accuracy([np.nan, 1], [0, 0], ["A", "A"])["accuracy"] == 0.5


# ---------------------------------------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------------------------------------


def test_bootstrap_ci_contains_point_and_is_reproducible():
    rng = np.random.default_rng(0)
    x = rng.normal(size=300)
    y = x + rng.normal(size=300)
    ci = bootstrap_ci(srcc, x, y, n=200, seed=1)
    assert isinstance(ci, CI)
    assert ci.low <= ci.point <= ci.high
    assert ci.point == srcc(x, y)
    assert bootstrap_ci(srcc, x, y, n=200, seed=1) == ci
    cis = bootstrap_ci(lambda p, m: correlations(p, m, logistic=False), x, y, n=100)
    assert set(cis) == {"srcc", "krcc", "plcc"}
    for c in cis.values():
        assert c.low <= c.point <= c.high
    # dict results with nesting (group metrics over ragged groups)
    groups = [[3, 2, 1], [1, 2], [2, 1], [4, 3, 2, 1], [1, 1]] * 10
    nested = bootstrap_ci(group_accuracy, groups, n=100)
    assert nested["overall"].low <= nested["overall"].point <= nested["overall"].high
    assert set(nested["by_size"]) == {2, 3, 4}


def test_a_bootstrap_over_too_few_units_gives_no_interval():
    value = np.array([1.0, 2.0, 3.0, 4.0])
    inst = np.array([0, 0, 1, 1])  # two instances: 3 distinct resamples
    with pytest.warns(MetricWarning, match=r"only 2 groups to resample \(3 distinct resamples\); a confidence "
                                           r"interval needs at least 10: the interval is omitted"):
        ci = bootstrap_ci(np.mean, value, groups=inst, n=200)
    assert ci.point == 2.5 and np.isnan(ci.low) and np.isnan(ci.high)
    forced = bootstrap_ci(np.mean, value, groups=inst, n=200, min_units=1)
    assert forced.low == 1.5 and forced.high == 3.5  # the lumps a percentile interval of 2 units is made of
    assert [distinct_resamples(k) for k in (1, 2, 5, 10)] == [1, 3, 126, 92378]


def test_grouped_bootstrap_keeps_groups_together_and_widens_ci():
    rng = np.random.default_rng(0)
    n_inst, per = 20, 12  # 20 instances x 12 near-identical edits (strongly clustered rows)
    inst = np.repeat(np.arange(n_inst), per)
    value = np.repeat(rng.normal(size=n_inst), per) + 0.01 * rng.normal(size=n_inst * per)

    def check_whole(v, g):
        counts = np.bincount(g, minlength=n_inst)
        assert np.all(counts % per == 0)  # every drawn instance brings all of its rows
        return float(v.mean())

    grouped = bootstrap_ci(check_whole, value, inst, groups=inst, n=300)
    plain = bootstrap_ci(lambda v, g: float(v.mean()), value, inst, n=300)
    assert grouped.point == plain.point
    # ungrouped treats 240 rows as independent: ~sqrt(12) times too narrow
    assert (grouped.high - grouped.low) > 2.0 * (plain.high - plain.low)
    with pytest.raises(ValueError, match="one id per row"):
        bootstrap_ci(np.mean, value, groups=inst[:-1])


# ---------------------------------------------------------------------------------------------------------
# import cost and speed
# ---------------------------------------------------------------------------------------------------------


def test_import_does_not_pull_torch_or_transformers():
    code = (
        "import importlib, pkgutil, sys\n"
        "import modeling_miescore.evaluation.metrics as package\n"
        "names = [m.name for m in pkgutil.iter_modules(package.__path__)]\n"
        "assert {'correlation', 'bootstrap', 'group_ranking'} <= set(names), names\n"
        "for name in names:\n"
        "    importlib.import_module(f'{package.__name__}.{name}')\n"
        "bad = [m for m in ('torch', 'transformers', 'pandas') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_correlations_on_36k_items_are_fast():
    import time

    rng = np.random.default_rng(0)
    x = rng.normal(size=36_000)
    y = x + rng.normal(size=36_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        srcc(x, y)
        t = time.perf_counter()
        srcc(x, y)
        krcc(x, y)
        plcc(x, y)
    assert time.perf_counter() - t < 1.0  # milliseconds in practice; generous on a shared CPU


def test_group_metrics_accept_object_dtype_categories():
    groups = [[3.0, 2.0], [1.0, 2.0], [5.0, 4.0, 3.0]]
    categories = np.array(["general", "human_basic", "general"], dtype=object)
    result = group_accuracy(groups, categories=categories)
    assert result["by_category"] == {"general": 1.0, "human_basic": 0.0}
    assert result["n_by_category"] == {"general": 2, "human_basic": 1}
