"""The zero-shot report (MIEScore paper, Table 6): an evaluator on the single-source benchmarks, in the paper's
layout with the published rows beside ours.

Per benchmark (a dataset written by ``miescore convert-benchmark``): the protocol its declaration names
(``BenchmarkSpec.protocol``, :mod:`.benchmark_protocols`) computes the value of its Table 6 column
(``BenchmarkSpec.columns["zero-shot"]``): pairwise accuracy (%) for GenAI-Bench, AURORA-Bench and EditScore-Bench,
SRCC for ImagenHub, EBench-18K, EditReward-Bench and IEQA; for benchmarks with several dimensions the Table 6 value
is the mean over the dimensions (paper: "we report the average result across different dimensions"). A registered
benchmark the paper does not report gets a column after the paper's (published rows: —).
"""

from __future__ import annotations

import math

from ..utils.markdown_table import markdown_table
from .benchmark_protocols import scoring_protocol
from .converted_benchmarks import attach_scores, report_columns, require_report
from .published_results import TABLE6, TABLE6_COLUMNS
from .report import write_benchmarks_report
from .converted_benchmarks import declared_benchmarks

__all__ = ["evaluate_zero_shot", "table6_columns", "write_zero_shot_report", "zero_shot_markdown"]


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


def _fmt(value, metric: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.2f}" if metric.startswith("Acc") else f"{value:.4f}"


def _detail_lines(result: dict) -> list[str]:
    details, metric = result["details"], result["metric"]
    lines = [f"### {result['column']} ({result['title']})", "",
             f"- Dataset: `{result['dataset']}` ({result['config']} config, {result['n_rows']} rows evaluated"
             + (f"; release {result['release_part']}" if result.get("release_part") else "") + ")",
             f"- Value: **{_fmt(result['value'], metric)}** ({metric})"]
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
    results = report["results"]
    columns = table6_columns()
    values = {key: value for result in results.values() for key, value in result["values"].items()}
    header = ["Methods/Benchmarks", *(f"{h} ({m})" for h, m in columns.values())]
    rows = [[name, *(_fmt(published.get(key), m) for key, (_, m) in columns.items())]
            for name, published in TABLE6.items()]
    ours = [f"**{report['row_name']} (this run)**",
            *(f"**{_fmt(values[key], m)}**" if key in values else "—" for key, (_, m) in columns.items())]
    out = ["# Zero-shot results on other image editing benchmarks (MIEScore paper, Table 6)", "",
           "Published rows are the paper's Table 6 (\"-\" there: the model was trained on that benchmark, shown as "
           "—); the last row is this run. Accuracy in %, SRCC as a fraction; multi-dimensional benchmarks report "
           "the mean over their dimensions.", "", markdown_table(header, rows + [ours]), "", "## Per benchmark", ""]
    for key in columns:
        out += [line for result in results.values() if key in result["values"] for line in _detail_lines(result)]
    run = report.get("run", {})
    out += ["## Run", ""] + [f"- **{k}:** `{v}`" for k, v in run.items() if v] + [""]
    return "\n".join(out)


def write_zero_shot_report(out_dir, results: list[dict], *, row_name: str, run: dict | None = None,
                           protocol: dict | None = None):
    """``report.json`` + ``report.md`` for the evaluated benchmarks (one result per Table 6 column)."""
    return write_benchmarks_report(out_dir, "zero-shot", results, row_name=row_name, run=run,
                                   published={"source": "MIEScore paper, Table 6", "rows": TABLE6},
                                   markdown=zero_shot_markdown, protocol=protocol)
