"""Every case of the two corpora, in a fixed order (built without touching the disk): the bad-input corpus
(:func:`all_cases`, run by :class:`.bad_input_corpus.Corpus`) and the bad-endpoint corpus (:func:`endpoint_cases`,
run by :class:`.bad_endpoint_corpus.EndpointCorpus`)."""

from __future__ import annotations

from .bad_endpoint_corpus import judge_cases, mer_cases, pipeline_cases
from .bad_input_comparison import comparison_cases
from .bad_input_editor import editor_cases
from .bad_input_editor_benchmarks import editor_benchmark_cases, editor_benchmark_endpoint_cases
from .bad_input_export import export_cases
from .bad_input_local import local_cases
from .bad_input_runners import api_cases, cli_cases, score_batch_cases, server_cases
from .bad_input_select import select_cases

__all__ = ["all_cases", "endpoint_cases"]


def all_cases() -> list:
    return [*api_cases(), *cli_cases(), *score_batch_cases(), *server_cases(), *local_cases(), *editor_cases(),
            *editor_benchmark_cases(), *export_cases(), *comparison_cases(), *select_cases()]


def endpoint_cases() -> list:
    return [*judge_cases(), *pipeline_cases(), *mer_cases(), *editor_benchmark_endpoint_cases()]
