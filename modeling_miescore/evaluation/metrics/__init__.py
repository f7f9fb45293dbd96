"""Benchmark metrics for MIE-Bench, MER-Bench and pairwise edit-reward benchmarks, one module per job.

Plain numpy/scipy: importing any of these modules never imports torch, transformers or pandas, so the
``evaluate`` metric Space, the CLI and notebooks can use them cheaply. Everything is vectorised; SRCC/KRCC/PLCC
on the 36,000 MIE-Bench items take milliseconds (``benchmarks/bench_metrics.py``).
"""
