"""One editor on one editor benchmark, end to end: what ``miescore benchmark gedit`` / ``imgedit`` run.
:func:`aggregate_run` is the aggregation alone, from the judgements on disk (what ``miescore benchmark rescore``
runs again). Bad input raises :class:`~modeling_miescore.data.errors.BenchmarkInputError` before anything is judged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ...data.errors import BenchmarkInputError
from ..instance_bootstrap import BootstrapSettings
from ..protocol import package_version
from .editing_rows import export_sources, load_editing_rows, resolve_edits, select_rows
from .editor_report import build_editor_report, editor_plots, reward_judge_summary
from .judge_run import (parse_reward_judge, read_records, recheck_judgements, reward_judge_name, reward_view,
                        run_mllm_judge, run_reward_judge, write_judge_inputs)
from .protocols import EditorBenchmark, run_protocol
from .scores import MetricNotes, row_frame, sample_frame, selection_views
from ...utils.credentials import redacted_url
from ...scoring.jsonl_scoring import make_output_folder
from ..report import write_report

__all__ = ["EditorRunOptions", "RunContext", "aggregate_run", "evaluate_editor", "load_prompts"]


@dataclass
class EditorRunOptions:
    """How a run judges. None means: no MLLM judge (``spec``), our own prompts (``prompts_path``), the benchmark's
    released request settings (``request``). ``label``: a line shown at the top of the report (e.g. "random
    weights"); ``recheck``: :func:`~.judge_run.recheck_judgements`."""

    calls: object = None
    spec: object = None
    prompts_path: Optional[str] = None
    judge_name: Optional[str] = None
    request: object = None
    reward_judges: Sequence[str] = ()
    best_of_n: bool = False
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 4
    bootstrap: BootstrapSettings = field(default_factory=BootstrapSettings)
    plots: bool = True
    progress: bool = True
    label: Optional[str] = None
    recheck: int = 0


def load_prompts(benchmark: EditorBenchmark, path: Optional[str], categories: Sequence[str]):
    """The judge's prompts: the user's copy of the benchmark's prompt file, or our own wording."""
    return benchmark.judge_class().read_prompts(path, categories)


def _judge_lines(spec, settings, benchmark: EditorBenchmark) -> dict:
    """Where the judge ran (the endpoint's base URL, credentials masked, or the local model) and how its requests
    were sent, with every difference from the benchmark's released script."""
    where = redacted_url(spec.base_url) if spec.kind == "openai" else f"local transformers model {spec.model}"
    return {"judge_endpoint": where, "request": settings.label(),
            "request_differences": settings.differences(benchmark.request) if benchmark.request else []}


def evaluate_editor(benchmark: EditorBenchmark, dataset: str, edits: str, out_dir, *,
                    languages: Optional[Sequence[str]] = None, categories: Optional[Sequence[str]] = None,
                    options: Optional[EditorRunOptions] = None) -> tuple[dict, list[str]]:
    """Judge an editor's ``edits`` on ``dataset`` and write the report into ``out_dir`` (module docstring).

    Returns ``(report, unfinished)``: ``unfinished`` lists what a rerun should retry (edits whose request failed
    for good, reward-model lines that could not be scored); the report covers everything judged so far.
    """
    options = options or EditorRunOptions()
    if options.spec is None and not options.reward_judges:
        raise BenchmarkInputError("nothing to judge with: give the MLLM judge (--backend ...) and/or a reward model "
                                  "(--judge miescore:CKPT / spatialreward:CKPT)")
    kinds = [parse_reward_judge(text) for text in options.reward_judges]
    out = Path(out_dir)
    context = RunContext.open(benchmark, dataset, edits, languages, categories, kinds)
    rows, selected, resolved = context.rows, context.selected, context.resolved
    if not resolved.edits:
        raise BenchmarkInputError(f"--edits '{edits}' holds no edit of the {len(selected)} selected rows "
                                  f"({resolved.outside_selection} edits of other rows); check the filters")
    prompts = load_prompts(benchmark, options.prompts_path, selected["category"]) if options.spec else None
    make_output_folder(out, "out_dir: ")  # only once the input is known to be usable: bad input writes nothing
    context.sources = export_sources(rows, sorted({r.row for r in resolved.edits}), out / "inputs", options.progress)
    inputs, info = write_judge_inputs(out / "inputs", resolved, rows.frame, context.sources)

    settings = options.request or benchmark.request
    unfinished: list[str] = []
    judge_name, recheck = _mllm_judge(benchmark, options, settings, inputs, out, info, prompts, unfinished)
    for kind, ckpt in kinds:
        _run_reward_judge(kind, ckpt, options, benchmark, inputs, out, info, unfinished)
    report = aggregate_run(benchmark, context, out, options, judge_name, settings, prompts)
    records = read_records(out / "judgements.jsonl") if judge_name else {}
    reported = sorted({r["endpoint_model"] for r in records.values() if r.get("endpoint_model")})
    report["protocol"] = run_protocol(
        benchmark, dataset=dataset, rows=rows, selected=selected, options=options, settings=settings, prompts=prompts,
        judge_name=judge_name, reported=reported, reward_models=kinds, mode=report["run"]["inputs"]["mode"])
    if recheck is not None:
        report["recheck"] = recheck
    report["plots"] = editor_plots(report, out) if options.plots else {}
    write_report(out, report)
    return report, unfinished


@dataclass
class RunContext:
    """What a run judged: the inputs as given, the dataset's rows, the selection, the matched edits, the sources'
    files and the reward models (``[(kind, checkpoint)]``); :func:`aggregate_run` turns it and the judgements on
    disk into the report (``miescore benchmark rescore`` rebuilds it from a report)."""

    dataset: str
    edits: str
    languages: Optional[Sequence[str]]
    categories: Optional[Sequence[str]]
    rows: object
    selected: object
    resolved: object
    sources: dict
    kinds: list

    @classmethod
    def open(cls, benchmark: EditorBenchmark, dataset: str, edits: str, languages: Optional[Sequence[str]],
             categories: Optional[Sequence[str]], kinds: list) -> "RunContext":
        """The dataset's rows, the selection and the edits matched to it (``sources``: empty, filled by the run)."""
        rows = load_editing_rows(dataset, benchmark)
        selected = select_rows(rows, languages, categories)
        return cls(dataset=dataset, edits=edits, languages=languages, categories=categories, rows=rows,
                   selected=selected, resolved=resolve_edits(edits, rows.frame, selected), sources={}, kinds=kinds)


def aggregate_run(benchmark: EditorBenchmark, context: RunContext, out: Path, options: EditorRunOptions,
                  judge_name: Optional[str], settings, prompts) -> dict:
    """The report of a run from the judgements under ``out`` (``judgements.jsonl``, ``reward-<kind>.jsonl``):
    every aggregate and the counts; no judge is called."""
    rows, selected, resolved, sources = context.rows, context.selected, context.resolved, context.sources
    shape = _RunShape(mode="best" if options.best_of_n else "selected" if resolved.selector else "mean",
                      order=sorted(set(rows.frame["category"])), selector=resolved.selector,
                      expected={language: sorted(set(part["category"]))
                                for language, part in selected.groupby("language")},
                      sources={row: [p if Path(p).is_absolute() else f"inputs/{p}" for p in paths]
                               for row, paths in sources.items()})
    records = read_records(out / "judgements.jsonl") if judge_name else {}
    with MetricNotes() as notes:
        samples = sample_frame(selected, resolved, records, benchmark, rows.flags)
        judge_rows = row_frame(samples, benchmark, shape.mode) if judge_name else None
        reward = {}
        for kind, ckpt in context.kinds:
            reward[reward_judge_name(kind, ckpt)] = _reward_summary(benchmark, kind, options, shape, out, selected,
                                                                    resolved, rows, judge_rows)
        report = build_editor_report(
            benchmark, run=_run_info(context, judge_name, options, settings, benchmark, prompts, shape.mode),
            samples=samples, rows=judge_rows if judge_rows is not None else samples.iloc[0:0],
            missing=resolved.missing, outside_selection=resolved.outside_selection, prompts=prompts,
            bootstrap=options.bootstrap, reward=reward, judge_ran=judge_name is not None, order=shape.order,
            expected=shape.expected, sources=shape.sources)
        if resolved.selector and judge_name:
            report["selection"] = {"selector": resolved.selector, "views": selection_views(
                samples, benchmark, options.bootstrap, shape.order, shape.expected, shape.sources)}
    report["notes"] = notes.lines
    report["label"] = options.label
    return report


@dataclass
class _RunShape:
    """How a run's samples become per-key values: ``mode`` (:data:`~.scores.ROW_MODES`), the categories' order,
    the categories each language must have (``expected``) and the reward that selected the samples, if any."""

    mode: str
    order: list
    expected: dict
    selector: Optional[str] = None
    sources: dict = field(default_factory=dict)


def _mllm_judge(benchmark, options: EditorRunOptions, settings, inputs: Path, out: Path, info: dict, prompts,
                unfinished: list) -> tuple[Optional[str], Optional[dict]]:
    """Run the MLLM judge when one is given, and its re-check (``--recheck``); ``(its name, the re-check)``
    (None: none)."""
    if options.spec is None:
        return None, None
    spec = options.spec
    judge_name = options.judge_name or (Path(spec.model).name if spec.kind == "transformers" else spec.model)
    recheck = None
    with options.calls:
        batch, _ = run_mllm_judge(benchmark, options.calls, spec, inputs, out / "judgements.jsonl", info, prompts,
                                  name=judge_name, settings=settings, progress=options.progress)
        if options.recheck:
            recheck = recheck_judgements(benchmark, options.calls, spec, inputs, out / "judgements.jsonl", info,
                                         prompts, name=judge_name, settings=settings, n=options.recheck,
                                         bootstrap=options.bootstrap)
    if batch.errors:
        unfinished.append(f"{len(batch.errors)} edits were not judged (their request failed; listed above)")
    return judge_name, recheck


def _run_reward_judge(kind, ckpt: str, options: EditorRunOptions, benchmark, inputs: Path, out: Path, info: dict,
                      unfinished: list) -> None:
    """Score the edits with one reward model into ``out/reward-<kind>.jsonl`` (resumable)."""
    batch, name = run_reward_judge(kind, ckpt, inputs, out / f"reward-{kind.name}.jsonl", info,
                                   resize=benchmark.resize_to_source, device=options.device, dtype=options.dtype,
                                   batch_size=options.batch_size, progress=options.progress)
    if batch.errors:
        unfinished.append(f"{len(batch.errors)} edits were not scored by {name}")


def _reward_summary(benchmark, kind, options: EditorRunOptions, shape: _RunShape, out: Path, selected, resolved,
                    rows, judge_rows) -> dict:
    """One reward model's summary for the report, from its scores on disk."""
    view = reward_view(benchmark, kind)
    reward_samples = sample_frame(selected, resolved, read_records(out / f"reward-{kind.name}.jsonl"), view,
                                  rows.flags)
    summary = reward_judge_summary(kind, row_frame(reward_samples, view, shape.mode), judge_rows, benchmark,
                                   options.bootstrap, shape.order, shape.expected, shape.sources)
    summary["counts"] = {"scored": int((reward_samples["judged"] & ~reward_samples["failed"]).sum()),
                         "flagged": int((reward_samples["judged"] & reward_samples["failed"]).sum()),
                         "not_scored": int((~reward_samples["judged"]).sum())}
    if shape.selector:
        summary["selection"] = {"selector": shape.selector, "views": selection_views(
            reward_samples, view, options.bootstrap, shape.order, shape.expected, shape.sources)}
    return summary


def _local_path(path: str) -> str:
    """A local input's absolute path (what ``rescore`` reopens from another folder); a Hub id as given."""
    local = Path(path).expanduser()
    return str(local.resolve()) if local.exists() else path


def _run_info(context: RunContext, judge_name, options: EditorRunOptions, settings, benchmark, prompts,
              mode: str) -> dict:
    resolved = context.resolved
    samples = ("best of N (max overall per key)" if options.best_of_n else
               f"the sample selected by {resolved.selector}" if resolved.selector else "mean over each key's samples")
    given = (("language", context.languages or []), ("category", context.categories or []))
    return {"dataset": context.dataset, "release": context.rows.release, "edits": f"{context.edits} ({resolved.form})",
            "miescore_version": package_version(), "judge": judge_name or "none (reward models only)",
            **(_judge_lines(options.spec, settings, benchmark) if options.spec is not None else {}),
            "prompts": prompts.label if prompts else None, "samples": samples,
            "selection": ", ".join(f"{k} {', '.join(v)}" for k, v in given if v),
            "inputs": {"dataset": _local_path(context.dataset), "edits": _local_path(context.edits),
                       "languages": list(context.languages or []), "categories": list(context.categories or []),
                       "prompts": _local_path(options.prompts_path) if options.prompts_path else None,
                       "reward_judges": [f"{kind.name}:{_local_path(ckpt)}" for kind, ckpt in context.kinds],
                       "best_of_n": options.best_of_n, "mode": mode},
            "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
