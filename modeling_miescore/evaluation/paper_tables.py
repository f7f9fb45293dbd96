"""An evaluator on the converted external benchmarks, in a paper table's layout with the published rows beside ours:
the zero-shot report (MIEScore paper, Table 6) and the reward-benchmark report (SpatialReward paper, sec. 5.2,
Table 1).

Per benchmark (a dataset written by ``miescore convert-benchmark``): the protocol its declaration names
(``BenchmarkSpec.protocol``, :mod:`.benchmark_protocols`; MER-Bench's on its builder) computes the values that fill
its columns (``BenchmarkSpec.columns["zero-shot"]`` / ``columns["reward"]``).

Table 6: pairwise accuracy (%) for GenAI-Bench, AURORA-Bench and EditScore-Bench, SRCC for ImagenHub, EBench-18K,
EditReward-Bench and IEQA; for benchmarks with several dimensions the Table 6 value is the mean over the dimensions
(paper: "we report the average result across different dimensions"). A registered benchmark the paper does not
report gets a column after the paper's (published rows: —).

Table 1: EditReward-Bench (EditScore's, converted as ``editscore-bench``) PF / Cons. / Ovrl., MMRB2 (image editing)
Single / Multi / Ovrl., and MER-Bench 2-P / 3-P / 4-P / Ovrl. / τ:

* EditReward-Bench (``editscore``): strict pairwise accuracy per task type, averaged over task types, for each judged
  dimension (prompt following -> PF, consistency -> Cons., overall -> Ovrl.), as its ``calculate_accuracy.py``.
* MMRB2 (``mmrb2``): strict pairwise accuracy on single-image, multi-image and all pairs (micro).
* MER-Bench (``mer``): :func:`~.mer_bench_report.mer_bench_report` (exact-order group accuracy per group size, over all
  groups, and the mean per-group Kendall τ). Ovrl. is the mean over all groups, which with 200 / 200 / 200 groups
  is the plain mean of 2-P / 3-P / 4-P; of the published rows, 7 of 8 follow that, SpatialReward's 0.483 does not
  (:func:`~.published_results.mer_overall_averaging`). τ is shown twice: the Table 1 column ``mer_tau`` holds the
  value under the authors' rule (a predicted tie +1, their released script), so this run's row compares with the
  published ones, and ``mer_tau_ties0`` beside it the same with a predicted tie scored 0 (a constant evaluator gets
  0, not 1), the value the MER-Bench report leads with.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..utils.markdown_table import markdown_table
from .benchmark_protocols import scoring_protocol
from .converted_benchmarks import (attach_predictions, attach_scores, declared_benchmarks, report_columns,
                                   require_report)
from .published_results import TABLE1, TABLE1_COLUMNS, TABLE6, TABLE6_COLUMNS, mer_overall_averaging
from .report import write_benchmarks_report

__all__ = ["evaluate_reward", "evaluate_zero_shot", "reward_markdown", "table1_columns", "table6_columns",
           "write_reward_report", "write_zero_shot_report", "zero_shot_markdown"]

_TAU_TIES0 = "mer_tau_ties0"  # MER-Bench's extra Table 1 column (published rows: none)


def _fmt(value, digits: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.{digits}f}"


def _published_table(report: dict, header: list[str], published: dict, digits: dict[str, int], lead=None) -> str:
    """The paper's rows (``lead(row)``: cells after the name) and this run's, bold, last."""
    lead = lead or (lambda row: [])
    values = {k: v for result in report["results"].values() for k, v in result["values"].items()}
    rows = [[name, *lead(row), *(_fmt(row.get(key), d) for key, d in digits.items())]
            for name, row in published.items()]
    rows.append([f"**{report['row_name']} (this run)**", *lead({}),
                 *(f"**{_fmt(values[key], d)}**" if key in values else "—" for key, d in digits.items())])
    return markdown_table(header, rows)


def _run_section(report: dict) -> list[str]:
    return ["## Run", ""] + [f"- **{k}:** `{v}`" for k, v in report.get("run", {}).items() if v] + [""]


# ------------------------------------------------------------------------------------------------ Table 6


def _metric(measure: str) -> str:
    return "Acc., %" if measure == "accuracy" else "SRCC"


def table6_columns() -> dict[str, tuple[str, str]]:
    """``column key -> (header, metric)``: the paper's Table 6 columns, then those of registered benchmarks the
    paper does not report (headed by their declaration, or their title)."""
    columns = dict(TABLE6_COLUMNS)
    declared = declared_benchmarks()
    for key, column in report_columns("zero-shot").items():
        if key not in columns:
            spec = declared[column["benchmark"]]
            columns[key] = (column["header"] or spec.title, _metric(scoring_protocol(spec.protocol).measure))
    return columns


def evaluate_zero_shot(data, preds, *, allow_missing: bool = False, source: str = "predictions") -> dict:
    """One Table 6 column: ``data`` a :class:`~.converted_benchmarks.BenchmarkData`, ``preds`` a score-predictions
    frame indexed by edited-image id (:func:`~.prediction_files.read_score_predictions`)."""
    require_report(data, "zero-shot", "Table 6")
    protocol = scoring_protocol(data.protocol)
    (column, value_name), = data.declaration.columns["zero-shot"].items()
    header, metric = table6_columns()[column]
    dimensions = data.metadata.get("dimensions", {})
    config = protocol.config
    frame, alignment = attach_scores(data.frames[config], config, data.metadata, preds, allow_missing=allow_missing,
                                     source=source)
    details = protocol.run(frame, dimensions)
    value = protocol.values(details)[value_name]
    if value is not None and protocol.measure == "accuracy":
        value = 100 * value
    return {"benchmark": data.name, "title": data.metadata.get("title", data.name), "column": header,
            "metric": metric, "value": value, "values": {column: value}, "config": config,
            "n_rows": int(len(frame)), "details": details,
            "dimensions": dimensions, "tie_rule": data.metadata.get("tie_rule", ""),
            "format_source": data.metadata.get("format_source", ""), "dataset": data.dataset,
            "release_part": data.metadata.get("release_part", ""),
            "alignment": alignment.to_dict()}


def _digits(metric: str) -> int:
    return 2 if metric.startswith("Acc") else 4


def _detail_lines(result: dict) -> list[str]:
    details, metric = result["details"], result["metric"]
    lines = [f"### {result['column']} ({result['title']})", "",
             f"- Dataset: `{result['dataset']}` ({result['config']} config, {result['n_rows']} rows evaluated"
             + (f"; release {result['release_part']}" if result.get("release_part") else "") + ")",
             f"- Value: **{_fmt(result['value'], _digits(metric))}** ({metric})"]
    if "by_dimension" in details:
        what = "SRCC" if metric == "SRCC" else "accuracy (macro over task types)"
        rows = [[native, d["key"], d["n"], f"{d.get('srcc', d.get('accuracy')):.4f}"]
                for native, d in details["by_dimension"].items()]
        lines += ["", markdown_table(["Benchmark dimension", "Score key", "n", what], rows), ""]
    else:
        eps = details.get("epsilon")
        lines.append(f"- Pairs: {details['n']}, human ties {details['n_human_ties']}, predicted ties "
                     f"{details['n_pred_ties']}" + (f" (epsilon = {eps:.4g})" if eps is not None else ""))
    al = result["alignment"]
    if al.get("n_missing") or al.get("n_extra"):
        lines.append(f"- Predictions: {al['n_matched']} of {al['n_dataset']} edited images matched "
                     f"({al['n_missing']} without prediction, {al['n_extra']} not in the dataset)")
    lines += [f"- Ties: {result['tie_rule']}", f"- Release format read from: {result['format_source']}", ""]
    return lines


def zero_shot_markdown(report: dict) -> str:
    """Table 6 with the published rows and ours, then the details of each benchmark."""
    columns = table6_columns()
    header = ["Methods/Benchmarks", *(f"{h} ({m})" for h, m in columns.values())]
    table = _published_table(report, header, TABLE6, {key: _digits(m) for key, (_, m) in columns.items()})
    out = ["# Zero-shot results on other image editing benchmarks (MIEScore paper, Table 6)", "",
           "Published rows are the paper's Table 6 (\"-\" there: the model was trained on that benchmark, shown as "
           "—); the last row is this run. Accuracy in %, SRCC as a fraction; multi-dimensional benchmarks report "
           "the mean over their dimensions.", "", table, "", "## Per benchmark", ""]
    for key in columns:
        out += [line for result in report["results"].values() if key in result["values"]
                for line in _detail_lines(result)]
    return "\n".join(out + _run_section(report))


def write_zero_shot_report(out_dir, results: list[dict], *, row_name: str, run: dict | None = None,
                           protocol: dict | None = None):
    """``report.json`` + ``report.md`` for the evaluated benchmarks (one result per Table 6 column)."""
    return write_benchmarks_report(out_dir, "zero-shot", results, row_name=row_name, run=run,
                                   published={"source": "MIEScore paper, Table 6", "rows": TABLE6},
                                   markdown=zero_shot_markdown, protocol=protocol)


# ------------------------------------------------------------------------------------------------ Table 1


def table1_columns() -> dict[str, str]:
    """``column key -> header``: the paper's Table 1 columns, then the extra columns the declarations add; a
    declaration's own header wins (MER-Bench's τ says which tie rule it follows)."""
    columns = dict(TABLE1_COLUMNS)
    for key, column in report_columns("reward").items():
        columns[key] = column["header"] or columns.get(key) or key
    return columns


def evaluate_reward(data, predictions_path, *, allow_missing: bool = False, bootstrap=None) -> dict:
    """One benchmark's Table 1 columns from a predictions file (score file; MER-Bench: group file), by the protocol
    its declaration names (:data:`~.benchmark_protocols.PROTOCOLS`)."""
    require_report(data, "reward", "Table 1")
    path = Path(predictions_path)
    protocol = scoring_protocol(data.protocol)
    frame, alignment = attach_predictions(data, protocol, path, allow_missing=allow_missing)
    details = protocol.run(frame, data.metadata.get("dimensions", {}), bootstrap=bootstrap)
    named = protocol.values(details)
    values = {column: named.get(value) for column, value in data.declaration.columns["reward"].items()}
    return {"benchmark": data.name, "dataset": data.dataset, "predictions": str(path),
            "tie_rule": data.metadata.get("tie_rule", ""), "values": values, "details": details,
            "alignment": alignment.to_dict(), "n_rows": int(len(frame))}


def reward_markdown(report: dict) -> str:
    """Table 1 with the published rows and ours, then notes per benchmark."""
    columns = table1_columns()
    table = _published_table(report, ["Model", "Type", *columns.values()], TABLE1, dict.fromkeys(columns, 3),
                             lead=lambda row: [row.get("type", "")])
    out = ["# Reward benchmarks (SpatialReward paper, Table 1)", "",
           "Published rows are the paper's Table 1 (EditReward-Bench there is EditScore's benchmark, Luo et al. "
           "2025; \"-\" shown as —); the last row is this run.", "", table, "", "## Notes", ""]
    for name, result in report["results"].items():
        al = result["alignment"]
        out.append(f"- **{name}**: {result['n_rows']} rows evaluated from `{result['dataset']}` with "
                   f"`{result['predictions']}` ({al['n_matched']} of {al['n_dataset']} ids matched). "
                   + (result["tie_rule"] or "MER-Bench: a group is correct only if its predicted scores strictly "
                      "decrease in the human order; ties and missing scores are wrong."))
    if any(_TAU_TIES0 in result["values"] for result in report["results"].values()):
        out.append("- MER-Bench τ: the Table 1 column is computed as the authors' released script does (a predicted "
                   "tie counts +1, so a constant evaluator gets τ = 1), the rule the published rows follow; \"τ (tie "
                   "0)\" beside it scores a predicted tie 0 (not published for other rows). They differ only when "
                   "predictions tie.")
    averaging = mer_overall_averaging()
    odd = [name for name, row in averaging.items() if row["averaging"] != "plain mean"]
    out.append(f"- MER-Bench Ovrl.: ours is the mean over all groups (= the plain mean of 2-P / 3-P / 4-P for "
               f"equal group counts). In the published table {len(averaging) - len(odd)} of {len(averaging)} rows "
               f"are that plain mean; not: " + ", ".join(f"{n} (printed {averaging[n]['printed']:.3f}, plain mean "
                                                       f"{averaging[n]['plain_mean']:.3f})" for n in odd) + ".")
    return "\n".join(out + [""] + _run_section(report))


def write_reward_report(out_dir, results: list[dict], *, row_name: str, run: dict | None = None,
                        protocol: dict | None = None):
    """``report.json`` + ``report.md`` for the evaluated benchmarks (each at most once)."""
    published = {"source": "SpatialReward paper, Table 1", "rows": TABLE1,
                 "mer_overall_averaging": mer_overall_averaging()}
    return write_benchmarks_report(out_dir, "reward", results, row_name=row_name, run=run, published=published,
                                   markdown=reward_markdown, protocol=protocol)
