"""Editor benchmarks: an image editor judged on GEdit-Bench and ImgEdit-Bench Basic with the benchmarks' judge
protocols, by an MLLM judge (an OpenAI-compatible endpoint or a local transformers VLM) and/or by our reward models,
and editors compared in the SpatialReward paper's Table 3 layout.

Modules: :mod:`.protocols` (each benchmark's protocol, declared once), :mod:`.editing_rows` (the converted dataset's
rows, selection, sources; an editor's outputs matched to the rows), :mod:`.judges` (the MLLM judges: what they share,
VIEScore ``tie``, ImgEdit's per-type rubric), :mod:`.judge_run` (resumable judging, MIEScore / SpatialReward as
judges, ``--recheck N``: the judge's drift), :mod:`.scores` (aggregation), :mod:`.editor_report` (one editor's
report, a comparison's Markdown and plots), :mod:`.editor_run` (the whole run, what ``miescore benchmark gedit`` /
``imgedit`` call), :mod:`.editor_comparison` (``miescore benchmark editors``; runs of unlike protocols refused).
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
