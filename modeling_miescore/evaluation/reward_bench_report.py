"""The reward-benchmark report (SpatialReward paper, sec. 5.2, Table 1): EditReward-Bench (EditScore's, converted as
``editscore-bench``) PF / Cons. / Ovrl., MMRB2 (image editing) Single / Multi / Ovrl., and MER-Bench 2-P / 3-P /
4-P / Ovrl. / τ, in the paper's layout with the published rows beside ours.

Each benchmark's declaration (``BenchmarkSpec.protocol`` / ``columns["reward"]`` in its converter module;
MER-Bench's on its builder) names the protocol that scores it and which of its values fill which Table 1 column:

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
from .converted_benchmarks import attach_predictions, benchmarks_in, report_columns, require_report
from .published_results import TABLE1, TABLE1_COLUMNS, mer_overall_averaging
from .report import write_benchmarks_report

__all__ = ["evaluate_reward", "reward_benchmarks", "reward_markdown", "table1_columns", "write_reward_report"]

_TAU_TIES0 = "mer_tau_ties0"  # MER-Bench's extra Table 1 column (published rows: none)


def reward_benchmarks() -> list[str]:
    """The benchmarks ``benchmark reward`` evaluates: those declaring Table 1 columns."""
    return benchmarks_in("reward")


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


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.3f}"


def reward_markdown(report: dict) -> str:
    """Table 1 with the published rows and ours, then notes per benchmark."""
    values = {k: v for result in report["results"].values() for k, v in result["values"].items()}
    columns = table1_columns()
    header = ["Model", "Type", *columns.values()]
    rows = [[name, row["type"], *(_fmt(row.get(key)) for key in columns)] for name, row in TABLE1.items()]
    rows.append([f"**{report['row_name']} (this run)**", "",
                 *(f"**{_fmt(values[key])}**" if key in values else "—" for key in columns)])
    out = ["# Reward benchmarks (SpatialReward paper, Table 1)", "",
           "Published rows are the paper's Table 1 (EditReward-Bench there is EditScore's benchmark, Luo et al. "
           "2025; \"-\" shown as —); the last row is this run.", "", markdown_table(header, rows), "", "## Notes", ""]
    for name, result in report["results"].items():
        al = result["alignment"]
        out.append(f"- **{name}**: {result['n_rows']} rows evaluated from `{result['dataset']}` with "
                   f"`{result['predictions']}` ({al['n_matched']} of {al['n_dataset']} ids matched). "
                   + (result["tie_rule"] or "MER-Bench: a group is correct only if its predicted scores strictly "
                      "decrease in the human order; ties and missing scores are wrong."))
    if _TAU_TIES0 in values:
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
    out += ["", "## Run", ""] + [f"- **{k}:** `{v}`" for k, v in report.get("run", {}).items() if v] + [""]
    return "\n".join(out)


def write_reward_report(out_dir, results: list[dict], *, row_name: str, run: dict | None = None,
                        protocol: dict | None = None):
    """``report.json`` + ``report.md`` for the evaluated benchmarks (each at most once)."""
    published = {"source": "SpatialReward paper, Table 1", "rows": TABLE1,
                 "mer_overall_averaging": mer_overall_averaging()}
    return write_benchmarks_report(out_dir, "reward", results, row_name=row_name, run=run, published=published,
                                   markdown=reward_markdown, protocol=protocol)
