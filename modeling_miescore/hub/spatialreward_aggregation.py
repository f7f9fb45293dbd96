"""Aggregation of the four SpatialReward sub-scores into one reward in [0, 1].

Hub file: copied flat into model checkpoints for ``trust_remote_code``. It imports only the
standard library and numpy, and nothing from the package.

Sub-scores (paper arXiv 2602.07458, sec. 3.1), each on the 0-25 scale of appendix D.1:
``s_if`` (instruction following), ``s_con`` (source consistency / over-editing),
``s_nat`` (naturalness), ``s_art`` (artifacts).

Modes
-----
``weighted_geometric`` (the paper's reward; sec. 3.1 and sec. 5.4, grid search in B.1.3)::

    SC = w_sc[0]*s_if + w_sc[1]*s_con          # w_sc = (0.6, 0.4)
    PQ = w_pq[0]*s_nat + w_pq[1]*s_art         # w_pq = (0.5, 0.5)
    R  = (SC/25)**alpha * (PQ/25)**(1-alpha)   # alpha = 0.8

``min_bucket`` (the VIEScore "bucket principle" baseline of sec. 5.4 / B.2.2; the released
SpatialReward scorer computes ``sqrt(min SC * min PQ)/2.5/10``, the same thing)::

    R = sqrt(min(s_if, s_con) * min(s_nat, s_art)) / 25

``arithmetic`` (weighted arithmetic mean of the normalised SC and PQ, with ``alpha`` as the SC
weight)::

    R = alpha * SC/25 + (1-alpha) * PQ/25

  The paper's "Arithmetic Mean" ablation (sec. 5.4, "simply averages all sub-metrics") is
  ``mode="arithmetic", alpha=0.5, w_sc=(0.5, 0.5), w_pq=(0.5, 0.5)``.

Conventions
-----------
* Weights must be non-negative with a positive sum; each pair is divided by its sum, so SC and
  PQ stay on the 0-``score_range`` scale (the paper's weights already sum to 1).
* Inputs are clamped to ``[0, score_range]``; the result is in [0, 1].
* NaN (or None) in any of the four inputs gives NaN (also when ``alpha`` is 0 or 1, where the
  NaN term has weight 0), so the caller can map a failed parse to a configured value.
* Inputs broadcast like numpy arrays; if every input is a scalar the result is a Python float.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import numpy as np

__all__ = [
    "spatial_reward",
    "sc_pq",
    "MODES",
    "DEFAULT_ALPHA",
    "DEFAULT_W_SC",
    "DEFAULT_W_PQ",
    "SCORE_RANGE",
]

SCORE_RANGE = 25  # appendix D.1: all scores "from scale 0 to 25"
DEFAULT_ALPHA = 0.8  # sec. 5.4 / B.1.3 grid search: alpha = 0.80
# sec. 3.1 / 5.1: w_SC = {0.6, 0.4} for (s_if, s_con). B.1.3 / figure 10 read w_SC^(0) as the weight of source
# consistency instead (0.6 s_con); SpatialRewardConfig.sc_weights keys the weights by name and keeps sec. 3.1.
DEFAULT_W_SC = (0.6, 0.4)
DEFAULT_W_PQ = (0.5, 0.5)  # sec. 5.4: w_PQ = {0.5, 0.5} for (s_nat, s_art)
MODES = ("weighted_geometric", "min_bucket", "arithmetic")


def _weights(w: Sequence[float], name: str) -> Tuple[float, float]:
    try:
        a, b = (float(x) for x in w)
    except (TypeError, ValueError):
        raise ValueError("%s must be a pair of numbers, got %r" % (name, w)) from None
    if not (np.isfinite(a) and np.isfinite(b)) or a < 0 or b < 0 or a + b <= 0:
        raise ValueError("%s must be non-negative with a positive sum, got %r" % (name, w))
    s = a + b
    return a / s, b / s


def _range(score_range: Any) -> float:
    r = float(score_range)
    if not np.isfinite(r) or r <= 0:
        raise ValueError("score_range must be a positive number, got %r" % (score_range,))
    return r


def _arr(x: Any, hi: float) -> np.ndarray:
    # None -> NaN (a missing score); np.clip keeps NaN.
    a = np.asarray(x, dtype=np.float64) if x is not None else np.asarray(np.nan)
    return np.clip(a, 0.0, hi)


def _out(value: np.ndarray, scalar: bool):
    if scalar:
        return float(np.asarray(value).reshape(()))
    return value


def _all_scalar(*xs: Any) -> bool:
    return all(np.ndim(x) == 0 for x in xs)


def sc_pq(
    s_if,
    s_con,
    s_nat,
    s_art,
    w_sc: Sequence[float] = DEFAULT_W_SC,
    w_pq: Sequence[float] = DEFAULT_W_PQ,
    score_range: float = SCORE_RANGE,
):
    """Return ``(SC, PQ)`` on the 0-``score_range`` scale (sec. 3.1 weighted sums).

    ``SC = w_sc[0]*s_if + w_sc[1]*s_con`` and ``PQ = w_pq[0]*s_nat + w_pq[1]*s_art`` after
    clamping the inputs to ``[0, score_range]`` and normalising each weight pair to sum 1.
    """
    r = _range(score_range)
    a1, a2 = _weights(w_sc, "w_sc")
    b1, b2 = _weights(w_pq, "w_pq")
    scalar = _all_scalar(s_if, s_con, s_nat, s_art)
    sc = a1 * _arr(s_if, r) + a2 * _arr(s_con, r)
    pq = b1 * _arr(s_nat, r) + b2 * _arr(s_art, r)
    sc, pq = np.broadcast_arrays(sc, pq)
    return _out(np.array(sc), scalar), _out(np.array(pq), scalar)


def spatial_reward(
    s_if,
    s_con,
    s_nat,
    s_art,
    mode: str = "weighted_geometric",
    alpha: float = DEFAULT_ALPHA,
    w_sc: Sequence[float] = DEFAULT_W_SC,
    w_pq: Sequence[float] = DEFAULT_W_PQ,
    score_range: float = SCORE_RANGE,
):
    """Aggregate (s_if, s_con, s_nat, s_art) into a reward in [0, 1]; see the module docstring.

    ``alpha`` (in [0, 1]) is the SC exponent in ``weighted_geometric`` and the SC weight in
    ``arithmetic``; ``min_bucket`` ignores ``alpha`` and the weights. Unknown ``mode`` ->
    ValueError listing the modes.
    """
    if mode not in MODES:
        raise ValueError("unknown mode %r; expected one of %s" % (mode, ", ".join(MODES)))
    alpha = float(alpha)
    if not (0.0 <= alpha <= 1.0):
        raise ValueError("alpha must be in [0, 1], got %r" % alpha)
    r = _range(score_range)
    scalar = _all_scalar(s_if, s_con, s_nat, s_art)
    ins = [_arr(x, r) for x in (s_if, s_con, s_nat, s_art)]
    missing = np.isnan(ins[0]) | np.isnan(ins[1]) | np.isnan(ins[2]) | np.isnan(ins[3])
    if mode == "min_bucket":
        # sec. 5.4 "Bucket Principle (Min)": R = sqrt(min(S_SC) * min(S_PQ)), as in VIEScore
        sc = np.minimum(ins[0], ins[1])
        pq = np.minimum(ins[2], ins[3])
        value = np.sqrt(sc * pq) / r
    else:
        sc, pq = sc_pq(*ins, w_sc=w_sc, w_pq=w_pq, score_range=r)
        sc_n = np.asarray(sc, dtype=np.float64) / r
        pq_n = np.asarray(pq, dtype=np.float64) / r
        if mode == "weighted_geometric":
            # sec. 3.1: R_final = S_SC^alpha * S_PQ^(1-alpha); note 0**0 == 1 at alpha in {0, 1}
            value = np.power(sc_n, alpha) * np.power(pq_n, 1.0 - alpha)
        else:  # arithmetic
            value = alpha * sc_n + (1.0 - alpha) * pq_n
    value = np.clip(value, 0.0, 1.0)  # guards rounding only; NaN stays NaN
    value = np.where(missing, np.nan, value)  # a missing sub-score always yields NaN
    return _out(value, scalar)
