"""Tests for modeling_miescore.hub.spatialreward_aggregation (SpatialReward reward aggregation)."""

import math

import numpy as np
import pytest

from modeling_miescore.hub.spatialreward_aggregation import (
    DEFAULT_ALPHA,
    DEFAULT_W_PQ,
    DEFAULT_W_SC,
    MODES,
    SCORE_RANGE,
    sc_pq,
    spatial_reward,
)


def test_defaults_match_paper():
    # sec. 5.4: alpha = 0.80, w_SC = {0.6, 0.4}, w_PQ = {0.5, 0.5}; D.1: 0-25 scale
    assert DEFAULT_ALPHA == 0.8
    assert tuple(DEFAULT_W_SC) == (0.6, 0.4)
    assert tuple(DEFAULT_W_PQ) == (0.5, 0.5)
    assert SCORE_RANGE == 25
    assert MODES == ("weighted_geometric", "min_bucket", "arithmetic")


def test_sc_pq_hand_computed():
    # SC = 0.6*20 + 0.4*15 = 12 + 6 = 18 ; PQ = 0.5*22 + 0.5*18 = 11 + 9 = 20
    sc, pq = sc_pq(20, 15, 22, 18)
    assert sc == pytest.approx(18.0) and pq == pytest.approx(20.0)
    assert isinstance(sc, float) and isinstance(pq, float)


def test_weighted_geometric_hand_computed():
    # SC = 18, PQ = 20 (above). R = (18/25)^0.8 * (20/25)^0.2 = 0.72^0.8 * 0.8^0.2
    # 0.72^0.8 = exp(0.8 * ln 0.72) = exp(0.8 * -0.3285041) = exp(-0.2628033) = 0.7688932
    # 0.8^0.2  = exp(0.2 * ln 0.8)  = exp(0.2 * -0.2231436) = exp(-0.0446287) = 0.9563525
    # R = 0.7688932 * 0.9563525 = 0.7353329
    r = spatial_reward(20, 15, 22, 18)
    assert isinstance(r, float)
    assert r == pytest.approx(0.72 ** 0.8 * 0.8 ** 0.2, rel=1e-12)
    assert r == pytest.approx(0.73533, abs=1e-4)


def test_weighted_geometric_extremes():
    assert spatial_reward(25, 25, 25, 25) == pytest.approx(1.0)
    assert spatial_reward(0, 0, 25, 25) == 0.0
    assert spatial_reward(25, 25, 0, 0) == 0.0
    # alpha = 1: R = SC/25 = (0.6*25 + 0.4*0)/25 = 0.6, PQ is ignored (0**0 = 1)
    assert spatial_reward(25, 0, 0, 0, alpha=1.0) == pytest.approx(0.6)
    # alpha = 0: R = PQ/25 = (0.5*10 + 0.5*20)/25 = 15/25 = 0.6
    assert spatial_reward(0, 0, 10, 20, alpha=0.0) == pytest.approx(0.6)


def test_min_bucket_hand_computed():
    # min(20, 15) = 15 ; min(22, 18) = 18 ; R = sqrt(15 * 18) / 25 = sqrt(270)/25
    # sqrt(270) = 16.4316767 ; R = 0.6572671
    r = spatial_reward(20, 15, 22, 18, mode="min_bucket")
    assert r == pytest.approx(math.sqrt(270) / 25, rel=1e-12)
    assert r == pytest.approx(0.657267, abs=1e-6)
    # alpha and weights are ignored by min_bucket
    assert spatial_reward(20, 15, 22, 18, mode="min_bucket", alpha=0.1, w_sc=(1, 0)) == r
    # same as the released scorer: sqrt(min SC/2.5 * min PQ/2.5) / 10
    assert r == pytest.approx(math.sqrt((15 / 2.5) * (18 / 2.5)) / 10)


def test_arithmetic_hand_computed():
    # alpha = 0.8 is the SC weight: R = 0.8 * 18/25 + 0.2 * 20/25 = 0.8*0.72 + 0.2*0.8
    #                                 = 0.576 + 0.16 = 0.736
    assert spatial_reward(20, 15, 22, 18, mode="arithmetic") == pytest.approx(0.736)
    # paper's ablation "simply averages all sub-metrics": (20 + 15 + 22 + 18) / 4 / 25
    #                                                     = 75 / 100 = 0.75
    r = spatial_reward(20, 15, 22, 18, mode="arithmetic", alpha=0.5, w_sc=(0.5, 0.5))
    assert r == pytest.approx(0.75)


def test_weights_are_normalised():
    # (3, 2) -> (0.6, 0.4), (1, 1) -> (0.5, 0.5)
    assert spatial_reward(20, 15, 22, 18, w_sc=(3, 2), w_pq=(1, 1)) == pytest.approx(
        spatial_reward(20, 15, 22, 18)
    )


def test_score_range():
    # 0-10 scale: 8,6,8.8,7.2 are 20,15,22,18 scaled by 10/25 -> same reward
    assert spatial_reward(8, 6, 8.8, 7.2, score_range=10) == pytest.approx(
        spatial_reward(20, 15, 22, 18)
    )


def test_clamping():
    # 40 -> 25 and -3 -> 0
    assert spatial_reward(40, 40, 40, 40) == pytest.approx(1.0)
    assert spatial_reward(-3, 30, 22, 18) == pytest.approx(spatial_reward(0, 25, 22, 18))
    sc, pq = sc_pq(100, -1, 26, 25)
    # SC = 0.6*25 + 0.4*0 = 15 ; PQ = 0.5*25 + 0.5*25 = 25
    assert sc == pytest.approx(15.0) and pq == pytest.approx(25.0)
    for mode in MODES:
        r = spatial_reward(np.array([-50.0, 1e9]), 12, 12, 12, mode=mode)
        assert np.all((r >= 0) & (r <= 1))


@pytest.mark.parametrize("mode", MODES)
def test_vectorised_equals_scalar(mode):
    rng = np.random.default_rng(0)
    x = rng.uniform(-5, 30, size=(4, 50))
    vec = spatial_reward(x[0], x[1], x[2], x[3], mode=mode)
    assert isinstance(vec, np.ndarray) and vec.shape == (50,)
    scal = [spatial_reward(float(a), float(b), float(c), float(d), mode=mode) for a, b, c, d in x.T]
    np.testing.assert_allclose(vec, scal, rtol=1e-12, atol=0)
    assert all(isinstance(s, float) for s in scal)


def test_broadcasting_and_lists():
    # s_if varies along the columns, s_nat along the rows: r[i, j] = R(s_if[j], 15, s_nat[i], 18)
    r = spatial_reward([20, 25], 15, np.array([[22], [10]]), 18)
    assert r.shape == (2, 2)
    for i, s_nat in enumerate((22, 10)):
        for j, s_if in enumerate((20, 25)):
            assert r[i, j] == pytest.approx(spatial_reward(s_if, 15, s_nat, 18), rel=1e-12)
    # SC = 0.6 * s_if + 0.4 * 15 = (18, 21); PQ = 0.5 * 22 + 0.5 * 18 = 20, broadcast to both
    sc, pq = sc_pq([20, 25], 15, 22, 18)
    np.testing.assert_allclose(sc, [18.0, 21.0])
    np.testing.assert_allclose(pq, [20.0, 20.0])


def test_numpy_scalar_returns_float():
    # numpy scalars and 0-d arrays give a Python float with the same value as plain numbers
    expected = spatial_reward(20, 15, 22, 18)
    for value in (spatial_reward(np.float32(20), np.int64(15), 22, 18), spatial_reward(np.array(20.0), 15, 22, 18)):
        assert type(value) is float and value == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_nan_propagation(mode):
    nan = float("nan")
    for args in ([nan, 15, 22, 18], [20, nan, 22, 18], [20, 15, nan, 18], [20, 15, 22, nan],
                 [None, 15, 22, 18]):
        assert math.isnan(spatial_reward(*args, mode=mode))
    # NaN also when its term has weight 0
    assert math.isnan(spatial_reward(20, 15, nan, 18, mode=mode, alpha=1.0))
    assert math.isnan(spatial_reward(nan, 15, 22, 18, mode=mode, alpha=0.0))
    r = spatial_reward(np.array([20, nan, 25]), 15, 22, 18, mode=mode)
    assert math.isnan(r[1]) and not math.isnan(r[0]) and not math.isnan(r[2])
    r = spatial_reward([20, None], 15, 22, 18, mode=mode)
    assert math.isnan(r[1]) and not math.isnan(r[0])


def test_bad_mode_lists_modes():
    with pytest.raises(ValueError) as exc:
        spatial_reward(20, 15, 22, 18, mode="harmonic")
    for m in MODES:
        assert m in str(exc.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 1.5},
        {"alpha": -0.1},
        {"alpha": float("nan")},
        {"w_sc": (0, 0)},
        {"w_sc": (-1, 2)},
        {"w_pq": (1, 2, 3)},
        {"score_range": 0},
        {"score_range": -25},
    ],
)
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        spatial_reward(20, 15, 22, 18, **kwargs)


def test_monotonic_in_each_score():
    base = np.array([15.0, 15.0, 15.0, 15.0])
    for mode in ("weighted_geometric", "arithmetic"):
        r0 = spatial_reward(*base, mode=mode)
        for k in range(4):
            up = base.copy()
            up[k] += 5
            assert spatial_reward(*up, mode=mode) > r0
