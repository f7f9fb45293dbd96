"""Score a converted benchmark (or MER-Bench) with a model into a resumable predictions file.

SpatialReward's result fields map onto the score keys as ``instruction_following`` = ``s_if`` (SC stream, editing
success), ``attribute_preservation`` = ``s_con`` (SC stream, consistency / over-editing), ``visual_quality`` =
``pq``, ``overall`` = ``reward``; a failed parse writes ``null`` (a missing prediction, never a made-up number).
Each edited image is scored once even when it is in several pairs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from tqdm.auto import tqdm

from ..data.converters.schema import SPLIT
from .benchmark_protocols import scoring_protocol
from ..data.dataset_splits import load_split
from .model_runs import check_prediction_cache, score_mer_with_spatialreward
from ..scoring.jsonl_scoring import read_predictions, read_done_ids
from .converted_benchmarks import edit_ids

__all__ = ["MIEScoreRewardAdapter", "needs_scoring", "score_converted", "score_samples", "spatialreward_scores"]


def spatialreward_scores(result) -> dict:
    """The score keys of one SpatialReward result (``null`` for all when it failed)."""
    if result.failed:
        return {"visual_quality": None, "instruction_following": None, "attribute_preservation": None,
                "overall": None}
    return {"visual_quality": result.pq, "instruction_following": result.s_if,
            "attribute_preservation": result.s_con, "overall": float(result.reward)}


def score_samples(scorer, samples: list, batch_size: int) -> list[dict]:
    """Score dicts of ``samples`` (``{"sources", "edited", "instruction"}``) with a MIEScore or SpatialReward scorer."""
    if hasattr(scorer, "evaluate_edits"):
        return [spatialreward_scores(r) for r in scorer.evaluate_edits(samples, batch_size=batch_size)]
    return scorer.score_batch(samples, batch_size=batch_size)  # one-source samples get the single-source prompt


class MIEScoreRewardAdapter:
    """A MIEScore model seen as a reward scorer: ``evaluate_edits`` -> results with ``reward`` = overall / 100."""

    def __init__(self, model):
        self.model = model

    def evaluate_edits(self, samples, batch_size: int = 8):
        return [SimpleNamespace(reward=r["overall"] / 100.0, failed=False)
                for r in self.model.score_batch(samples, batch_size=batch_size)]


def _pending_edits(ds, config: str, done: set[str]):
    """``(edit id, sample)`` of every edited image not in ``done``, each id once, in row order."""
    seen = set(done)
    for row in ds:
        if config == "pointwise":
            edits = [(str(row["id"]), row["edited_image"])]
        else:
            edits = [(str(row["edited_a_id"]), row["edited_a"]), (str(row["edited_b_id"]), row["edited_b"])]
        for edit_id, image in edits:
            if edit_id not in seen:
                seen.add(edit_id)
                yield edit_id, {"sources": list(row["source_images"]), "edited": image,
                                "instruction": row["instruction"]}


def _write_chunk(handle, ids: list[str], samples: list, scorer, batch_size: int) -> None:
    lines = [json.dumps({"id": edit_id, **scores}) + "\n"
             for edit_id, scores in zip(ids, score_samples(scorer, samples, batch_size))]
    handle.writelines(lines)
    handle.flush()
    os.fsync(handle.fileno())


def needs_scoring(data, out_dir) -> bool:
    """Whether ``out_dir/predictions.jsonl`` lacks a line for some edited image (MER-Bench: group) of ``data``."""
    preds = Path(out_dir) / "predictions.jsonl"
    if not preds.exists():
        return True
    if scoring_protocol(data.protocol).unit == "group":  # MER-Bench: one line per group
        from .model_runs import read_done_pairs  # the group scorer's own resume reader (repairs a torn last line)

        return not {str(p) for ds in data.frames.values() for p in ds["pair_id"]} <= read_done_pairs(preds)
    records, _ = read_predictions(preds, repair=False)
    return not {i for config, frame in data.frames.items() for i in edit_ids(frame, config)} <= set(records)


def score_converted(data, scorer, out_dir, *, batch_size: int = 8, progress: bool = True,
                    identity: dict | None = None) -> Path:
    """Score the edits of ``data`` (a :class:`~.converted_benchmarks.BenchmarkData`) into
    ``out_dir/predictions.jsonl`` (resumed by a rerun with the same ``identity``); returns its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    identity = identity or {"dataset": data.dataset}
    check_prediction_cache(out, identity)
    preds = out / "predictions.jsonl"
    if scoring_protocol(data.protocol).unit == "group":  # MER-Bench: one line per group
        adapter = scorer if hasattr(scorer, "evaluate_edits") else MIEScoreRewardAdapter(scorer)
        return score_mer_with_spatialreward(data.frames, "", out, batch_size=batch_size, progress=progress,
                                            identity=identity, scorer=adapter)
    done, _ = read_done_ids(preds)
    chunk = max(1, 8 * batch_size)
    with open(preds, "a", encoding="utf-8") as handle:
        for config in data.metadata.get("kinds", []):
            ds = load_split(data.dataset, SPLIT, config)
            ids, samples = [], []
            for edit_id, sample in tqdm(_pending_edits(ds, config, done), desc=f"scoring {data.name}", unit="edit",
                                        file=sys.stderr, disable=not progress):
                ids.append(edit_id)
                samples.append(sample)
                done.add(edit_id)
                if len(samples) == chunk:
                    _write_chunk(handle, ids, samples, scorer, batch_size)
                    ids, samples = [], []
            if samples:
                _write_chunk(handle, ids, samples, scorer, batch_size)
    return preds
