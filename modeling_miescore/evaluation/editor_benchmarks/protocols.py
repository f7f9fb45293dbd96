"""The editor benchmarks' protocols, declared once: :data:`EDITOR_BENCHMARKS` (``gedit``, ``imgedit``), each an
:class:`EditorBenchmark` that names its converted dataset, its MLLM judge (``module:Class``), the per-sample scores
the judge writes and how they are aggregated. The command line, the judging run, the aggregation and the reports
dispatch on these declarations.

GEdit-Bench (VIEScore task ``tie``; TIGER-AI-Lab/VIEScore ``viescore/__init__.py``, the GEdit scorer's copy of it
in Step1X-Edit's ``GEdit-Bench/``): SC = min of two 0-10 scores from [source, edited] + instruction, PQ = min of
two 0-10 scores from the edited image, O = sqrt(SC * PQ) per sample (``calculate_statistics.py``); the edited
image is resized to the source's size before judging (``test_gedit_score.py``: ``.resize(source.size)``); means
per task type, then the unweighted mean over the task types; full set and ``Intersection_exist`` subset, per
instruction language. The published numbers use ``gpt-4.1`` (SpatialReward paper, sec. 5.3: "GPT-4.1 serves as
the ground truth standard evaluator").

ImgEdit-Bench Basic (PKU-YuanGroup/ImgEdit ``Benchmark/Basic/``): one request per edit with the type's rubric,
source and edited image (``basic_bench.py``, ``gpt-4o``); three ``Name: <1-5>`` lines; per-image mean rounded to 2
places (``step1_get_avgscore.py``), per-type means rounded to 2 places (``step2_typescore.py``); the overall, the
mean over types, is our reading (the scripts define none).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...image_io import MIEScoreInputError
from ...utils.lazy_registry import import_attribute

__all__ = ["EDITOR_BENCHMARKS", "EditorBenchmark", "editor_benchmark", "editor_benchmark_of_dataset"]


@dataclass(frozen=True)
class EditorBenchmark:
    """One editor benchmark's protocol (module docstring).

    ``scores``: the per-sample score keys a judgement holds (the overall one is ``overall``); ``labels``: their
    table headers; ``scale``: the judge's answer scale (``min``, ``max``); ``judge``: the MLLM judge class
    (``module:Class``, relative to this package); ``resize_to_source``: the edited image is resized to the first
    source's size before any judge sees it; ``round_to``: decimals the released scripts round the per-image and
    per-category means to (None: no rounding); ``subsets``: report subsets besides the full set (``name`` -> the
    subset flag column); ``table3_column``: this benchmark's columns in the SpatialReward paper's Table 3.
    """

    name: str
    dataset: str
    title: str
    scores: tuple[str, ...]
    overall: str
    labels: dict
    scale: tuple[float, float]
    judge: str
    category_label: str
    published_judge: str
    prompts_expected: str
    resize_to_source: bool = False
    round_to: int | None = None
    subsets: dict | None = None
    table3_column: str = ""
    overall_note: str = ""

    def judge_class(self):
        return import_attribute(self.judge, __package__)


GEDIT = EditorBenchmark(
    name="gedit", dataset="gedit-bench", title="GEdit-Bench", scores=("sc", "pq", "o"), overall="o",
    labels={"sc": "SC", "pq": "PQ", "o": "O"}, scale=(0.0, 10.0), judge=".gedit_judge:GEditJudge",
    category_label="Task type", published_judge="gpt-4.1",
    prompts_expected="VIEScore's prompt module viescore/vie_prompts.py (a Python file assigning the strings "
                     "_context_no_delimit, _prompts_0shot_two_image_edit_rule, _prompts_0shot_tie_rule_SC and "
                     "_prompts_0shot_rule_PQ)",
    resize_to_source=True, subsets={"intersection": "intersection_exist"}, table3_column="GEdit-EN",
    overall_note="O = sqrt(SC * PQ) per sample; each column is the unweighted mean over task types of the "
                 "per-type means.")

IMGEDIT = EditorBenchmark(
    name="imgedit", dataset="imgedit-bench", title="ImgEdit-Bench (Basic)", scores=("mean",), overall="mean",
    labels={"mean": "Score"}, scale=(1.0, 5.0), judge=".imgedit_judge:ImgEditJudge", category_label="Edit type",
    published_judge="gpt-4o",
    prompts_expected="ImgEdit's prompts.json (a JSON object {edit_type: rubric text containing <edit_prompt>})",
    round_to=2, table3_column="ImgEdit",
    overall_note="Overall = the mean over edit types of the per-type means: our reading (the benchmark's scripts "
                 "define no overall score).")

EDITOR_BENCHMARKS: dict[str, EditorBenchmark] = {b.name: b for b in (GEDIT, IMGEDIT)}


def editor_benchmark(name: str) -> EditorBenchmark:
    """The protocol registered as ``name`` (``gedit``, ``imgedit``)."""
    try:
        return EDITOR_BENCHMARKS[name]
    except KeyError:
        raise MIEScoreInputError(f"unknown editor benchmark {name!r}; choose one of {', '.join(EDITOR_BENCHMARKS)}"
                                 ) from None


def editor_benchmark_of_dataset(dataset_name: str) -> EditorBenchmark | None:
    """The protocol of a converted dataset named ``dataset_name`` (its card's ``miescore_benchmark.name``)."""
    return next((b for b in EDITOR_BENCHMARKS.values() if b.dataset == dataset_name), None)
