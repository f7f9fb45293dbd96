"""Benchmarking evaluators and editing models on MIE-Bench / MER-Bench (``miescore benchmark``).

Metrics (numpy/scipy only): :mod:`.metrics` (correlation, model_ranking, group_ranking, pairwise, bootstrap).

The benchmark runner, one module per step:

* :mod:`.dataset_splits`: load a split, per-item metadata frames; :mod:`.prediction_files`: read predictions
  JSONL (formats documented there) and match prediction ids with dataset ids.
* :mod:`.mie_bench_report`, :mod:`.mer_bench_report`, :mod:`.editing_models_report`: the numbers of the three
  reports (plain JSON-serialisable dicts), with :mod:`.instance_bootstrap` for CIs that resample instances.
* :mod:`.report`: ``report.json`` and ``report.md``; :mod:`.report_html`: ``report.html`` (plots embedded);
  :mod:`.plots`: the PNG plots.
* :mod:`.aggregation_grid`: re-aggregate SpatialReward sub-scores of MER-Bench predictions over a grid of
  aggregation weights (``mer-bench --grid``; SpatialReward paper B.1.3 / figure 10).
* :mod:`.input_export` and :mod:`.model_runs`: score a split with a checkpoint into a resumable predictions file
  (exported images are cached under ``$HF_HOME/miescore``).
* :mod:`.errors`: the input errors (exit status 2 in the CLI).

External benchmarks (``miescore benchmark zero-shot`` / ``reward``, datasets from ``miescore convert-benchmark``):
:mod:`.converted_benchmarks` (open one, attach predictions by edited-image id), :mod:`.benchmark_protocols` (each
benchmark's accuracy / SRCC and tie rule), :mod:`.converted_scoring` (score one with a checkpoint),
:mod:`.paper_tables` (the zero-shot report, MIEScore paper Table 6, and the reward report, SpatialReward paper
Table 1) and :mod:`.published_results` (the papers' rows as data).
"""
