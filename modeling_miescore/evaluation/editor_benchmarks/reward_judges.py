"""Our reward models as judges of an editor's outputs (``--judge miescore:CKPT`` / ``--judge spatialreward:CKPT``),
beside the benchmark's MLLM judge, on the same edits (GEdit: the edited image resized to the source's size too).

Each kind is declared once in :data:`REWARD_JUDGES`: its scores, their scale, the one compared with the
benchmark's overall (by Spearman rank correlation per row, in the report) and how a checkpoint is loaded and run.

* ``miescore``: MIEScore's three dimensions and overall (0-100 MOS scale, ``score_batch``);
* ``spatialreward``: SpatialReward's SC and PQ (0-25) and reward (0-1, ``evaluate_edits``); a judgement that
  could not be parsed is flagged (``failed``), never given ``config.failure_reward``.

Scores go to ``OUT/reward-<kind>.jsonl`` through :func:`~modeling_miescore.scoring.jsonl_scoring.score_jsonl`
(resumable; every record names its ``judge``, ``<kind>:<checkpoint>``, and a file of another checkpoint is never
extended).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

from ...hub.errors import MIEScoreInputError
from .editor_judge import prepare_edited
from .judge_run import check_resumable
from ...hub.processing_miescore import EditSample
from ...scoring.loading import load_scorer, load_spatialreward, read_checkpoint_config
from ...scoring.jsonl_scoring import BatchReport, read_done_ids, score_jsonl

__all__ = ["REWARD_JUDGES", "RewardJudgeKind", "parse_reward_judge", "reward_judge_name", "reward_view",
           "run_reward_judge"]


@dataclass(frozen=True)
class RewardJudgeKind:
    """A reward model usable as a judge: ``scores`` it writes (with ``labels``), its ``scale`` text, the
    ``overall`` score compared with the benchmark's and each score's ``bounds`` (``(low, high)``: a value outside
    is not one the model writes; SpatialReward's SC and PQ top is the checkpoint's ``score_range``, 25 in the
    paper, so only their floor is fixed)."""

    name: str
    scores: tuple[str, ...]
    labels: dict
    scale: str
    overall: str
    bounds: dict


REWARD_JUDGES: Dict[str, RewardJudgeKind] = {k.name: k for k in (
    RewardJudgeKind("miescore", ("visual_quality", "instruction_following", "attribute_preservation", "overall"),
                    {"visual_quality": "VQ", "instruction_following": "IF", "attribute_preservation": "AP",
                     "overall": "Overall"}, "0-100 (MOS scale)", "overall",
                    {k: (0.0, 100.0) for k in ("visual_quality", "instruction_following", "attribute_preservation",
                                               "overall")}),
    RewardJudgeKind("spatialreward", ("sc", "pq", "reward"), {"sc": "SC", "pq": "PQ", "reward": "Reward"},
                    "SC, PQ 0-25; reward 0-1", "reward", {"sc": (0.0, math.inf), "pq": (0.0, math.inf),
                                                          "reward": (0.0, 1.0)}),
)}


def reward_view(benchmark, kind: RewardJudgeKind):
    """The benchmark's protocol with the reward model's scores in place of the judge's (same categories, subsets
    and languages; no rounding): what the aggregation of :mod:`.scores` takes for a reward model."""
    import dataclasses

    return dataclasses.replace(benchmark, scores=kind.scores, overall=kind.overall, labels=kind.labels, round_to=None)


def parse_reward_judge(text: str) -> tuple[RewardJudgeKind, str]:
    """``"miescore:CKPT"`` -> ``(kind, CKPT)``; a one-line error for anything else."""
    kind, sep, ckpt = text.partition(":")
    if not sep or not ckpt or kind not in REWARD_JUDGES:
        raise MIEScoreInputError(f"--judge '{text}' is not KIND:CHECKPOINT with KIND one of "
                                 f"{', '.join(REWARD_JUDGES)} (e.g. miescore:/ckpt/miescore-8b)")
    return REWARD_JUDGES[kind], ckpt


def _resized(samples, resize: bool) -> List[Any]:
    return [EditSample(sources=s.sources, edited=prepare_edited(s, resize), instruction=s.instruction, id=s.id)
            for s in samples]


def _scorer(kind: RewardJudgeKind, model, name: str, resize: bool, info: Dict[str, dict]):
    def miescore(samples, batch_size):
        results = model.score_batch(_resized(samples, resize), batch_size=batch_size)
        return [{**{k: float(r[k]) for k in kind.scores}, "failed": False, "judge": name,
                 "edited_sha256": info.get(s.id, {}).get("edited_sha256")} for s, r in zip(samples, results)]

    def spatialreward(samples, batch_size):
        results = model.evaluate_edits(_resized(samples, resize), batch_size=batch_size)
        return [{"sc": None if r.failed else r.sc, "pq": None if r.failed else r.pq,
                 "reward": None if r.failed else float(r.reward), "failed": bool(r.failed),
                 "issues": list(r.failure_reasons), "judge": name,
                 "edited_sha256": info.get(s.id, {}).get("edited_sha256")} for s, r in zip(samples, results)]

    return {"miescore": miescore, "spatialreward": spatialreward}[kind.name]


def _load(kind: RewardJudgeKind, ckpt: str, device: str, dtype: str):
    model_type = read_checkpoint_config(ckpt).get("model_type")  # a ModelLoadError is a one-line input error
    wanted = {"miescore": ("miescore",), "spatialreward": ("spatialreward", "qwen3_vl")}[kind.name]
    if model_type not in wanted:
        raise MIEScoreInputError(f"--judge {kind.name}:{ckpt} is a {model_type!r} checkpoint, not a {kind.name} one")
    load = load_scorer if kind.name == "miescore" else load_spatialreward
    return load(ckpt, device=device, dtype=dtype)


def reward_judge_name(kind: RewardJudgeKind, ckpt: str) -> str:
    """The judge's name in its records and in the report: ``<kind>:<checkpoint's absolute path or Hub id>``."""
    ref = Path(ckpt).expanduser()
    return f"{kind.name}:{ref.resolve() if ref.exists() else ckpt}"


def run_reward_judge(kind: RewardJudgeKind, ckpt: str, inputs: Path, output: Path, info: Dict[str, dict], *,
                     resize: bool, device: str = "auto", dtype: str = "auto", batch_size: int = 4,
                     progress: bool = True):
    """Score every edit of ``inputs`` not yet in ``output`` with the checkpoint; returns the ``BatchReport``."""
    name = reward_judge_name(kind, ckpt)
    check_resumable(output, {"judge": name}, info)
    done, _ = read_done_ids(output, repair=False)
    if set(info) <= done:  # a finished run: report again without loading the model
        return BatchReport(skipped_existing=len(info)), name
    model = _load(kind, ckpt, device, dtype)
    report = score_jsonl(_scorer(kind, model, name, resize, info), inputs, output, batch_size=batch_size,
                         on_error="skip", progress=progress)
    return report, name
