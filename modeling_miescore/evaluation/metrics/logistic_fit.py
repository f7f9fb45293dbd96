"""The monotonic 4-parameter logistic that maps predictions to MOS before PLCC, with a guard against degenerate fits.

The convention (MIEScore paper, table 3, "PLCC"; IQA practice since the VQEG FR-TV Phase I report, 2000, which fits
a monotonic logistic mapping from objective scores to MOS per data set before computing Pearson's r) is
``y = (b1 - b2) / (1 + exp(-(x - b3) / |b4|)) + b2``, fitted by least squares from data-driven starts (pyiqa
``calculate_plcc(fit_scale='logistic_4params')``; LIQE ``compute_metrics``, which writes ``|b4|`` so that the curve
stays monotonic).

On small or weakly related data the least-squares optimum is often a *step* through one or two points, with
asymptotes far outside the MOS range: PLCC after such a "fit" measures how well a two-level function separates a
few points, not agreement (the report that motivated this module: PLCC (logistic) 0.51 beside SRCC 0.08 on a
24-edit test split, β = (39.3, -4276, ...)). :func:`fit_logistic` therefore checks every fit (:func:`degeneracy`)
and refits a degenerate one with bounded parameters; a bounded fit that is itself degenerate, or that rests on one
of its bounds (the bound, not the data, decides its shape), is reported as degenerate: callers then report raw PLCC
only. An asymptote far outside the MOS range alone is not degenerate (a convex relation uses only the lower part of
the curve) but comes with a ``caveat``. The numeric bounds and thresholds are ours (module constants), chosen so
that simulated data with a clear relation (24 items at correlation 0.9 or more; 200 to 2,000 items at 0.6 or more;
convex, or a sharp true sigmoid on 200 items) are never flagged, while most fits of a random-weight evaluator's
near-constant scores are (``benchmarks/logistic_fit_guard.py`` prints these rates).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special

from .coefficients import pearson, spearman
from .inputs import is_constant, paired

__all__ = ["FIT_STATUSES", "LogisticFit", "degeneracy", "fit_logistic", "logistic4"]

# What a fit can be: usable ("fitted": plain least squares; "constrained": the bounded refit) or not.
FIT_STATUSES = ("fitted", "constrained", "degenerate", "failed")
# Degeneracy thresholds (ours; see the module docstring).
MIN_DISTINCT_PREDICTIONS = 8  # two distinct predictions per parameter
SLOPE_BAND = 0.1  # "on the rise": a fitted value between 10% and 90% of the curve's rise over the data
MIN_POINTS_ON_RISE = 3  # ... at least this many predictions, and at least this fraction of them:
MIN_FRACTION_ON_RISE = 0.05
MAX_RISE_IN_ONE_GAP = 0.5  # ... and no more than half of the rise between two neighbouring predictions
MIN_RISE_WIDTH = 1.0 / 16  # ... which takes at least this fraction of the predictions' range
MAX_OUTSIDE_MOS = 0.5  # fitted values may leave the observed MOS range by at most this fraction of it
MAX_PLCC_ABOVE_SRCC = 0.3  # a monotonic map cannot make a weak rank relation strongly linear
# Bounds of the constrained refit.
ASYMPTOTE_MARGIN = 1.0  # asymptotes within [min MOS - m * range, max MOS + m * range]
MIN_WIDTH_FRACTION = 1.0 / 16  # |b4| >= this fraction of the predictions' range
_AT_BOUND = 1e-3  # relative distance to a bound that counts as "on" it


def logistic4(x: Any, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """Monotonic 4-parameter logistic (module docstring), increasing when ``b1 > b2``; ``expit`` never overflows."""
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
    """Result of :func:`fit_logistic`; calling it maps predictions to the MOS scale (NaN without ``success``).

    ``success`` is True for ``"fitted"`` and ``"constrained"``: only then is the curve meant to be used. ``params``
    are on the scale of the raw predictions (a degenerate fit keeps the plain fit's, for inspection). ``caveat`` is
    set on a usable fit with an asymptote far outside the MOS range, so that nobody prints such a β without a word.
    """

    params: tuple[float, float, float, float]
    success: bool
    message: str = ""
    n: int = 0
    status: str = "fitted"
    caveat: str = ""

    @property
    def degenerate(self) -> bool:
        return self.status == "degenerate"

    @property
    def constrained(self) -> bool:
        return self.status == "constrained"

    def __call__(self, x: Any) -> np.ndarray:
        if not self.success:
            return np.full(np.shape(x), np.nan)
        return logistic4(x, *self.params)


def _unusable(status: str, message: str, n: int, params=(math.nan,) * 4) -> LogisticFit:
    return LogisticFit(params=tuple(float(p) for p in params), success=False, message=message, n=n, status=status)


def degeneracy(pred: Any, mos: Any, params) -> str | None:
    """Why the logistic ``params`` are a degenerate fit of ``mos`` from ``pred`` (off the MOS range, a step, or PLCC
    far above |SRCC|; thresholds: the module constants), or None when they are not."""
    x, y = paired(pred, mos)
    fitted = logistic4(x, *params)
    if not np.all(np.isfinite(fitted)) or is_constant(fitted):
        return "the fitted curve is flat or non-finite on the data"
    lo, hi = float(fitted.min()), float(fitted.max())
    y_lo, y_hi = float(y.min()), float(y.max())
    margin = MAX_OUTSIDE_MOS * (y_hi - y_lo)
    if lo < y_lo - margin or hi > y_hi + margin:
        return (f"the fitted curve leaves the MOS range (it gives {lo:.4g} to {hi:.4g} for MOS {y_lo:.4g} to "
                f"{y_hi:.4g})")
    rise = hi - lo
    on_rise = int(np.count_nonzero((fitted > lo + SLOPE_BAND * rise) & (fitted < hi - SLOPE_BAND * rise)))
    need = max(MIN_POINTS_ON_RISE, math.ceil(MIN_FRACTION_ON_RISE * x.shape[0]))
    if on_rise < need:
        return (f"the fitted curve is a step: {on_rise} of {x.shape[0]} predictions lie on its rise (10-90%), "
                f"at least {need} needed")
    gap = float(np.max(np.abs(np.diff(fitted[np.argsort(x, kind="stable")])))) / rise
    if gap > MAX_RISE_IN_ONE_GAP:
        return (f"the fitted curve is a step: {100 * gap:.0f}% of its rise falls between two neighbouring "
                f"predictions (at most {100 * MAX_RISE_IN_ONE_GAP:.0f}%)")
    width = _rise_width(params, lo + SLOPE_BAND * rise, hi - SLOPE_BAND * rise) / float(x.max() - x.min())
    if width < MIN_RISE_WIDTH:
        return (f"the fitted curve is a step: it rises (10-90%) within {100 * width:.1f}% of the predictions' range "
                f"(at least {100 * MIN_RISE_WIDTH:.1f}%)")
    fit_r, rank_r = abs(pearson(fitted, y)), abs(spearman(x, y))
    if fit_r - rank_r > MAX_PLCC_ABOVE_SRCC:
        return (f"PLCC after the fit ({fit_r:.3f}) exceeds |SRCC| ({rank_r:.3f}) by more than "
                f"{MAX_PLCC_ABOVE_SRCC:g}")
    return None


def _rise_width(params, low: float, high: float) -> float:
    """The length of prediction axis over which the logistic ``params`` goes from the value ``low`` to ``high``."""
    b1, b2, b3, b4 = params
    fractions = (np.array([low, high]) - b2) / (b1 - b2)
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = b3 + abs(b4) * special.logit(np.clip(fractions, 1e-300, 1 - 1e-16))
    return float(abs(xs[1] - xs[0]))


def _far_asymptote(y: np.ndarray, params) -> str:
    """A caveat when an asymptote lies more than :data:`ASYMPTOTE_MARGIN` MOS ranges outside the observed MOS."""
    lo, hi = float(y.min()), float(y.max())
    margin = ASYMPTOTE_MARGIN * (hi - lo)
    for name, b in zip(("upper", "lower"), sorted(params[:2], reverse=True)):
        if b < lo - margin or b > hi + margin:
            return (f"the {name} asymptote ({b:.4g}) lies far outside the MOS range ({lo:.4g} to {hi:.4g}): over the "
                    "predictions the curve is only a part of its rise, so β means little by itself")
    return ""


class _Problem:
    """One fit's data: standardised predictions ``z`` (better conditioned), the MOS, starts and bounds.

    The bounded refit runs Levenberg-Marquardt (as the plain fit) on unbounded coordinates ``u`` mapped into the
    box: ``b = low + (high - low) * expit(u)`` for the asymptotes and the midpoint, ``b4 = low + exp(u)`` for the
    width. A bounded trust-region solver (``curve_fit(bounds=...)``) gives the same optima some ten times slower,
    which matters inside a bootstrap.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, maxfev: int):
        self.x, self.y, self.maxfev = x, y, int(maxfev)
        self.mu, self.sd = float(x.mean()), float(x.std())
        self.z = (x - self.mu) / self.sd
        hi, lo = float(y.max()), float(y.min())
        self.b12 = (hi, lo) if spearman(x, y) >= 0 else (lo, hi)  # the direction of the relation
        margin = ASYMPTOTE_MARGIN * (hi - lo)
        z_lo, z_hi = float(self.z.min()), float(self.z.max())
        self.lower = np.array([lo - margin, lo - margin, z_lo, MIN_WIDTH_FRACTION * (z_hi - z_lo)])
        self.upper = np.array([hi + margin, hi + margin, z_hi, np.inf])

    def to_box(self, u: np.ndarray) -> np.ndarray:
        """Unbounded coordinates -> parameters inside the bounds."""
        b = self.lower[:3] + (self.upper[:3] - self.lower[:3]) * special.expit(u[:3])
        return np.append(b, self.lower[3] + np.exp(min(float(u[3]), 700.0)))

    def from_box(self, p: np.ndarray) -> np.ndarray:
        """Parameters (clipped strictly inside the bounds) -> unbounded coordinates."""
        frac = np.clip((p[:3] - self.lower[:3]) / (self.upper[:3] - self.lower[:3]), 0.02, 0.98)
        return np.append(special.logit(frac), math.log(max(float(p[3]) - self.lower[3], 0.5 * self.lower[3])))

    def _bounded_model(self):
        def model(z, *u):
            return logistic4(z, *self.to_box(np.asarray(u)))

        def jac(z, *u):
            u = np.asarray(u)
            s = special.expit(u[:3])
            scale = np.append((self.upper[:3] - self.lower[:3]) * s * (1.0 - s), np.exp(min(float(u[3]), 700.0)))
            return _logistic4_jac(z, *self.to_box(u)) * scale

        return model, jac

    def fit(self, bounded: bool) -> tuple[np.ndarray | None, list[str]]:
        """Least squares from pyiqa's and LIQE's starts (``b4`` = std/4 and std; the lower-error fit wins), the
        bounded refit from LIQE's (the wider one) only. Returns the parameters in standardised coordinates (inside
        the bounds when ``bounded``)."""
        model, jac = self._bounded_model() if bounded else (logistic4, _logistic4_jac)
        best, errors = None, []
        for scale in (1.0,) if bounded else (0.25, 1.0):
            p0 = np.array([*self.b12, 0.0, scale])
            p0 = self.from_box(p0) if bounded else p0
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # OptimizeWarning (covariance) and overflow are harmless here
                    popt, _ = optimize.curve_fit(model, self.z, self.y, p0=p0, jac=jac, maxfev=self.maxfev)
            except (RuntimeError, ValueError, TypeError, FloatingPointError, np.linalg.LinAlgError) as exc:
                errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
                continue
            popt = self.to_box(popt) if bounded else popt
            if not np.all(np.isfinite(popt)):
                errors.append("non-finite parameters")
                continue
            sse = float(np.sum((logistic4(self.z, *popt) - self.y) ** 2))
            if best is None or sse < best[0]:
                best = (sse, popt)
        return (None if best is None else best[1]), errors

    def raw(self, popt: np.ndarray) -> tuple[float, float, float, float]:
        """Parameters on the raw prediction scale."""
        p1, p2, p3, p4 = (float(v) for v in popt)
        return p1, p2, self.mu + self.sd * p3, self.sd * abs(p4)

    def bound_hit(self, popt: np.ndarray) -> str | None:
        """Which parameter of a bounded fit rests on its bound (within :data:`_AT_BOUND` of the box), if any."""
        names = ("the upper asymptote", "the lower asymptote", "the midpoint")
        span = self.upper[:3] - self.lower[:3]
        for name, v, lo, hi, s in zip(names, popt[:3], self.lower[:3], self.upper[:3], span):
            if v - lo <= _AT_BOUND * s or hi - v <= _AT_BOUND * s:
                return f"{name} rests on its bound"
        if popt[3] - self.lower[3] <= _AT_BOUND * self.lower[3]:
            return "the transition width rests on its lower bound (the data ask for a step)"
        return None


def fit_logistic(pred: Any, mos: Any, *, maxfev: int = 10000, nan_policy: str = "raise",
                 constrain: bool = True) -> LogisticFit:
    """Fit :func:`logistic4` mapping predictions to MOS (least squares, ``scipy.optimize.curve_fit``), guarded
    (module docstring); ``maxfev`` bounds the function evaluations of each start.

    Never raises on a bad fit: returns ``success=False`` with a message. Input errors (length mismatch, NaN with
    ``nan_policy='raise'``) raise ``ValueError``.
    """
    x, y = paired(pred, mos, nan_policy=nan_policy)
    n = x.shape[0]
    if n < 5:
        return _unusable("failed", f"a 4-parameter fit needs at least 5 items, got {n}", n)
    if is_constant(x):
        return _unusable("failed", "predictions are constant", n)
    if is_constant(y):
        return _unusable("failed", "MOS values are constant", n)
    distinct = int(np.unique(x).shape[0])
    if distinct < MIN_DISTINCT_PREDICTIONS:
        return _unusable("degenerate", f"only {distinct} distinct predictions (a 4-parameter fit needs at least "
                                       f"{MIN_DISTINCT_PREDICTIONS})", n)
    problem = _Problem(x, y, maxfev)
    popt, errors = problem.fit(bounded=False)
    if popt is None:
        return _unusable("failed", "; ".join(dict.fromkeys(errors)) or "fit did not converge", n)
    params = problem.raw(popt)
    fitted = logistic4(x, *params)
    if not np.all(np.isfinite(fitted)) or is_constant(fitted):
        return _unusable("failed", "the fitted curve is flat or non-finite on the data", n)
    reason = degeneracy(x, y, params)
    if reason is None:
        return LogisticFit(params=params, success=True, n=n, caveat=_far_asymptote(y, params))
    if not constrain:
        return _unusable("degenerate", reason, n, params)
    bounded, _ = problem.fit(bounded=True)
    if bounded is None:
        return _unusable("degenerate", f"{reason}; the bounded refit did not converge", n, params)
    bounded_params = problem.raw(bounded)
    still = problem.bound_hit(bounded) or degeneracy(x, y, bounded_params)
    if still is not None:
        return _unusable("degenerate", f"{reason}; bounded refit: {still}", n, params)
    return LogisticFit(params=bounded_params, success=True, n=n, status="constrained",
                       message=f"the least-squares fit was degenerate ({reason}); the bounded refit is used")
