"""Benchmark metrics for MIE-Bench, MER-Bench and pairwise edit-reward benchmarks, one module per job.

Plain numpy/scipy: importing any of these modules never imports torch, transformers or pandas, so the
``evaluate`` metric Space, the CLI and notebooks can use them cheaply. Everything is vectorised; SRCC/KRCC/PLCC
on the 36,000 MIE-Bench items take milliseconds (``benchmarks/bench_metrics.py``).

* :mod:`.correlation`: correlation with MOS (MIEScore paper, table 3): ``correlations`` (SRCC, KRCC, PLCC and
  PLCC after the monotonic 4-parameter logistic ``fit_logistic``), ``srcc``, ``krcc``, ``plcc``.
* :mod:`.logistic_fit`: that logistic fit, guarded: a degenerate least-squares fit (a step through a few points)
  gets a bounded refit, else is reported as degenerate (``LogisticFit.status``, ``degeneracy``).
* :mod:`.model_ranking`: model-ranking agreement (MIEScore paper, table 4, "SRCC to human"):
  ``per_model_means``, ``model_ranking_srcc``.
* :mod:`.group_ranking`: K-pair groups (SpatialReward paper, sec. 4 and tables 1-2, MER-Bench):
  ``group_accuracy``, ``kendall_tau_groups`` and the per-group ``group_correct``, ``group_kendall_tau``
  (``tie_score=TIE_SCORE_AS_RELEASED`` gives the tau of the authors' script).
* :mod:`.pairwise`: pairwise accuracy with ties as wrong, or tie-calibrated: ``pairwise_accuracy``.
* :mod:`.bootstrap`: percentile bootstrap confidence intervals, optionally resampling whole instances:
  ``bootstrap_ci`` (no interval below ``MIN_RESAMPLING_UNITS`` instances).
* :mod:`.inputs`: input checks shared by the above, and the warning classes (``MetricWarning`` and
  subclasses); :mod:`.coefficients`: the Pearson / Spearman / Kendall coefficients on checked arrays.
"""
