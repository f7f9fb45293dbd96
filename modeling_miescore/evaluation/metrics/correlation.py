"""Correlation between predictions and MOS (MIEScore paper, table 3): SRCC, KRCC, PLCC, and PLCC after a
monotonic 4-parameter logistic fit.

:func:`correlations` gives all four at once; :func:`srcc`, :func:`krcc`, :func:`plcc` give single numbers (cheap
inside :func:`~modeling_miescore.evaluation.metrics.bootstrap.bootstrap_ci`); :func:`fit_logistic` returns the
fitted curve, e.g. to draw it on a scatter plot.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special

from .coefficients import kendall, pearson, spearman
from .inputs import MetricWarning, is_constant, paired, warn_constant

__all__ = ["LogisticFit", "LogisticFitWarning", "correlations", "fit_logistic", "krcc", "logistic4", "plcc", "srcc"]


class LogisticFitWarning(MetricWarning):
    """The 4-parameter logistic fit failed; ``plcc_logistic`` fell back to raw PLCC."""


def srcc(pred: Any, mos: Any, nan_policy: str = "raise") -> float:
    """Spearman rank correlation (average ranks for ties); equals ``scipy.stats.spearmanr``."""
    a, b = paired(pred, mos, nan_policy=nan_policy)
    warn_constant(a, b, ("pred", "mos"))
    return spearman(a, b)


def krcc(pred: Any, mos: Any, nan_policy: str = "raise") -> float:
    """Kendall rank correlation, tau-b; equals ``scipy.stats.kendalltau``."""
    a, b = paired(pred, mos, nan_policy=nan_policy)
    warn_constant(a, b, ("pred", "mos"))
    return kendall(a, b)


def plcc(pred: Any, mos: Any, nan_policy: str = "raise") -> float:
    """Pearson linear correlation on raw predictions (no fit); equals ``scipy.stats.pearsonr``."""
    a, b = paired(pred, mos, nan_policy=nan_policy)
    warn_constant(a, b, ("pred", "mos"))
    return pearson(a, b)


def logistic4(x: Any, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """Monotonic 4-parameter logistic (VQEG style, |beta4| as in LIQE):

    ``y = (b1 - b2) / (1 + exp(-(x - b3) / |b4|)) + b2``

    Increasing when ``b1 > b2``. Written with ``scipy.special.expit`` so it never overflows.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (b1 - b2) * special.expit((x - b3) / (abs(b4) + 1e-300)) + b2


def _logistic4_jac(x: np.ndarray, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """Analytic Jacobian of :func:`logistic4` (n, 4): lets curve_fit skip finite differences (~3x faster)."""
    scale = abs(b4) + 1e-300
    u = (x - b3) / scale
    sig = special.expit(u)
    slope = (b1 - b2) * sig * (1.0 - sig)
    return np.stack([sig, 1.0 - sig, -slope / scale, -slope * u * np.sign(b4) / scale], axis=1)


@dataclass(frozen=True)
class LogisticFit:
    """Result of :func:`fit_logistic`.

    ``params`` are ``(b1, b2, b3, b4)`` on the scale of the raw predictions (NaN when the fit failed).
    Calling the object maps predictions to the MOS scale, e.g. to draw the curve on a scatter plot;
    a failed fit maps everything to NaN. ``message`` says why a fit failed.
    """

    params: tuple[float, float, float, float]
    success: bool
    message: str = ""
    n: int = 0

    def __call__(self, x: Any) -> np.ndarray:
        if not self.success:
            return np.full(np.shape(x), np.nan)
        return logistic4(x, *self.params)


def _failed_fit(message: str, n: int) -> LogisticFit:
    return LogisticFit(params=(math.nan,) * 4, success=False, message=message, n=n)


def fit_logistic(pred: Any, mos: Any, *, maxfev: int = 10000, nan_policy: str = "raise") -> LogisticFit:
    """Fit :func:`logistic4` mapping predictions to MOS (least squares, ``scipy.optimize.curve_fit``).

    Convention: pyiqa ``calculate_plcc(fit_scale='logistic_4params')`` / LIQE,
    with ``|b4|`` so the curve stays monotonic. The fit runs on standardised predictions (better conditioned,
    parameters mapped back afterwards) from data-driven starts: ``b1, b2`` = MOS max/min (swapped for a
    negative rank correlation), ``b3`` = mean prediction, ``b4`` = std/4 and std (pyiqa's and LIQE's starts);
    the lower-error fit wins. ``maxfev`` bounds the function evaluations of each start.

    Never raises on a bad fit: returns ``success=False`` with a message (constant predictions, fewer than
    5 items, no convergence, non-finite parameters). Input errors (length mismatch, NaN with
    ``nan_policy='raise'``) raise ``ValueError``.
    """
    x, y = paired(pred, mos, nan_policy=nan_policy)
    n = x.shape[0]
    if n < 5:
        return _failed_fit(f"a 4-parameter fit needs at least 5 items, got {n}", n)
    if is_constant(x):
        return _failed_fit("predictions are constant", n)
    if is_constant(y):
        return _failed_fit("MOS values are constant", n)
    mu, sd = float(x.mean()), float(x.std())
    z = (x - mu) / sd
    direction = 1.0 if spearman(x, y) >= 0 else -1.0
    hi, lo = float(y.max()), float(y.min())
    b1, b2 = (hi, lo) if direction > 0 else (lo, hi)

    best: tuple[float, np.ndarray] | None = None
    errors = []
    for scale in (0.25, 1.0):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # OptimizeWarning (covariance) and overflow are harmless here
                popt, _ = optimize.curve_fit(
                    logistic4, z, y, p0=[b1, b2, 0.0, scale], jac=_logistic4_jac, maxfev=int(maxfev)
                )
        except (RuntimeError, ValueError, TypeError, FloatingPointError, np.linalg.LinAlgError) as exc:
            errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            continue
        if not np.all(np.isfinite(popt)):
            errors.append("non-finite parameters")
            continue
        sse = float(np.sum((logistic4(z, *popt) - y) ** 2))
        if best is None or sse < best[0]:
            best = (sse, popt)
    if best is None:
        return _failed_fit("; ".join(dict.fromkeys(errors)) or "fit did not converge", n)
    p1, p2, p3, p4 = (float(v) for v in best[1])
    params = (p1, p2, mu + sd * p3, sd * abs(p4))  # back to the raw prediction scale
    fitted = logistic4(x, *params)
    if not np.all(np.isfinite(fitted)) or is_constant(fitted):
        return _failed_fit("the fitted curve is flat or non-finite on the data", n)
    return LogisticFit(params=params, success=True, n=n)


def correlations(
    pred: Any,
    mos: Any,
    nan_policy: str = "raise",
    *,
    logistic: bool = True,
    maxfev: int = 10000,
) -> dict[str, float]:
    """SRCC, KRCC and PLCC between predictions and MOS (MIEScore paper, table 3: rho_s, rho_k, rho_p).

    Returns ``{"srcc", "krcc", "plcc", "plcc_logistic"}``:

    * ``srcc``: Spearman (average ranks for ties), ``krcc``: Kendall tau-b, ``plcc``: Pearson; all three on
      the raw predictions (the fit is monotonic, so it would not change SRCC/KRCC anyway).
    * ``plcc_logistic``: Pearson between MOS and :func:`fit_logistic` (predictions), signed like the relation
      (negative when the fitted curve decreases, so it reads like ``plcc``); if the fit fails (e.g.
      constant predictions) it falls back to raw ``plcc`` with a :class:`LogisticFitWarning`.
      Left out when ``logistic=False`` (cheaper inside a bootstrap).

    Constant inputs give NaN correlations and a :class:`ConstantInputWarning`.
    ``nan_policy``: ``"raise"`` (default; the error names the argument and the NaN count) or ``"omit"``
    (drop items where either value is NaN). Length mismatch or fewer than 3 items raise ``ValueError``.
    """
    x, y = paired(pred, mos, nan_policy=nan_policy)
    warn_constant(x, y, ("pred", "mos"))
    out = {"srcc": spearman(x, y), "krcc": kendall(x, y), "plcc": pearson(x, y)}
    if logistic:
        fit = fit_logistic(x, y, maxfev=maxfev)
        if fit.success:
            # the fit absorbs the direction; keep the sign of the relation (as srcc/plcc) for decreasing curves
            sign = 1.0 if fit.params[0] >= fit.params[1] else -1.0
            out["plcc_logistic"] = sign * pearson(fit(x), y)
        else:
            warnings.warn(
                f"4-parameter logistic fit failed ({fit.message}); plcc_logistic falls back to raw PLCC",
                LogisticFitWarning,
                stacklevel=2,
            )
            out["plcc_logistic"] = out["plcc"]
    return out

