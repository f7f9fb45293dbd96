"""The editor benchmarks' protocols: :data:`EDITOR_BENCHMARKS` (``gedit``, ``imgedit``), each an
:class:`~modeling_miescore.data.converters.schema.EditorBenchmark` declared once, in its converter module, as the
``editor`` of the benchmark's spec (:mod:`modeling_miescore.data.converters.gedit_bench`, ``imgedit_bench``): its
MLLM judge (``module:Class``, which also reads the benchmark's prompt file), the per-sample scores the judge writes
and how they are aggregated. The command line, the judging run, the aggregation and the reports dispatch on these
declarations; this module only looks them up.

GEdit-Bench (VIEScore task ``tie``; TIGER-AI-Lab/VIEScore ``viescore/__init__.py``, the GEdit scorer's copy of it
in Step1X-Edit's ``GEdit-Bench/``): SC = min of two 0-10 scores from [source, edited] + instruction, PQ = min of
two 0-10 scores from the edited image, O = sqrt(SC * PQ) per sample (``calculate_statistics.py``); the edited
image is resized to the source's size before judging (``test_gedit_score.py``: ``.resize(source.size)``); means
per task type, then the unweighted mean over the task types; full set and ``Intersection_exist`` subset, per
instruction language. The published numbers use ``gpt-4.1`` (SpatialReward paper, sec. 5.3: "GPT-4.1 serves as
the ground truth standard evaluator").

ImgEdit-Bench Basic (PKU-YuanGroup/ImgEdit ``Benchmark/Basic/``): one request per edit with the type's rubric,
source and edited image (``basic_bench.py``); three ``Name: <1-5>`` lines; per-image mean rounded to 2 places
(``step1_get_avgscore.py``), per-type means rounded to 2 places (``step2_typescore.py``); Overall = the mean over
the types, as ImgEdit's leaderboard defines it, judged by GPT-4.1 (``assets/leaderboard.png`` @2051b15: "'Overall'
is calculated by averaging all scores across tasks. We use GPT-4.1 for evaluation."; the script names ``gpt-4o``).

How each benchmark's released script sends a request (the order of text and images, ``max_tokens``,
``temperature``, image format and size) is declared with it too (``EditorBenchmark.request``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Iterator

from ...data.converters.schema import EditorBenchmark
from ...hub.errors import MIEScoreInputError
from ...data.converters import editor_protocols

__all__ = ["EDITOR_BENCHMARKS", "EditorBenchmark", "editor_benchmark"]


class _EditorBenchmarks(Mapping):
    """``name -> EditorBenchmark`` over the registered converters that declare an editor protocol, collected from
    the registry on first use (importing every converter module) and kept: the declarations are module-level."""

    @functools.cached_property
    def _all(self) -> dict[str, EditorBenchmark]:
        return editor_protocols()

    def __getitem__(self, name: str) -> EditorBenchmark:
        return self._all[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)


EDITOR_BENCHMARKS: Mapping[str, EditorBenchmark] = _EditorBenchmarks()


def editor_benchmark(name: str) -> EditorBenchmark:
    """The protocol registered as ``name`` (``gedit``, ``imgedit``)."""
    try:
        return EDITOR_BENCHMARKS[name]
    except KeyError:
        raise MIEScoreInputError(f"unknown editor benchmark {name!r}; choose one of {', '.join(EDITOR_BENCHMARKS)}"
                                 ) from None
