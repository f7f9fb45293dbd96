"""Classical and vision-language baselines of the MIEScore paper's Table 3, computed with their own libraries.

``registry`` lists one entry per Table 3 row and finds each metric's weights in its library's cache; ``scorers``
holds the paper's multi-source protocol, the library adapters and the single-source evaluator protocol;
``compute`` runs metrics over edits or a MIE-Bench split and writes one resumable predictions file per metric, in
the format ``miescore benchmark mie-bench --predictions`` reads. The command line is ``miescore baselines``.
"""

from .compute import BaselinesReport, EditError, compute_baselines, compute_mie_bench_baselines, load_mie_bench_split
from .registry import BASELINES, Baseline, UnsafeWeightsError, WeightsMissingError, get_baseline

__all__ = ["BASELINES", "Baseline", "BaselinesReport", "EditError", "UnsafeWeightsError", "WeightsMissingError",
           "compute_baselines", "compute_mie_bench_baselines", "get_baseline", "load_mie_bench_split"]
