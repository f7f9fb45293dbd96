"""Running judges over an editor's outputs, resumably: the judges' input file, the MLLM judge through
:class:`~modeling_miescore.cli.model_calls.ModelCallRun`'s engine, and the checks that keep a resumed run honest.

Files under ``OUT`` (all resumable; a rerun of the same command sends only what has no answer yet):

* ``inputs/judge_inputs.jsonl`` and ``inputs/images/``: one ``score-batch`` line per edit (``{"id": "<row>#<k>",
  "row", "sample", "sources", "edited", "instruction"}``), the sources exported from the dataset (written atomically
  on every run, the same for the same input);
* ``judgements.jsonl``: the MLLM judge's records (:mod:`.editor_judge`), appended through
  :func:`~modeling_miescore.scoring.jsonl_scoring.score_jsonl` (locked, fsynced per chunk, an incomplete last line
  cut off on resume), beside its answer cache ``judgements.jsonl.cache.sqlite`` and usage log
  ``judgements.jsonl.usage.jsonl``;
* ``reward-<kind>.jsonl``: a reward model's scores (:mod:`.reward_judges`).

A judgements file made by another judge, with other prompts or other request settings is never extended, and one whose record of an edit
was made for another edited image (its ``edited_sha256`` differs) is refused: pass another ``--out``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

from ...hub.errors import MIEScoreInputError
from ...utils.atomic_files import write_text_atomic
from ...data.errors import EXAMPLES
from ..protocol import file_sha256
from ...scoring.jsonl_scoring import read_predictions, BatchReport, score_jsonl

__all__ = ["check_resumable", "file_sha256", "read_records", "run_mllm_judge", "write_judge_inputs"]


def write_judge_inputs(folder: Path, edits, rows, sources: Dict[str, list]) -> tuple[Path, Dict[str, dict]]:
    """``folder/judge_inputs.jsonl`` for ``edits`` (:class:`~.edit_files.ResolvedEdits`) and ``{input id:
    {"category", "edited_sha256"}}`` for the judges."""
    lines, info = [], {}
    for ref in edits.edits:
        meta = rows.loc[ref.row]
        lines.append(json.dumps({"id": ref.input_id, "row": ref.row, "sample": ref.sample, "sources": sources[ref.row],
                                 "edited": str(ref.path), "instruction": meta["instruction"]}))
        info[ref.input_id] = {"category": meta["category"], "edited_sha256": file_sha256(ref.path)}
    return write_text_atomic(folder / "judge_inputs.jsonl", "\n".join(lines) + "\n"), info


def read_records(path: Path) -> Dict[str, dict]:
    """``{id: record}`` of a judgements / reward file (missing file: empty); an incomplete last line is ignored."""
    return {key: json.loads(raw) for key, raw in read_predictions(Path(path), repair=False)[0].items()}


def check_resumable(path: Path, expected: Dict[str, object], info: Dict[str, dict]) -> None:
    """Refuse to extend ``path`` when a record disagrees with ``expected`` (e.g. ``{"judge": ..., "prompts": ...}``)
    or was made for another edited image than ``info`` names."""
    other, changed = set(), []
    for key, record in read_records(path).items():
        for field, value in expected.items():
            if record.get(field) != value:
                other.add(f"{field} {record.get(field)!r}")
        sha = record.get("edited_sha256")
        if key in info and sha is not None and sha != info[key]["edited_sha256"]:
            changed.append(key)
    if other:
        raise MIEScoreInputError(f"'{path}' holds records of {', '.join(sorted(other))}, not "
                                 f"{', '.join(f'{k} {v!r}' for k, v in expected.items())}; pass another --out")
    if changed:
        raise MIEScoreInputError(f"'{path}' holds judgements of other edited images for {len(changed)} edits, e.g. "
                                 f"{', '.join(sorted(changed)[:EXAMPLES])}; pass another --out for these edits")


def run_mllm_judge(benchmark, calls, spec, inputs: Path, output: Path, info: Dict[str, dict], prompts, *, name: str,
                   settings, progress: bool):
    """Judge every edit of ``inputs`` not yet in ``output`` with the benchmark's MLLM judge on the engine of
    ``spec`` (from ``calls``, a :class:`~modeling_miescore.cli.model_calls.ModelCallRun`), its requests sent as
    ``settings`` say (:class:`~modeling_miescore.data.converters.schema.JudgeRequestSettings`); returns
    ``(BatchReport, judge)``."""
    check_resumable(output, {"judge": name, "prompts": prompts.label, "request": settings.label()}, info)
    if set(info) <= set(read_records(output)):  # a finished run: report again without starting the judge model
        return BatchReport(skipped_existing=len(info)), None
    engine = calls.engine(spec)
    judge = benchmark.judge_class()(engine, prompts, name=name, info=info, settings=settings)
    batch = engine.backend.batch_size
    report = score_jsonl(judge.score_batch, inputs, output, batch_size=batch, on_error="skip", progress=progress,
                         chunk_size=4 * max(batch, engine.backend.max_concurrency))
    return report, judge
