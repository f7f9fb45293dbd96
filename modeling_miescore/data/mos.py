"""Mean opinion scores from raw subjective ratings (MIEScore paper, "Subjective Data Processing").

Pipeline (paper section "Subjective Data Processing", following ITU-R BT.500 Annex 2 §2.3.1,
renumbered A1-2.3.1 in BT.500-14):

1. **Outlier ratings.** For every (item, dimension) cell, over all of its ratings: mean ``mu``,
   population standard deviation ``sigma`` (ddof=0) and Pearson kurtosis ``beta2 = m4 / m2**2``
   (biased central moments; a normal distribution gives 3). If ``2 <= beta2 <= 4`` the cell is
   treated as normal and the bound is ``2 * sigma``, otherwise ``sqrt(20) * sigma``. A rating is an
   outlier when it lies *at or beyond* the bound: ``r >= mu + bound`` counts towards the rater's
   ``P``, ``r <= mu - bound`` towards ``Q``. Cells with ``sigma == 0`` (a single rating, or a
   unanimous cell) have no outliers. Outlier ratings are removed (the paper removed 5.24%).
2. **Subject screening** (``rule``), with P, Q and n counted for each subject **pooled over all
   dimensions** (BT.500 counts a subject's P/Q over all of its ratings; n is the subject's own
   number of ratings, which equals BT.500's J*K*R in a complete design and is fairer in an
   incomplete one). ``"bt500"``: reject when ``(P+Q)/n > 0.05`` and ``|P-Q|/(P+Q) < 0.3``.
   ``"paper"``: reject when ``(P+Q)/n > 0.05``. If every subject would be rejected, none is (the
   BT.500 convention, applied to both rules) and the report carries a warning. All ratings of a
   rejected subject are removed.
3. **Z-scores.** On the remaining ratings, per subject and per dimension:
   ``z = (r - mu_subject) / sigma_subject`` (sample std, ddof=1 by default), paper eq. 1.
4. **MOS.** Per (item, dimension): ``z_bar = mean(z)``, ``MOS = 100 * (z_bar + 3) / 6`` (paper
   eq. 1). Values are *not* clipped to [0, 100]; the report notes how many fall outside.
5. **Overall.** ``MOS_VQ**0.3 * MOS_IF**0.4 * MOS_AP**0.3`` (paper eq. 2), see :func:`overall_mos`
   and :func:`pivot_mos`.

Steps 1 and 2 are in :mod:`modeling_miescore.data.bt500`. Everything is vectorised with numpy
``bincount`` over integer group codes, so a table of the paper's size (1.62M ratings) is processed in
seconds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..hub.miescore_overall import OVERALL_WEIGHTS, overall_score
from .bt500 import REL_TOL, CellOutliers, find_outliers, group_mean_std, screen_subjects
from .schema import DIMENSIONS, MOS_SCALE

__all__ = [
    "OVERALL_WEIGHTS",
    "REQUIRED_COLUMNS",
    "RULES",
    "ScreeningReport",
    "compute_mos",
    "overall_mos",
    "pivot_mos",
]

REQUIRED_COLUMNS = ("subject_id", "item_id", "dimension", "rating")
RULES = ("bt500", "paper")

# Paper eq. 1: MOS = 100 (z + 3) / 6, i.e. z in [-3, 3] maps onto [0, 100].
_Z_RANGE = 3.0
_MOS_PER_Z = MOS_SCALE / (2 * _Z_RANGE)
_MAX_LISTED = 10  # how many offending rows / subjects a message lists


@dataclass
class ScreeningReport:
    """Outcome of outlier removal and subject screening in :func:`compute_mos`.

    Attributes:
        removed_fraction: share of input ratings removed: outliers plus every rating of a rejected
            subject (a rating that is both counts once).
        n_outliers: outlier ratings over all subjects, rejected ones included.
        subject_stats: one row per subject: ``subject, n, P, Q, ratio, asymmetry, rejected``
            where ``n`` is the subject's number of ratings over all dimensions, ``ratio`` is
            ``(P+Q)/n`` and ``asymmetry`` is ``|P-Q|/(P+Q)`` (NaN when ``P+Q == 0``).
        item_stats: one row per (item, dimension) cell: ``item_id, dimension, n, mean, sigma,
            kurtosis, normal, bound, n_outliers`` (``sigma`` with ddof=0, ``kurtosis`` NaN when
            ``sigma == 0``, ``bound`` already multiplied by ``sigma``).
    """

    rule: str
    rejected_subjects: list
    removed_fraction: float
    n_ratings: int
    n_outliers: int
    n_removed: int
    subject_stats: pd.DataFrame
    item_stats: pd.DataFrame
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def outlier_fraction(self) -> float:
        """Share of input ratings that are outliers (the paper's "5.24%" figure)."""
        return self.n_outliers / self.n_ratings if self.n_ratings else 0.0

    def to_dict(self, include_item_stats: bool = False) -> dict:
        """JSON-serialisable summary (``json.dumps(report.to_dict())`` works).

        ``item_stats`` is left out unless asked for, since it has one row per item.
        """
        out = {
            "rule": self.rule,
            "rejected_subjects": [_py(s) for s in self.rejected_subjects],
            "removed_fraction": float(self.removed_fraction),
            "outlier_fraction": float(self.outlier_fraction),
            "n_ratings": int(self.n_ratings),
            "n_outliers": int(self.n_outliers),
            "n_removed": int(self.n_removed),
            "subject_stats": _records(self.subject_stats),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }
        if include_item_stats:
            out["item_stats"] = _records(self.item_stats)
        return out


def _py(value: Any) -> Any:
    """numpy scalar -> Python scalar, NaN -> None (JSON has no NaN)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(df: pd.DataFrame) -> list:
    return [{k: _py(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def _listing(values) -> str:
    values = list(values)
    shown = ", ".join(repr(_py(v)) for v in values[:_MAX_LISTED])
    return shown + (f", ... ({len(values)} in all)" if len(values) > _MAX_LISTED else "")


def _validate(ratings) -> pd.DataFrame:
    """Return a clean copy with the four required columns and a float ``rating`` column."""
    if isinstance(ratings, pd.DataFrame):
        df = ratings
    else:
        try:
            df = pd.DataFrame(ratings)
        except Exception as exc:  # noqa: BLE001 - re-raised with a clearer message
            raise ValueError(
                "compute_mos: `ratings` must be a pandas DataFrame or something pd.DataFrame() "
                f"accepts (e.g. a list of dicts); got {type(ratings).__name__}: {exc}"
            ) from exc
    if len(df) == 0:
        raise ValueError(
            "compute_mos: the ratings table is empty; pass at least one row with columns "
            f"{list(REQUIRED_COLUMNS)}."
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"compute_mos: missing column(s) {missing}; the table needs columns "
            f"{list(REQUIRED_COLUMNS)} (found {list(map(str, df.columns))}). Rename your columns, "
            "and for a single-dimension study add a constant one, e.g. df['dimension'] = 'quality'."
        )
    df = df.loc[:, list(REQUIRED_COLUMNS)].reset_index(drop=True)

    for col in REQUIRED_COLUMNS[:3]:
        bad = df.index[df[col].isna()]
        if len(bad):
            raise ValueError(
                f"compute_mos: column {col!r} is missing (NaN/None) in row(s) {_listing(bad)} "
                "(0-based positions); fill in the id or drop those rows."
            )

    raw = df["rating"]
    if pd.api.types.is_bool_dtype(raw):
        raise ValueError("compute_mos: column 'rating' is boolean; pass numeric ratings.")
    numeric = pd.to_numeric(raw, errors="coerce")
    non_numeric = df.index[numeric.isna() & raw.notna()]
    if len(non_numeric):
        raise ValueError(
            "compute_mos: column 'rating' has non-numeric value(s) "
            f"{_listing(raw.iloc[non_numeric[:_MAX_LISTED]])} in row(s) {_listing(non_numeric)} "
            "(0-based positions); convert them to numbers, e.g. "
            "pd.to_numeric(df['rating']), or drop those rows."
        )
    values = numeric.to_numpy(dtype=float, na_value=np.nan)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise ValueError(
            f"compute_mos: column 'rating' is NaN or infinite in row(s) {_listing(bad)} "
            "(0-based positions); drop unrated rows first, e.g. "
            "df = df.dropna(subset=['rating'])."
        )
    df["rating"] = values
    return df


def _codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and uniques, sorted when the values are sortable."""
    try:
        return pd.factorize(column, sort=True)
    except TypeError:  # mixed, unorderable types
        return pd.factorize(column, sort=False)


@dataclass
class _Groups:
    """Integer codes of the ratings table: subjects, items, dimensions, and (item, dimension) cells."""

    subject: np.ndarray
    subjects: np.ndarray
    items: np.ndarray
    dim: np.ndarray
    dims: np.ndarray
    cell: np.ndarray  # cell code of each rating
    cell_keys: np.ndarray  # item code * n_dims + dimension code of each cell

    @classmethod
    def of(cls, df: pd.DataFrame) -> "_Groups":
        subject, subjects = _codes(df["subject_id"])
        item, items = _codes(df["item_id"])
        dim, dims = _codes(df["dimension"])
        cell, cell_keys = pd.factorize(item.astype(np.int64) * len(dims) + dim, sort=True)
        return cls(subject, subjects, items, dim, dims, cell, cell_keys)


def _zscores(r: np.ndarray, groups: _Groups, keep: np.ndarray, ddof: int, notes: list) -> np.ndarray:
    """Step 3, paper eq. 1: ``z = (r - mu_subject) / sigma_subject`` per subject and dimension, on the kept ratings."""
    n_dims = len(groups.dims)
    codes, keys = pd.factorize((groups.subject.astype(np.int64) * n_dims + groups.dim)[keep], sort=True)
    kept = r[keep]
    n, _, std, dev = group_mean_std(codes, kept, len(keys), ddof=ddof)
    scale = np.maximum(1.0, np.abs(kept).max()) if len(kept) else 1.0
    degenerate = ~(std > REL_TOL * scale)  # zero variance, or too few ratings for ddof
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(degenerate[codes], 0.0, dev / np.where(degenerate, 1.0, std)[codes])
    if degenerate.any():
        pairs = [
            f"{_py(groups.subjects[key // n_dims])!r}/{_py(groups.dims[key % n_dims])!r} (n={int(count)})"
            for key, count in zip(keys[degenerate], n[degenerate])
        ]
        notes.append(
            "z-score undefined (zero variance or a single valid rating) for subject/dimension "
            f"{_listing(pairs)}: those ratings get z = 0"
        )
    return z


def _mos_table(df: pd.DataFrame, groups: _Groups, z: np.ndarray, keep: np.ndarray) -> pd.DataFrame:
    """Step 4, paper eq. 1: per (item, dimension), ``MOS = 100 (mean(z) + 3) / 6`` and the z spread on that scale."""
    n_dims, n_cells = len(groups.dims), len(groups.cell_keys)
    n, z_mean, z_std, _ = group_mean_std(groups.cell[keep], z, n_cells, ddof=1)
    table = pd.DataFrame(
        {
            "item_id": np.asarray(groups.items, dtype=object)[groups.cell_keys // n_dims],
            "dimension": np.asarray(groups.dims, dtype=object)[groups.cell_keys % n_dims],
            "mos": _MOS_PER_Z * (z_mean + _Z_RANGE),
            "std": _MOS_PER_Z * z_std,
            "n_ratings": n.astype(np.int64),
        }
    )
    for col in ("item_id", "dimension"):
        try:
            table[col] = table[col].astype(df[col].dtype)
        except (TypeError, ValueError):
            pass
    return table


def _item_stats(mos_table: pd.DataFrame, groups: _Groups, outliers: CellOutliers) -> pd.DataFrame:
    n_cells = len(groups.cell_keys)
    return pd.DataFrame(
        {
            "item_id": mos_table["item_id"],
            "dimension": mos_table["dimension"],
            "n": outliers.n.astype(np.int64),
            "mean": outliers.mean,
            "sigma": outliers.sigma,
            "kurtosis": outliers.kurtosis,
            "normal": outliers.normal,
            "bound": np.where(outliers.spread, outliers.bound_factor * outliers.sigma, np.nan),
            "n_outliers": np.bincount(groups.cell, weights=outliers.is_outlier, minlength=n_cells).astype(np.int64),
        }
    )


def _check_mos(mos_table: pd.DataFrame, report_warnings: list, notes: list) -> None:
    empty = (mos_table["n_ratings"] == 0).to_numpy()
    if empty.any():
        cells = [f"{a!r}/{b!r}" for a, b in zip(mos_table["item_id"][empty], mos_table["dimension"][empty])]
        report_warnings.append(
            f"{int(empty.sum())} item/dimension cell(s) lost every rating (all raters rejected): "
            f"{_listing(cells)}; their mos is NaN"
        )
    mos = mos_table["mos"].to_numpy()
    outside = np.isfinite(mos) & ((mos < 0) | (mos > 100))
    if outside.any():
        notes.append(
            f"{int(outside.sum())} MOS value(s) fall outside [0, 100] (mean z beyond +/-3); "
            "they are left unclipped here (pivot_mos/overall_mos clip at 0)"
        )


def compute_mos(ratings, rule: str = "bt500", *, zscore_ddof: int = 1):
    """Screen raw ratings and turn them into MOS on the paper's 0–100 scale (the steps of the module docstring).

    ``ratings``: one row per rating with columns ``subject_id, item_id, dimension, rating`` (others ignored).
    ``rule="bt500"`` keeps a consistently harsh or lenient rater, whose bias z-scoring removes anyway, and
    rejects erratic ones; ``"paper"`` is the paper's literal "over 5% of their ratings are outliers" (on the
    Netflix public raw dataset, 26 subjects and 79 items, it rejects 8 subjects where BT.500 rejects one).
    ``zscore_ddof``: 1 = sample std, as sureal's ``ZS_MOS``; 0 = population std.

    Returns ``(mos_table, report)``: one row per (item, dimension) with columns ``item_id, dimension, mos, std,
    n_ratings``, where ``std = 100 * std(z) / 6`` is the spread of opinions (not the standard error; NaN when
    ``n_ratings < 2``) and a cell whose ratings were all removed has ``mos`` NaN; and a :class:`ScreeningReport`.
    """
    if rule not in RULES:
        raise ValueError(f"compute_mos: unknown rule {rule!r}; allowed values are {list(RULES)}.")
    if zscore_ddof not in (0, 1):
        raise ValueError(f"compute_mos: zscore_ddof must be 0 or 1, got {zscore_ddof!r}.")
    df = _validate(ratings)
    r = df["rating"].to_numpy()
    groups = _Groups.of(df)
    report_warnings: list[str] = []
    notes: list[str] = []

    outliers = find_outliers(r, groups.cell, len(groups.cell_keys))  # step 1
    subject_stats = screen_subjects(groups.subject, len(groups.subjects), outliers, rule)  # step 2
    flagged = subject_stats.pop("flagged").to_numpy()
    if flagged.all():
        msg = (f"every one of the {len(flagged)} subject(s) met the {rule!r} rejection rule; following ITU-R "
               "BT.500, none was rejected (check the data: the rule assumes most raters are reliable)")
        report_warnings.append(msg)
        notes.append(f"all {len(flagged)} subject(s) flagged by rule {rule!r}: reject none")
        warnings.warn("compute_mos: " + msg, RuntimeWarning, stacklevel=2)
    rejected = flagged & ~flagged.all()
    subject_stats.insert(0, "subject", groups.subjects)
    subject_stats["rejected"] = rejected
    removed = outliers.is_outlier | rejected[groups.subject]

    z = _zscores(r, groups, ~removed, zscore_ddof, notes)  # step 3
    mos_table = _mos_table(df, groups, z, ~removed)  # step 4
    _check_mos(mos_table, report_warnings, notes)
    report = ScreeningReport(
        rule=rule, rejected_subjects=[_py(s) for s in np.asarray(groups.subjects, dtype=object)[rejected]],
        removed_fraction=int(removed.sum()) / len(r), n_ratings=len(r), n_outliers=int(outliers.is_outlier.sum()),
        n_removed=int(removed.sum()), subject_stats=subject_stats, item_stats=_item_stats(mos_table, groups, outliers),
        warnings=report_warnings, notes=notes,
    )
    report.notes += _summary_notes(report, outliers, len(groups.dims))
    return mos_table, report


def _summary_notes(report: ScreeningReport, outliers: CellOutliers, n_dims: int) -> list[str]:
    notes = []
    n_zero = int((~outliers.spread).sum())
    if n_zero:
        notes.append(f"{n_zero} item/dimension cell(s) have zero spread (one rating, or all ratings equal): "
                     "no outliers possible there")
    n, n_subjects = report.n_ratings, len(report.subject_stats)
    notes.append(
        f"rule {report.rule!r}: P/Q/n pooled over {n_dims} dimension(s); {len(report.rejected_subjects)} of "
        f"{n_subjects} subject(s) rejected; {report.n_outliers} outlier rating(s) ({report.n_outliers / n:.2%}); "
        f"{report.n_removed} of {n} rating(s) removed ({report.n_removed / n:.2%})"
    )
    return notes


def overall_mos(mos_vq, mos_if, mos_ap, weights=OVERALL_WEIGHTS):
    """Paper eq. 2: ``MOS_VQ**w0 * MOS_IF**w1 * MOS_AP**w2`` with weights (0.3, 0.4, 0.3).

    Each MOS is clipped at 0 first: eq. 1 gives a negative MOS when an item's mean z-score is below -3, and a
    negative base has no real fractional power.
    """
    if len(weights) != 3:
        raise ValueError(f"overall_mos: weights must have 3 entries (VQ, IF, AP), got {weights!r}.")
    if any(not math.isfinite(float(x)) for x in weights):
        raise ValueError(f"overall_mos: weights must be finite and non-negative, got {weights!r}.")
    return overall_score(*(np.asarray(m, dtype=float) for m in (mos_vq, mos_if, mos_ap)), weights=weights)


def pivot_mos(mos_table: pd.DataFrame, weights=OVERALL_WEIGHTS) -> pd.DataFrame:
    """One row per item: ``item_id``, then ``mos_<dim>``, ``std_<dim>``, ``n_<dim>`` per dimension.

    ``mos_overall`` (:func:`overall_mos`) is added when the three paper dimensions are all present.
    """
    missing = [c for c in ("item_id", "dimension", "mos", "std", "n_ratings") if c not in mos_table.columns]
    if missing:
        raise ValueError(
            f"pivot_mos: missing column(s) {missing}; pass the first element returned by "
            "compute_mos()."
        )
    if mos_table.duplicated(["item_id", "dimension"]).any():
        raise ValueError("pivot_mos: duplicate (item_id, dimension) rows; pass compute_mos() output.")
    wide = mos_table.pivot(index="item_id", columns="dimension", values=["mos", "std", "n_ratings"])
    out = pd.DataFrame(index=wide.index)
    present = list(wide.columns.get_level_values(1).unique())
    ordered = [d for d in DIMENSIONS if d in present] + [d for d in present if d not in DIMENSIONS]
    for dim in ordered:
        out[f"mos_{dim}"] = wide[("mos", dim)].astype(float)
        out[f"std_{dim}"] = wide[("std", dim)].astype(float)
        out[f"n_{dim}"] = wide[("n_ratings", dim)].fillna(0).astype(np.int64)
    if all(f"mos_{d}" in out.columns for d in DIMENSIONS):
        out["mos_overall"] = overall_mos(*(out[f"mos_{d}"].to_numpy() for d in DIMENSIONS), weights=weights)
    return out.reset_index()
