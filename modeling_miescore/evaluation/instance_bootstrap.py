"""Confidence intervals for the benchmark reports: :func:`~.metrics.bootstrap.bootstrap_ci` over row indices,
resampling whole instances, with a progress bar and the metric warnings collected as report notes.

Edits of one MIE-Bench instance share sources and instruction (and the groups of one MER-Bench sample share the
original image), so they are not independent: the reports resample instances, never single rows. Every section uses
the same seed, so all sections see the same resamples.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..utils.numbers import finite_float
from .metrics.bootstrap import CI, MIN_RESAMPLING_UNITS, bootstrap_ci, too_few_units
from .metrics.inputs import MetricWarning

__all__ = ["NO_VALUE", "BootstrapSettings", "InstanceBootstrap", "without_ci"]

NO_VALUE = {"value": None, "ci": [None, None]}


@dataclass(frozen=True)
class BootstrapSettings:
    """How a report resamples: ``n`` resamples of instances (0 = point estimates only, no CIs), the ``seed``,
    the confidence ``level``, and whether a progress bar is shown on stderr."""

    n: int = 1000
    seed: int = 0
    level: float = 0.95
    progress: bool = True

    def describe(self, resampling: str) -> dict:
        """The ``meta["bootstrap"]`` entry of a report; ``resampling`` says what one draw takes. ``min_units``:
        below this many resampling units a metric gets no interval (:func:`~.metrics.bootstrap.bootstrap_ci`)."""
        return {"n": int(self.n), "seed": int(self.seed), "level": float(self.level), "resampling": resampling,
                "min_units": MIN_RESAMPLING_UNITS}

    def interval(self, fn: Callable[[np.ndarray], Any], idx: np.ndarray) -> Any:
        """``fn(idx)`` as ``{"value", "ci"}`` metrics (:func:`with_ci`), the CI a percentile bootstrap over the
        positions ``idx`` (none when ``n`` is 0)."""
        return with_ci(bootstrap_ci(fn, idx, n=self.n, seed=self.seed, level=self.level) if self.n > 0 else fn(idx))


def with_ci(tree: Any) -> Any:
    """Nested dict of :class:`CI` -> nested dict of ``{"value", "ci": [low, high]}`` (NaN -> None)."""
    if isinstance(tree, CI):
        return {"value": finite_float(tree.point), "ci": [finite_float(tree.low), finite_float(tree.high)]}
    if isinstance(tree, dict):
        return {k: with_ci(v) for k, v in tree.items()}
    return {"value": finite_float(tree), "ci": [None, None]}


def without_ci(tree: Any) -> Any:
    """A tree of ``{"value", "ci"}`` metrics with every interval removed (``[None, None]``)."""
    if isinstance(tree, dict) and "value" in tree and "ci" in tree:
        return {**tree, "ci": [None, None]}
    if isinstance(tree, dict):
        return {k: without_ci(v) for k, v in tree.items()}
    return tree


class InstanceBootstrap:
    """Runs :func:`bootstrap_ci` over row indices resampled by instance (``groups``: each row's instance id), with a
    progress bar; ``notes`` collects the metric warnings as report lines. ``settings.n == 0``, or fewer than
    :data:`~.metrics.bootstrap.MIN_RESAMPLING_UNITS` instances (with a note), gives point estimates only.
    """

    def __init__(self, groups: np.ndarray, settings: BootstrapSettings | None = None, unit: str = "instances"):
        self.groups = np.asarray(groups)
        self.settings = settings if settings is not None else BootstrapSettings()
        self.unit = unit
        self.notes: list[str] = []

    def units(self, rows: np.ndarray | None = None) -> int:
        """How many distinct instances ``rows`` (default: all rows) cover."""
        groups = self.groups if rows is None else self.groups[np.asarray(rows)]
        return int(np.unique(groups).shape[0])

    def too_few(self, rows: np.ndarray | None = None) -> str | None:
        """Why ``rows`` get no interval (too few instances), or None; also None without a bootstrap (n = 0)."""
        return too_few_units(self.units(rows), self.unit) if self.settings.n else None

    def describe(self, resampling: str) -> dict:
        """``meta["bootstrap"]``: the settings, the number of instances, the minimum for an interval, and why the
        report has no intervals when it has too few (``omitted``, else None)."""
        return {**self.settings.describe(resampling), "units": self.units(), "unit": self.unit,
                "omitted": self.too_few()}

    def __call__(self, fn: Callable[[np.ndarray], Any], desc: str, rows: np.ndarray | None = None,
                 record_notes: bool = True) -> Any:
        """Bootstrap ``fn(row_indices)``; ``rows`` restricts resampling to a subset (stratified CIs, e.g. one
        task's instances). CIs are left out (None) when fewer than ``MIN_RESAMPLING_UNITS`` instances can be
        drawn; with ``record_notes`` and ``rows`` a note says so (for all rows, :meth:`describe` does)."""
        idx = np.arange(self.groups.shape[0]) if rows is None else np.asarray(rows)
        groups = self.groups[idx]
        few = self.too_few(idx)
        n = 0 if few else self.settings.n
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MetricWarning)
            if n == 0:
                result = with_ci(fn(idx))  # point estimates only
            else:
                result = self._resampled(fn, desc, idx, groups, n)
        if record_notes:
            notes = [f"{desc}: {w.message}" for w in caught if issubclass(w.category, MetricWarning)]
            # a subset's missing intervals (the whole report's are in meta["bootstrap"]["omitted"])
            notes += [f"{desc}: no confidence intervals, {few}"] if few and rows is not None else []
            self.notes += [note for note in dict.fromkeys(notes) if note not in self.notes]
        return result

    def _resampled(self, fn: Callable[[np.ndarray], Any], desc: str, idx: np.ndarray, groups: np.ndarray,
                   n: int) -> Any:
        with tqdm(total=n + 1, desc=f"bootstrap {desc}", unit="resample", file=sys.stderr, leave=False,
                  disable=not self.settings.progress) as bar:

            def ticking(i):
                try:
                    return fn(i)
                finally:
                    bar.update(1)

            cis = bootstrap_ci(ticking, idx, n=n, seed=self.settings.seed, groups=groups, level=self.settings.level)
        return with_ci(cis)
