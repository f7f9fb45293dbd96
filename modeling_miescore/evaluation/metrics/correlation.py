"""Correlation between predictions and MOS (MIEScore paper, table 3): SRCC, KRCC, PLCC, and PLCC after a
monotonic 4-parameter logistic fit (:mod:`.logistic_fit`).
"""

from __future__ import annotations

import warnings
from typing import Any


from .coefficients import kendall, pearson, spearman
from .inputs import MetricWarning, paired, warn_constant
from .logistic_fit import LogisticFit, fit_logistic, logistic4

__all__ = ["LogisticFit", "LogisticFitWarning", "correlations", "fit_logistic", "krcc", "logistic4", "plcc", "srcc"]


class LogisticFitWarning(MetricWarning):
    """The 4-parameter logistic fit failed or is degenerate; ``plcc_logistic`` fell back to raw PLCC."""


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


def correlations(
    pred: Any,
    mos: Any,
    nan_policy: str = "raise",
    *,
    logistic: bool = True,
    maxfev: int = 10000,
) -> dict[str, float]:
    """SRCC, KRCC and PLCC between predictions and MOS (MIEScore paper, table 3: rho_s, rho_k, rho_p).

    SRCC, KRCC and PLCC are on the raw predictions (the fit is monotonic, so it would not change SRCC/KRCC).
    ``plcc_logistic`` is signed like the relation, so it reads like ``plcc``; a failed or degenerate fit falls back
    to raw ``plcc`` with a :class:`LogisticFitWarning` that says why. ``logistic=False`` leaves it out (cheaper
    inside a bootstrap). Constant inputs give NaN and a :class:`ConstantInputWarning`.
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
            what = "is degenerate" if fit.degenerate else "failed"
            warnings.warn(
                f"4-parameter logistic fit {what} ({fit.message}); plcc_logistic falls back to raw PLCC",
                LogisticFitWarning,
                stacklevel=2,
            )
            out["plcc_logistic"] = out["plcc"]
    return out
