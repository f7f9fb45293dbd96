"""Pairwise accuracy of pointwise scores on human A/B preferences (EditReward-Bench), with predicted ties
counted wrong or tie-calibrated (Deutsch et al., arXiv 2305.14324).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .inputs import as_float_1d

__all__ = ["pairwise_accuracy"]

_PREF_WORDS = {
    "a": 1, "a>b": 1, "left": 1, "1": 1,
    "b": -1, "b>a": -1, "a<b": -1, "right": -1, "-1": -1,
    "tie": 0, "=": 0, "a=b": 0, "b=a": 0, "equal": 0, "same": 0, "0": 0,
}  # fmt: skip


def _parse_preferred(preferred: Any, n: int) -> np.ndarray:
    arr = np.asarray(preferred)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"preferred must give one label per pair ({n}), got shape {arr.shape}")
    if arr.dtype.kind in "USO":
        words = np.char.lower(np.char.strip(arr.astype(str)))
        uniq, inv = np.unique(words, return_inverse=True)
        bad = [u for u in uniq.tolist() if u not in _PREF_WORDS]
        if bad:
            raise ValueError(f"unknown preferred label(s) {bad[:5]}; use 'A', 'B' or 'tie' (or +1/-1/0)")
        return np.array([_PREF_WORDS[u] for u in uniq.tolist()], dtype=np.int64)[inv]
    if arr.dtype.kind == "b":
        raise ValueError("preferred must be 'A'/'B'/'tie' labels or signs +1/-1/0, not booleans")
    vals = arr.astype(np.float64)
    if not np.isin(vals, (-1.0, 0.0, 1.0)).all():
        raise ValueError("numeric preferred labels must be signs: +1 (A better), -1 (B better) or 0 (tie)")
    return vals.astype(np.int64)


def pairwise_accuracy(
    score_a: Any,
    score_b: Any,
    preferred: Any,
    tie_policy: str = "wrong",
    epsilon: float | None = None,
) -> dict[str, Any]:
    """Accuracy of pointwise scores on human pairwise preferences.

    ``preferred``: per pair ``"A"``, ``"B"`` or ``"tie"`` (also ``"A>B"``, ``"B>A"``, ``"A=B"``; case-insensitive)
    or the sign of (human A - human B): ``+1``, ``-1``, ``0``.

    * ``tie_policy="wrong"`` (EditReward-Bench ``calculate_statistics.py``: ``correct if score[0] > score[1]``):
      a predicted tie is wrong; human-tie labels are not allowed (use ``"calibrated"``); ``epsilon`` is None.
    * ``tie_policy="calibrated"`` (TIGER EditReward-Bench 2-pair; tie calibration of Deutsch et al.,
      arXiv 2305.14324): the prediction is "tie" when ``|score_a - score_b| <= epsilon``, otherwise the sign;
      a pair is correct when that equals the human label, human ties included. With ``epsilon=None`` the
      epsilon that maximises accuracy on these data is searched over 0 and every observed ``|score_a - score_b|``
      (smallest of equally good ones); pass the epsilon chosen on a dev split to apply it elsewhere.

    NaN scores are wrong. Returns ``{"accuracy", "epsilon", "n", "n_human_ties", "n_pred_ties"}``.
    """
    if tie_policy not in ("wrong", "calibrated"):
        raise ValueError(f"tie_policy must be 'wrong' or 'calibrated', got {tie_policy!r}")
    a = as_float_1d(score_a, "score_a")
    b = as_float_1d(score_b, "score_b")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"score_a and score_b differ in length: {a.shape[0]} vs {b.shape[0]}")
    if a.shape[0] == 0:
        raise ValueError("no pairs given")
    human = _parse_preferred(preferred, a.shape[0])
    d = a - b
    ad = np.abs(d)
    n = int(a.shape[0])
    n_h_ties = int((human == 0).sum())
    if tie_policy == "wrong":
        if epsilon is not None:
            raise ValueError("epsilon only applies with tie_policy='calibrated'")
        if n_h_ties:
            raise ValueError(
                f"{n_h_ties} human tie label(s): use tie_policy='calibrated', "
                "or drop tied pairs for strict accuracy"
            )
        correct = np.sign(d) == human  # sign(0) = 0 never equals +-1; NaN never equals anything
        return {"accuracy": float(correct.mean()), "epsilon": None, "n": n, "n_human_ties": 0,
                "n_pred_ties": int((d == 0).sum())}  # fmt: skip

    finite = np.isfinite(d)
    sign_ok = (np.sign(d) == human) & (human != 0) & finite
    if epsilon is None:
        # accuracy(eps) = #(human tie, |d| <= eps) + #(non-tie, right sign, |d| > eps), for every candidate eps
        cand = np.unique(np.concatenate([[0.0], ad[finite]]))
        tie_ad = np.sort(ad[(human == 0) & finite])
        ok_ad = np.sort(ad[sign_ok])
        n_correct = np.searchsorted(tie_ad, cand, side="right") + (
            ok_ad.shape[0] - np.searchsorted(ok_ad, cand, side="right")
        )
        eps = float(cand[int(np.argmax(n_correct))])  # argmax: first, i.e. smallest best epsilon
    else:
        eps = float(epsilon)
        if not eps >= 0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    pred_tie = finite & (ad <= eps)
    correct = np.where(human == 0, pred_tie, sign_ok & ~pred_tie)
    return {"accuracy": float(correct.mean()), "epsilon": eps, "n": n, "n_human_ties": n_h_ties,
            "n_pred_ties": int(pred_tie.sum())}  # fmt: skip
