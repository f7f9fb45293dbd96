"""Confidence intervals for the benchmark reports: :func:`~.metrics.bootstrap.bootstrap_ci` over row indices,
resampling whole instances, with a progress bar and the metric warnings collected as report notes.

Edits of one MIE-Bench instance share sources and instruction (and the groups of one MER-Bench sample share
the original image), so they are not independent: the reports resample instances, never single rows. Every
section uses the same seed, so all sections see the same resamples. Report metrics come out as
``{"value": x, "ci": [low, high]}`` with NaN written as ``None``.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..utils.numbers import finite_float
from .metrics.bootstrap import CI, bootstrap_ci
from .metrics.inputs import MetricWarning

__all__ = ["NO_VALUE", "BootstrapSettings", "InstanceBootstrap"]

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
        """The ``meta["bootstrap"]`` entry of a report; ``resampling`` says what one draw takes."""
        return {"n": int(self.n), "seed": int(self.seed), "level": float(self.level), "resampling": resampling}


def with_ci(tree: Any) -> Any:
    """Nested dict of :class:`CI` -> nested dict of ``{"value", "ci": [low, high]}`` (NaN -> None)."""
    if isinstance(tree, CI):
        return {"value": finite_float(tree.point), "ci": [finite_float(tree.low), finite_float(tree.high)]}
    if isinstance(tree, dict):
        return {k: with_ci(v) for k, v in tree.items()}
    return {"value": finite_float(tree), "ci": [None, None]}


def _point_only(tree: Any) -> Any:
    """A result tree of numbers as a tree of :class:`CI` without bounds."""
    if isinstance(tree, dict):
        return {k: _point_only(v) for k, v in tree.items()}
    v = finite_float(tree)
    return CI(math.nan if v is None else v, math.nan, math.nan)


class InstanceBootstrap:
    """Runs :func:`bootstrap_ci` over row indices resampled by instance, with a progress bar and collected notes.

    ``groups``: the instance id of every row; ``settings`` default to :class:`BootstrapSettings` ``()``.
    ``settings.n == 0`` computes point estimates only (CIs ``None``).
    ``notes`` collects the metric warnings (e.g. resamples that gave NaN) as report lines.
    """

    def __init__(self, groups: np.ndarray, settings: BootstrapSettings | None = None):
        self.groups = np.asarray(groups)
        self.settings = settings if settings is not None else BootstrapSettings()
        self.notes: list[str] = []

    def __call__(self, fn: Callable[[np.ndarray], Any], desc: str, rows: np.ndarray | None = None,
                 record_notes: bool = True) -> Any:
        """Bootstrap ``fn(row_indices)``; ``rows`` restricts resampling to a subset (stratified CIs, e.g. one
        task's instances). CIs are left out (None) when fewer than 2 instances can be drawn."""
        idx = np.arange(self.groups.shape[0]) if rows is None else np.asarray(rows)
        groups = self.groups[idx]
        n = self.settings.n if np.unique(groups).shape[0] >= 2 else 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MetricWarning)
            if n == 0:
                result = with_ci(_point_only(fn(idx)))
            else:
                result = self._resampled(fn, desc, idx, groups, n)
        if record_notes:
            for w in caught:
                note = f"{desc}: {w.message}"
                if issubclass(w.category, MetricWarning) and note not in self.notes:
                    self.notes.append(note)
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
