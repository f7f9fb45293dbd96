"""One editor on one editor benchmark, end to end: what ``miescore benchmark gedit`` / ``imgedit`` run.

:func:`evaluate_editor`: open the converted dataset, select rows (``languages``, ``categories``), match the edits,
export the sources and the judges' input, run the MLLM judge (``calls`` + ``spec``: a
:class:`~modeling_miescore.cli.model_calls.ModelCallRun` and a
:class:`~modeling_miescore.judges.chat_backends.JudgeSpec`) and the reward models, aggregate, and write
``report.json``, ``report.md``, ``report.html`` and ``plots/`` (rendered first, then written atomically). Every
judging step resumes (:mod:`.judge_run`). Bad input raises
:class:`~modeling_miescore.evaluation.errors.BenchmarkInputError` before anything is judged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ..errors import BenchmarkInputError
from ..instance_bootstrap import BootstrapSettings
from .edit_files import resolve_edits
from .editing_rows import export_sources, load_editing_rows, select_rows
from .editor_report import build_editor_report, editor_plots, reward_judge_summary
from .judge_run import read_records, run_mllm_judge, write_judge_inputs
from .protocols import EditorBenchmark
from .reward_judges import parse_reward_judge, reward_view, run_reward_judge
from .scores import row_frame, sample_frame

__all__ = ["EditorRunOptions", "evaluate_editor", "load_prompts"]


@dataclass
class EditorRunOptions:
    """How a run judges: the MLLM judge (``spec`` on ``calls``; None: none), its ``prompts_path`` (None: our own
    prompts), name, token budget and temperature; ``reward_judges`` (``"KIND:CKPT"``); ``best_of_n`` (max overall
    per key instead of the mean over samples); device options for the reward models; bootstrap; plots."""

    calls: object = None
    spec: object = None
    prompts_path: Optional[str] = None
    judge_name: Optional[str] = None
    max_tokens: int = 512
    temperature: float = 0.0
    reward_judges: Sequence[str] = ()
    best_of_n: bool = False
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 4
    bootstrap: BootstrapSettings = field(default_factory=BootstrapSettings)
    plots: bool = True
    progress: bool = True


def load_prompts(benchmark: EditorBenchmark, path: Optional[str], categories: Sequence[str]):
    """The judge's prompts: the user's copy of the benchmark's prompt file, or our own wording."""
    return benchmark.judge_class().read_prompts(path, categories)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("miescore")
    except Exception:  # noqa: BLE001 - informational only
        return ""


def evaluate_editor(benchmark: EditorBenchmark, dataset: str, edits: str, out_dir, *,
                    languages: Optional[Sequence[str]] = None, categories: Optional[Sequence[str]] = None,
                    options: Optional[EditorRunOptions] = None) -> tuple[dict, list[str]]:
    """Judge an editor's ``edits`` on ``dataset`` and write the report into ``out_dir`` (module docstring).

    Returns ``(report, unfinished)``: ``unfinished`` lists what a rerun should retry (edits whose request failed
    for good, reward-model lines that could not be scored); the report covers everything judged so far.
    """
    from ...scoring.jsonl_scoring import make_output_folder
    from ..report import write_report

    options = options or EditorRunOptions()
    if options.spec is None and not options.reward_judges:
        raise BenchmarkInputError("nothing to judge with: give the MLLM judge (--backend ...) and/or a reward model "
                                  "(--judge miescore:CKPT / spatialreward:CKPT)")
    kinds = [parse_reward_judge(text) for text in options.reward_judges]
    out = Path(out_dir)
    rows = load_editing_rows(dataset, benchmark)
    selected = select_rows(rows, languages, categories)
    resolved = resolve_edits(edits, rows.frame, selected)
    if not resolved.edits:
        raise BenchmarkInputError(f"--edits '{edits}' holds no edit of the {len(selected)} selected rows "
                                  f"({resolved.outside_selection} edits of other rows); check the filters")
    prompts = load_prompts(benchmark, options.prompts_path, selected["category"]) if options.spec else None
    make_output_folder(out, "out_dir: ")  # only once the input is known to be usable: bad input writes nothing
    sources = export_sources(rows, sorted({r.row for r in resolved.edits}), out / "inputs", options.progress)
    inputs, info = write_judge_inputs(out / "inputs", resolved, rows.frame, sources)

    unfinished, judge_name = [], None
    if options.spec is not None:
        spec = options.spec
        judge_name = options.judge_name or (Path(spec.model).name if spec.kind == "transformers" else spec.model)
        with options.calls:
            batch, _ = run_mllm_judge(benchmark, options.calls, spec, inputs, out / "judgements.jsonl", info, prompts,
                                      name=judge_name, max_tokens=options.max_tokens, temperature=options.temperature,
                                      progress=options.progress)
        if batch.errors:
            unfinished.append(f"{len(batch.errors)} edits were not judged (their request failed; listed above)")
    mode = "best" if options.best_of_n else "mean"
    order = sorted(set(rows.frame["category"]))
    samples = sample_frame(selected, resolved, read_records(out / "judgements.jsonl") if judge_name else {},
                           benchmark, rows.flags)
    judge_rows = row_frame(samples, benchmark, mode) if judge_name else None
    reward = {}
    for kind, ckpt in kinds:
        output = out / f"reward-{kind.name}.jsonl"
        batch, name = run_reward_judge(kind, ckpt, inputs, output, info, resize=benchmark.resize_to_source,
                                       device=options.device, dtype=options.dtype, batch_size=options.batch_size,
                                       progress=options.progress)
        if batch.errors:
            unfinished.append(f"{len(batch.errors)} edits were not scored by {name}")
        view = reward_view(benchmark, kind)
        reward_samples = sample_frame(selected, resolved, read_records(output), view, rows.flags)
        reward[name] = reward_judge_summary(kind, row_frame(reward_samples, view, mode), judge_rows, benchmark,
                                            options.bootstrap, order)
        reward[name]["counts"] = {"scored": int((reward_samples["judged"] & ~reward_samples["failed"]).sum()),
                                  "flagged": int((reward_samples["judged"] & reward_samples["failed"]).sum()),
                                  "not_scored": int((~reward_samples["judged"]).sum())}
    run = {"dataset": dataset, "edits": f"{edits} ({resolved.form})", "miescore_version": _version(),
           "judge": judge_name or "none (reward models only)", "prompts": prompts.label if prompts else None,
           "samples": "best of N (max overall per key)" if options.best_of_n else "mean over each key's samples",
           "selection": ", ".join(f"{k} {', '.join(v)}" for k, v in (("language", languages or []),
                                                                     ("category", categories or [])) if v),
           "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    report = build_editor_report(
        benchmark, run=run, samples=samples, rows=judge_rows if judge_rows is not None else samples.iloc[0:0],
        missing=resolved.missing, outside_selection=resolved.outside_selection, prompts=prompts,
        bootstrap=options.bootstrap, reward=reward, judge_ran=judge_name is not None, order=order,
        sources={row: [p if Path(p).is_absolute() else f"inputs/{p}" for p in paths] for row, paths in sources.items()})
    report["plots"] = editor_plots(report, out) if options.plots else {}
    write_report(out, report)
    return report, unfinished
