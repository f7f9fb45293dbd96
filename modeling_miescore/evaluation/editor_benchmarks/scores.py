"""From judgements to benchmark numbers: per-sample table, per-row values (one key), category means, the unweighted
mean over categories, subsets and languages, with percentile-bootstrap CIs over rows.

``mode="best"`` of :func:`row_frame` is best-of-N as EditScore's GEdit statistics script keeps it
(``max(samples, key=overall)``; the first sample wins a tie). ImgEdit's per-image mean and per-category means are
rounded to 2 places (``step1_get_avgscore.py``, ``step2_typescore.py``). A category that is expected but has no
usable row makes the released average NaN (GEdit's ``calculate_statistics.py`` takes ``np.mean`` over all task
types): the summary's scores are then None with ``not_computable`` naming the empty categories, never the mean of
the others.
"""

from __future__ import annotations

import warnings
from typing import Iterable

import numpy as np

from ..instance_bootstrap import BootstrapSettings
from .protocols import EditorBenchmark
from ..metrics.inputs import MetricWarning

ROW_MODES = ("mean", "best", "first", "selected")

__all__ = ["MetricNotes", "ROW_MODES", "SELECTION_VIEWS", "VIEW_NAMES", "benchmark_results", "category_means",
           "row_frame", "row_records", "sample_frame", "selection_views", "summarize"]


class MetricNotes:
    """``with MetricNotes() as notes:``: every :class:`~..metrics.inputs.MetricWarning` raised inside is kept in
    ``notes.lines`` (each message once, in order) rather than printed to the console with a file path; the report
    lists them under its notes."""

    def __enter__(self) -> "MetricNotes":
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always", MetricWarning)
        self.lines: list[str] = []
        return self

    def __exit__(self, *exc_info) -> None:
        self._catcher.__exit__(*exc_info)
        for caught in self._caught:
            if issubclass(caught.category, MetricWarning):
                self.lines.append(str(caught.message))
            else:  # anything else is shown as it would have been
                warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
        self.lines = list(dict.fromkeys(self.lines))


def sample_frame(rows, edits, judgements: dict, benchmark: EditorBenchmark, flags: Iterable[str] = ()):
    """One row per edit of ``edits`` (:class:`~.editing_rows.ResolvedEdits`), with ``rows``' metadata and the
    ``judgements`` (input id -> record) scores; ``judged`` False where no record exists (a failed request)."""
    import pandas as pd

    out = []
    for ref in edits.edits:
        meta = rows.loc[ref.row]
        record = judgements.get(ref.input_id)
        entry = {"input_id": ref.input_id, "row": ref.row, "sample": ref.sample, "selected": ref.selected,
                 "key": meta["key"],
                 "category": meta["category"], "language": meta["language"], "instruction": meta["instruction"],
                 "edited": str(ref.path),
                 **{f: bool(meta[f]) for f in flags}, "judged": record is not None,
                 "failed": bool(record and record.get("failed")),
                 "issues": list(record.get("issues", [])) if record else []}
        for key in benchmark.scores:
            value = record.get(key) if record and not record.get("failed") else None
            if value is not None and benchmark.round_to is not None:
                value = round(float(value), benchmark.round_to)
            entry[key] = np.nan if value is None else float(value)
        out.append(entry)
    columns = ["input_id", "row", "sample", "selected", "key", "category", "language", "instruction", "edited", *flags,
               "judged", "failed", "issues", *benchmark.scores]
    return pd.DataFrame(out, columns=columns)


def row_frame(samples, benchmark: EditorBenchmark, mode: str = "mean"):
    """One line per row (key) that has a usable judgement (module docstring); ``n_samples``: how many of its samples
    count; ``best_sample`` / ``edited``: the chosen sample (best-of-N) or the first one."""
    import pandas as pd

    if mode not in ROW_MODES:
        raise ValueError(f"mode must be one of {', '.join(ROW_MODES)}, got {mode!r}")
    usable = samples[samples["judged"] & ~samples["failed"]]
    if mode == "first":
        usable = usable[usable["sample"] == samples.groupby("row")["sample"].transform("min").loc[usable.index]]
    elif mode == "selected":
        usable = usable[usable["selected"].astype(bool)]
    meta_columns = [c for c in samples.columns if c not in ("input_id", "sample", "selected", "edited", "judged",
                                                            "failed", "issues", *benchmark.scores)]
    out = []
    for row, group in usable.groupby("row", sort=False):
        group = group.sort_values("sample")
        chosen = group.loc[group[benchmark.overall].idxmax()] if mode == "best" else group.iloc[0]
        values = group[list(benchmark.scores)].mean() if mode == "mean" else chosen[list(benchmark.scores)]
        out.append({**{c: group.iloc[0][c] for c in meta_columns}, **{k: float(values[k]) for k in benchmark.scores},
                    "n_samples": len(group), "best_sample": int(chosen["sample"]), "edited": chosen["edited"]})
    return pd.DataFrame(out, columns=[*meta_columns, *benchmark.scores, "n_samples", "best_sample", "edited"])


def _round(value: float, digits: int | None) -> float:
    return round(value, digits) if digits is not None and np.isfinite(value) else value


def category_means(categories: np.ndarray, values: np.ndarray, order: list, digits: int | None) -> dict:
    """``{category: mean}`` of ``values`` (rounded to ``digits`` when given) for the categories of ``order`` present."""
    out = {}
    for code, name in enumerate(order):
        mask = categories == code
        if mask.any():
            out[name] = _round(float(values[mask].mean()), digits)
    return out


def _macro(categories, table: np.ndarray, order, benchmark: EditorBenchmark) -> dict:
    result = {}
    for j, key in enumerate(benchmark.scores):
        per = category_means(categories, table[:, j], order, benchmark.round_to)
        result[key] = float(np.mean(list(per.values()))) if per else float("nan")
    return result


def summarize(frame, benchmark: EditorBenchmark, bootstrap: BootstrapSettings | None = None,
              categories_order: list | None = None, expected: Iterable[str] | None = None) -> dict:
    """``{"n", <score>: {"value", "ci"}, "by_category": {category: {"n", <score>: {"value", "ci"}}}}`` of a
    :func:`row_frame` (module docstring); with ``expected`` categories of which one has no row, the scores are
    None and ``"not_computable"`` says which categories are empty."""
    bootstrap = bootstrap or BootstrapSettings(n=0)
    order = categories_order or sorted(set(frame["category"]) | set(expected or ()))
    codes = np.array([order.index(c) for c in frame["category"]], dtype=int)
    table = frame[list(benchmark.scores)].to_numpy(dtype=float)
    out: dict = {"n": int(len(frame))}
    empty = sorted(set(expected or ()) - set(frame["category"]))
    if empty:
        out["not_computable"] = (f"no usable key of {benchmark.category_label.lower()} {', '.join(empty)}: the "
                                 "mean over categories is undefined (the released average is NaN)")
    if len(frame) == 0 or empty:  # no overall; the categories that have rows are summarised below
        out.update({k: {"value": None, "ci": [None, None]} for k in benchmark.scores})
    if len(frame) == 0:
        return {**out, "by_category": {}}

    def macro(idx):
        return _macro(codes[idx], table[idx], order, benchmark)

    positions = np.arange(len(frame))
    if not empty:
        out.update(bootstrap.interval(macro, positions))
    by_category = {}
    for code, name in enumerate(order):
        rows = positions[codes == code]
        if len(rows) == 0:
            continue

        def means(idx):
            return {k: _round(float(table[idx, j].mean()), benchmark.round_to) for j, k in enumerate(benchmark.scores)}

        settings = bootstrap if len(rows) > 1 else BootstrapSettings(n=0)  # one row: no interval
        by_category[name] = {"n": int(len(rows)), **settings.interval(means, rows)}
    out["by_category"] = by_category
    return out


def benchmark_results(rows, benchmark: EditorBenchmark, bootstrap: BootstrapSettings | None = None,
                      categories_order: list | None = None, expected: dict | None = None) -> dict:
    """``{language: {"full": summary, <subset>: summary}}`` over a :func:`row_frame` (subsets: the benchmark's);
    ``expected``: ``{language: categories}`` of the selected rows (each must have a usable row, in every
    subset, for the mean over categories: :func:`summarize`)."""
    out = {}
    for language in sorted(set(rows["language"]) | set(expected or {})):
        part = rows[rows["language"] == language]
        wanted = (expected or {}).get(language)
        out[language] = {"full": summarize(part, benchmark, bootstrap, categories_order, wanted)}
        for subset, flag in (benchmark.subsets or {}).items():
            out[language][subset] = summarize(part[part[flag].astype(bool)], benchmark, bootstrap, categories_order,
                                              wanted)
    return out


# the views of reward-guided best-of-N (miescore edit --select): name -> (row_frame mode, what it is)
SELECTION_VIEWS = {"first": ("first", "the first sample (one draw, no selection)"),
                   "selected": ("selected", "the sample the reward selected"),
                   "oracle": ("best", "the judge's own best of N (the oracle: the best any selector could do)")}
# their short names in a comparison's run names ("<run>: <short name>")
VIEW_NAMES = {"first": "first sample", "selected": "selected", "oracle": "judge's best of N"}


def row_records(frame, sources: dict | None = None) -> list[dict]:
    """A :func:`row_frame` as JSON-ready dicts (``report.json``'s ``per_row``), with each row's ``sources``."""
    out = []
    for record in frame.to_dict("records"):
        out.append({**{k: (v.item() if hasattr(v, "item") else v) for k, v in record.items()},
                    "sources": (sources or {}).get(record["row"], [])})
    return out


def selection_views(samples, benchmark: EditorBenchmark, bootstrap: BootstrapSettings | None = None,
                    categories_order: list | None = None, expected: dict | None = None,
                    sources: dict | None = None) -> dict:
    """``{view: {"what", "results", "per_row"}}`` for :data:`SELECTION_VIEWS` of a :func:`sample_frame` whose
    edits carry a reward's selection (``miescore edit --select``)."""
    out = {}
    for view, (mode, what) in SELECTION_VIEWS.items():
        rows = row_frame(samples, benchmark, mode)
        out[view] = {"what": what, "results": benchmark_results(rows, benchmark, bootstrap, categories_order, expected),
                     "per_row": row_records(rows, sources)}
    return out
