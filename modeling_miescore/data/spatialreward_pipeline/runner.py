"""Running the three stages over a dataset, chunk by chunk, resumable, with the outputs and the report.

The output files are listed in ``docs/model_calls.md``. ``samples.jsonl`` is the ledger, appended and fsynced per
chunk; ``sft_rows.jsonl`` is rewritten from it at the end of every run. A request that failed for good leaves its
sample out of the ledger, so the next run asks again (answers already received come from the answer cache) and a
killed run loses at most the requests in flight. An exclusive lock on the ledger stops a second run on the folder.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from tqdm.auto import tqdm

from ...hub.errors import MIEScoreInputError
from ...judges.call_engine import CallEngine, run_together
from ...scoring.jsonl_scoring import read_predictions
from ...utils.atomic_files import atomic_write, write_text_atomic
from ...utils.output_lock import exclusive_output
from .alignment import alignment_request, make_pq_row, make_sc_row, parse_alignment
from .annotation import HUMAN_WORDS, parse_annotation, pq_request, route, sc_request
from .grounding import grounding_request, parse_grounding
from .report import Outcome, build_report, format_report
from .samples import EditRecord

__all__ = ["PipelineConfig", "PipelineJudges", "PipelineRun", "run_pipeline"]


@dataclass
class PipelineJudges:
    """The models of each stage, as call engines (several may share one engine, cache and usage log).

    ``grounder``: stage I; ``face`` / ``object``: stage-II SC of human-centric / general edits; ``pq``: stage-II
    PQ; ``aligner``: stage III (default: the grounder, as in the paper).
    """

    grounder: CallEngine
    face: CallEngine
    object: CallEngine
    pq: CallEngine
    aligner: Optional[CallEngine] = None

    def __post_init__(self):
        self.aligner = self.aligner or self.grounder


@dataclass
class PipelineConfig:
    """Generation budget, region count, crops and overlays, our two answer filters, the routing vocabulary and
    ``quote_user_text``; each is explained in its stage module. ``reject_unclean_scores`` and ``min_similarity``
    (0 = off) are our filters, not the paper's.
    """

    max_tokens: int = 1024
    temperature: float = 0.0
    crop_padding: float = 0.15
    min_crop_side: int = 64
    min_similarity: float = 0.6
    human_words: Sequence[str] = HUMAN_WORDS
    chunk_size: int = 64
    quote_user_text: bool = True
    box_num_mode: str = "edits"
    annotate_sources: bool = True
    reject_unclean_scores: bool = True


@dataclass
class PipelineRun:
    """What one run did: samples finished now, already finished before, left unfinished by failed requests
    (per stage), and the report over the whole ledger."""

    finished: int = 0
    already_done: int = 0
    unfinished: Dict[str, int] = field(default_factory=dict)
    report: Dict[str, Any] = field(default_factory=dict)
    stage_seconds: Dict[str, float] = field(default_factory=dict)  # wall time per stage: requests built and answered


@dataclass
class _State:
    record: EditRecord
    sample: Any = None
    regions: List[Dict[str, Any]] = field(default_factory=list)
    route: Optional[str] = None
    sc: Optional[Outcome] = None
    pq: Optional[Outcome] = None
    sc_answer: Optional[Tuple[Tuple[float, float], str]] = None
    rows: List[Dict[str, Any]] = field(default_factory=list)


def _failed_request(result, stage: str) -> Optional[Outcome]:
    """None for an answer; a rejection for a refusal (the model's final word); else an unfinished outcome."""
    if result.ok:
        return None
    if result.error_kind == "refusal":
        return Outcome.rejected(stage, "refusal", result.error or "")
    return Outcome("api_error", stage, result.error_kind, result.error or "")


def _stage_grounding(states: List[_State], judges: PipelineJudges, config: PipelineConfig) -> None:
    live = [s for s in states if s.sc is None]
    requests = [grounding_request(s.record, s.sample, config.max_tokens, config.temperature, config.quote_user_text,
                                  box_num_mode=config.box_num_mode) for s in live]
    for state, result in zip(live, judges.grounder.run(requests)):
        state.sc = _failed_request(result, "grounding")
        if state.sc is None:
            state.regions, outcome = parse_grounding(result.text)
            state.sc = None if outcome.status == "ok" else outcome
            if state.sc is None:
                state.route = route(state.record, state.regions, config.human_words)


def _stage_annotation(states: List[_State], judges: PipelineJudges, config: PipelineConfig) -> None:
    by_route = {name: [s for s in states if s.sc is None and s.route == name] for name in ("human", "general")}
    pq_states = [s for s in states if s.pq is None]
    sc_jobs = [[sc_request(s.sample, s.regions, name, config.max_tokens, config.temperature, config.crop_padding,
                           config.min_crop_side, config.quote_user_text, annotate_sources=config.annotate_sources)
                for s in by_route[name]]
               for name in ("human", "general")]
    pq_jobs = [pq_request(s.sample, config.max_tokens, config.temperature) for s in pq_states]
    human, general, pq = run_together([(judges.face, sc_jobs[0]), (judges.object, sc_jobs[1]), (judges.pq, pq_jobs)])
    for state, result in [*zip(by_route["human"], human), *zip(by_route["general"], general)]:
        state.sc = _failed_request(result, "annotation")
        if state.sc is None:
            scores, reasoning, outcome = parse_annotation(result.text, "sc", len(state.sample.sources),
                                                          config.reject_unclean_scores)
            state.sc = None if outcome.status == "ok" else outcome
            state.sc_answer = (scores, reasoning) if scores is not None else None
    for state, result in zip(pq_states, pq):
        state.pq = _failed_request(result, "annotation")
        if state.pq is None:
            scores, reasoning, outcome = parse_annotation(result.text, "pq",
                                                          reject_unclean=config.reject_unclean_scores)
            if outcome.status != "ok":
                state.pq = outcome
                continue
            row, state.pq = make_pq_row(state.record, reasoning, scores, judges.pq.backend.model)
            if state.pq.status == "ok":
                state.rows.append(row)


def _stage_alignment(states: List[_State], judges: PipelineJudges, config: PipelineConfig) -> None:
    live = [s for s in states if s.sc is None]
    requests = [alignment_request(s.sample, s.regions, s.sc_answer[1], config.max_tokens, config.temperature,
                                  config.quote_user_text) for s in live]
    for state, result in zip(live, judges.aligner.run(requests)):
        state.sc = _failed_request(result, "alignment")
        if state.sc is not None:
            continue
        scores, original = state.sc_answer
        refined, outcome = parse_alignment(result.text, original, config.min_similarity)
        if refined is None:
            state.sc = outcome
            continue
        annotator = (judges.face if state.route == "human" else judges.object).backend.model
        row, state.sc = make_sc_row(state.record, state.regions, refined, scores, annotator, state.route)
        if state.sc.status == "ok":
            state.rows.insert(0, row)


def _load(states: List[_State], judges: PipelineJudges, config: PipelineConfig) -> None:
    for state in states:
        try:
            state.sample = state.record.load()
        except (MIEScoreInputError, OSError, ValueError) as err:
            state.sc = state.pq = Outcome.rejected("input", "unreadable_image", str(err))


_STAGES = (("input", _load), ("grounding", _stage_grounding), ("annotation", _stage_annotation),
           ("alignment", _stage_alignment))


def _process_chunk(records: Sequence[EditRecord], judges: PipelineJudges, config: PipelineConfig,
                   seconds: Dict[str, float]) -> List[_State]:
    states = [_State(r) for r in records]
    for name, stage in _STAGES:
        started = time.perf_counter()
        stage(states, judges, config)
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
    return states


def _ledger_line(state: _State) -> str:
    return json.dumps({"id": state.record.id, "route": state.route, "sc": state.sc.as_dict(),
                       "pq": state.pq.as_dict(), "rows": state.rows}, ensure_ascii=False)


def _write_outputs(out_dir: Path, order: Sequence[str], input_problems) -> Dict[str, Any]:
    """sft_rows.jsonl, rejections.jsonl and report.json from the whole ledger (atomic replacements)."""
    ledger = read_predictions(out_dir / "samples.jsonl", repair=False)[0]
    rank = {sample_id: i for i, sample_id in enumerate(order)}
    samples = [json.loads(raw) for _, raw in sorted(ledger.items(), key=lambda kv: rank.get(kv[0], len(rank)))]
    with atomic_write(out_dir / "sft_rows.jsonl") as handle:
        for sample in samples:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in sample["rows"])
    with atomic_write(out_dir / "rejections.jsonl") as handle:
        for sample in samples:
            for stream in ("sc", "pq"):
                if sample[stream]["status"] == "rejected":
                    handle.write(json.dumps({"id": sample["id"], "stream": stream, **sample[stream]},
                                            ensure_ascii=False) + "\n")
    report = build_report(samples, input_problems)
    write_text_atomic(out_dir / "report.json", json.dumps(report, indent=2) + "\n")
    return report


def run_pipeline(records: Sequence[EditRecord], out_dir, judges: PipelineJudges,
                 config: Optional[PipelineConfig] = None, progress: bool = True,
                 input_problems: Iterable[Tuple[str, str]] = ()) -> PipelineRun:
    """Annotate every record not yet in ``out_dir``'s ledger; write the outputs (module docstring)."""
    config = config or PipelineConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ledger = out_dir / "samples.jsonl"
    run = PipelineRun()
    with exclusive_output(ledger, "output folder"):
        done, repaired = read_predictions(ledger)
        if repaired:
            print(f"note: removed an incomplete last line from '{ledger}' (left by an interrupted run)",
                  file=sys.stderr)
        todo = [r for r in records if r.id not in done]
        run.already_done = len(records) - len(todo)
        size = max(1, int(config.chunk_size))
        with tqdm(total=len(records), initial=run.already_done, desc="spatialreward-data", unit="sample",
                  file=sys.stderr, disable=not progress) as bar, open(ledger, "a", encoding="utf-8") as out:
            for start in range(0, len(todo), size):
                for state in _process_chunk(todo[start:start + size], judges, config, run.stage_seconds):
                    if state.sc.final and state.pq.final:
                        out.write(_ledger_line(state) + "\n")
                        run.finished += 1
                    for outcome in (state.sc, state.pq):
                        if not outcome.final:
                            run.unfinished[outcome.stage] = run.unfinished.get(outcome.stage, 0) + 1
                out.flush()
                os.fsync(out.fileno())
                bar.update(min(size, len(todo) - start))
        run.report = _write_outputs(out_dir, [r.id for r in records], input_problems)
    if progress:
        print(format_report(run.report), file=sys.stderr)
    return run
