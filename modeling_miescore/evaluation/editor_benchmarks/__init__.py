"""Editor benchmarks: an image editor judged on GEdit-Bench and ImgEdit-Bench Basic with the benchmarks' judge
protocols, by an MLLM judge and/or by our reward models, and editors compared in the SpatialReward paper's Table 3
layout.
"""

from __future__ import annotations

from .protocols import EDITOR_BENCHMARKS, EditorBenchmark, editor_benchmark

__all__ = ["EDITOR_BENCHMARKS", "EditorBenchmark", "compare_editors", "editor_benchmark", "evaluate_editor",
           "EditorRunOptions"]


def __getattr__(name):
    if name in ("evaluate_editor", "EditorRunOptions"):
        from . import editor_run

        return getattr(editor_run, name)
    if name == "compare_editors":
        from .editor_comparison import compare_editors

        return compare_editors
    raise AttributeError(name)
