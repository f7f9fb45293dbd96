"""The editor benchmarks' protocols: :data:`EDITOR_BENCHMARKS` (``gedit``, ``imgedit``), each an
:class:`~modeling_miescore.data.converters.schema.EditorBenchmark` declared once, in its converter module; the
command line, the judging run, the aggregation and the reports dispatch on these declarations.

GEdit-Bench (VIEScore task ``tie``; TIGER-AI-Lab/VIEScore ``viescore/__init__.py``, the GEdit scorer's copy of it
in Step1X-Edit's ``GEdit-Bench/``): SC = min of two 0-10 scores from [source, edited] + instruction, PQ = min of
two 0-10 scores from the edited image, O = sqrt(SC * PQ) per sample (``calculate_statistics.py``); the edited
image is resized to the source's size before judging (``test_gedit_score.py``: ``.resize(source.size)``); means
per task type, then the unweighted mean over the task types. The published numbers use ``gpt-4.1`` (SpatialReward
paper, sec. 5.3: "GPT-4.1 serves as the ground truth standard evaluator").

ImgEdit-Bench Basic (PKU-YuanGroup/ImgEdit ``Benchmark/Basic/``): one request per edit with the type's rubric,
source and edited image (``basic_bench.py``); three ``Name: <1-5>`` lines; per-image mean rounded to 2 places
(``step1_get_avgscore.py``), per-type means rounded to 2 places (``step2_typescore.py``); Overall = the mean over
the types, as ImgEdit's leaderboard defines it, judged by GPT-4.1 (``assets/leaderboard.png`` @2051b15: "'Overall'
is calculated by averaging all scores across tasks. We use GPT-4.1 for evaluation."; the script names ``gpt-4o``).

Also the protocol of a run and of a comparison of runs (:mod:`modeling_miescore.evaluation.protocol`): the runs of a
comparison must agree on everything but the editor (:func:`check_like_protocols`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, Iterator, Optional

from ...data.converters import editor_protocols
from ...data.converters.schema import EditorBenchmark
from ...data.errors import BenchmarkInputError
from ...hub.errors import MIEScoreInputError
from ..protocol import differences, folder_sha256, make_protocol, package_version, prompts_setting, weights_sha256

__all__ = ["AGGREGATION_ORDER", "EDITOR_BENCHMARKS", "EditorBenchmark", "check_like_protocols", "comparison_protocol",
           "dataset_sha256", "editor_benchmark", "released_settings", "run_protocol"]


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


AGGREGATION_ORDER = "per key (its samples), per category, then the unweighted mean over categories"
FAILURES = "flagged judgements and failed requests left out of every mean"
_DATA_FILES = (".parquet", ".arrow")
# settings two compared runs may differ in: the comparison recomputes every CI with its own bootstrap
COMPARISON_IGNORES = ("aggregation.bootstrap",)


def dataset_sha256(dataset: str) -> Optional[str]:
    """The hash of a converted dataset's data files (a Hub id: None, its revision is named instead)."""
    return folder_sha256(dataset, _DATA_FILES)


def _request(settings) -> dict:
    """The request format (the sampling settings, temperature and seed, are the judge's)."""
    return {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("source", "temperature", "seed")}


def _judge(spec, settings, judge_name: Optional[str], reported: list, reward_models: list, options) -> dict:
    mllm = None
    if spec is not None:
        mllm = {"backend": spec.kind, "model": spec.model if spec.kind == "openai" else Path(spec.model).name,
                "name": judge_name, "endpoint_model": reported or None,
                "weights_sha256": weights_sha256(spec.model) if spec.kind == "transformers" else None,
                "sampling": {"temperature": settings.temperature, "seed": settings.seed},
                **({"dtype": options.dtype} if spec.kind == "transformers" else {})}
    return {"mllm": mllm, "reward_models": [{"kind": kind.name, "weights_sha256": weights_sha256(ckpt) or ckpt,
                                             "dtype": options.dtype} for kind, ckpt in reward_models]}


def released_settings(benchmark: EditorBenchmark) -> dict:
    """The released protocol's settings, as a partial settings tree (what :func:`run_protocol` compares with)."""
    released = editor_benchmark(benchmark.name)
    return {"judge": {"mllm": {"model": released.published_judge}}, "request": _request(released.request),
            "prompts": {"source": "the benchmark's own (the user's copy)"},
            "aggregation": {"rounding": released.round_to}}


def run_protocol(benchmark: EditorBenchmark, *, dataset: str, rows, selected, options, settings, prompts,
                 judge_name: Optional[str], reported: list, reward_models: list, mode: str) -> dict:
    """``report["protocol"]`` of one run (module docstring); ``reported``: the model names the endpoint reported,
    ``reward_models``: ``[(RewardJudge kind, checkpoint)]``, ``mode``: how a key's samples become its value."""
    local = Path(dataset).expanduser()
    settings_tree = {
        "dataset": {"benchmark": benchmark.dataset, "release": rows.release,
                    "data_sha256": dataset_sha256(dataset), "hub_id": None if local.exists() else dataset,
                    "split": "test", "subsets": ["full", *sorted(benchmark.subsets or {})],
                    "languages": sorted(set(selected["language"])), "categories": sorted(set(selected["category"])),
                    "keys": int(len(selected))},
        "judge": _judge(options.spec, settings, judge_name, reported, reward_models, options),
        "request": _request(settings) if options.spec is not None else None,
        "prompts": prompts_setting(prompts) if prompts is not None else None,
        "aggregation": {"per_key": mode, "order": AGGREGATION_ORDER, "rounding": benchmark.round_to,
                        "failures": FAILURES,
                        "bootstrap": {"n": options.bootstrap.n, "seed": options.bootstrap.seed,
                                      "level": options.bootstrap.level}},
        "package": {"miescore": package_version()},
    }
    released = released_settings(benchmark) if options.spec is not None else {
        "aggregation": {"rounding": editor_benchmark(benchmark.name).round_to}}
    return make_protocol(benchmark.name, settings_tree, released)


def check_like_protocols(protocols: Dict[str, dict], allow: bool) -> Dict[str, list]:
    """``{run: [differences from the first run]}`` of the runs' protocols (``"<run> <benchmark>"`` -> protocol);
    unless ``allow``, a difference (or a report without a protocol) refuses the comparison with every differing
    setting, run by run."""
    out: Dict[str, list] = {}
    firsts: Dict[str, tuple] = {}
    for name, protocol in protocols.items():
        if not protocol:
            out[name] = ["no protocol recorded (a report of an earlier version: run its benchmark again)"]
            continue
        kind = protocol.get("kind")
        if kind not in firsts:
            firsts[kind] = (name, protocol)
            continue
        first_name, first = firsts[kind]
        lines = differences(protocol, first, ignore=COMPARISON_IGNORES, names=(name, first_name))
        if lines:
            out[name] = lines
    if out and not allow:
        listing = "; ".join(f"{run}: {', '.join(lines)}" for run, lines in out.items())
        raise BenchmarkInputError(f"the runs were judged under different protocols ({listing}); compare runs of "
                                  "one protocol, or pass --allow-protocol-differences (every table then says so)")
    return out


def comparison_protocol(protocols: Dict[str, dict], *, by: Optional[str], bootstrap, allowed: Dict[str, list]) -> dict:
    """``report["protocol"]`` of a comparison: the runs' fingerprints (one per protocol) and the comparison's own
    settings (run names, folders and the baseline's name are not settings)."""
    return make_protocol("editors", {
        "runs": sorted({str((p or {}).get("fingerprint")) for p in protocols.values()}),
        "comparison": {"by": by or "the MLLM judge",
                       "bootstrap": {"n": bootstrap.n, "seed": bootstrap.seed, "level": bootstrap.level},
                       "allowed_differences": allowed},
        "package": {"miescore": package_version()}})
