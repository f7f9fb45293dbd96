"""Benchmarking evaluators and editing models on MIE-Bench / MER-Bench (``miescore benchmark``).

Metrics (numpy/scipy only): :mod:`.metrics` (correlation, model_ranking, group_ranking, pairwise, bootstrap).

The benchmark runner, one module per step:

* :mod:`.dataset_splits`: load a split, per-item metadata frames; :mod:`.prediction_files`: read predictions
  JSONL (formats documented there); :mod:`.alignment`: match prediction ids with dataset ids.
* :mod:`.mie_bench_report`, :mod:`.mer_bench_report`, :mod:`.editing_models_report`: the numbers of the three
  reports (plain JSON-serialisable dicts), with :mod:`.instance_bootstrap` for CIs that resample instances.
* :mod:`.report`: ``report.json`` and ``report.md``; :mod:`.plots`: the PNG plots.
* :mod:`.input_export` and :mod:`.model_runs`: score a split with a checkpoint into a resumable predictions file.
* :mod:`.errors`: the input errors (exit status 2 in the CLI).
"""
