"""How often the logistic-fit guard flags a fit, on simulated data with and without a real relation (CPU; not a test).

    python benchmarks/logistic_fit_guard.py [--seeds 150]

For each scenario (predictions vs MOS on 0-100; ``lin<s>``: MOS + Gaussian noise of std s; ``exp``: a convex map;
``sharp``: a true sigmoid 10 units wide; ``flat``: a random-weight evaluator's scores, 50 +- 0.05 whatever the edit;
``flat+outlier``: the same with one edit at 60) it prints how many fits
(:func:`modeling_miescore.evaluation.metrics.logistic_fit.fit_logistic`) come out fitted, constrained (the bounded
refit), degenerate or failed, and the mean of PLCC(logistic) - |SRCC| with the plain least-squares fit (what was
reported before the guard) and as reported now (raw PLCC where the fit is degenerate). The thresholds are meant
to leave every scenario with a clear relation untouched and to catch the steps of the ``flat`` ones.
"""

from __future__ import annotations

import argparse
import collections
import warnings

import numpy as np

from modeling_miescore.evaluation.metrics.coefficients import pearson, spearman
from modeling_miescore.evaluation.metrics.logistic_fit import FIT_STATUSES, fit_logistic, logistic4

SCENARIOS = [("lin5", 24), ("lin10", 24), ("lin20", 24), ("lin40", 24), ("lin10", 200), ("lin30", 200),
             ("lin20", 2000), ("exp", 60), ("exp", 400), ("sharp", 200), ("flat", 24), ("flat+outlier", 24),
             ("flat", 144)]


def simulate(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(predictions, MOS)`` of one scenario."""
    mos = rng.uniform(10, 90, n)
    if kind.startswith("lin"):
        return mos + rng.normal(0, float(kind[3:]), n), mos
    if kind == "exp":
        return np.exp(mos / 15) + rng.normal(0, 1.0, n), mos
    if kind == "sharp":
        x = rng.uniform(0, 100, n)
        return x, 50 + 40 * np.tanh((x - 50) / 5) + rng.normal(0, 3, n)
    pred = 50 + rng.normal(0, 0.05, n)
    if kind == "flat+outlier":
        pred[np.argmax(mos)] = 60.0
    return pred, mos


def lift(pred: np.ndarray, mos: np.ndarray, params) -> float:
    """PLCC after a fit with ``params`` minus |SRCC| (raw PLCC when there are no usable parameters)."""
    fitted = logistic4(pred, *params) if np.all(np.isfinite(params)) else pred
    return abs(pearson(fitted, mos)) - abs(spearman(pred, mos))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=150)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{'scenario':<14}{'n':>6}  " + "".join(f"{s:>12}" for s in FIT_STATUSES)
          + f"{'lift, plain fit':>17}{'lift, reported':>16}")
    for kind, n in SCENARIOS:
        counts: collections.Counter = collections.Counter()
        plain_lift, reported_lift = [], []
        for seed in range(args.seeds):
            pred, mos = simulate(kind, n, np.random.default_rng(seed))
            fit = fit_logistic(pred, mos)
            counts[fit.status] += 1
            plain = fit_logistic(pred, mos, constrain=False)
            plain_params = plain.params if plain.status in ("fitted", "degenerate") else (np.nan,) * 4
            plain_lift.append(lift(pred, mos, plain_params))
            reported_lift.append(lift(pred, mos, fit.params if fit.success else (np.nan,) * 4))
        print(f"{kind:<14}{n:>6}  " + "".join(f"{counts[s]:>12}" for s in FIT_STATUSES)
              + f"{np.nanmean(plain_lift):>17.3f}{np.nanmean(reported_lift):>16.3f}")


if __name__ == "__main__":
    main()
