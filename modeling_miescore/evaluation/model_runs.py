"""Run a checkpoint over a benchmark into a resumable predictions file: the cache identity check, and scoring
MER-Bench groups with a SpatialReward checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tqdm.auto import tqdm

from ..utils.atomic_files import write_text_atomic
from ..data.errors import BenchmarkInputError
from .prediction_files import SUB_SCORE_KEYS
from ..scoring.jsonl_scoring import complete_lines
from ..scoring.loading import load_spatialreward

__all__ = ["check_prediction_cache", "read_done_pairs", "score_mer_with_spatialreward"]


def check_prediction_cache(out_dir, identity: dict) -> None:
    """Refuse to resume ``out_dir/predictions.jsonl`` made with another model/dataset/split; record the identity."""
    out = Path(out_dir)
    meta = out / "predictions_source.json"
    preds = out / "predictions.jsonl"
    if meta.is_file() and preds.exists():
        try:
            old = json.loads(meta.read_text())
        except (OSError, json.JSONDecodeError):
            old = None
        if old is not None and old != identity:
            diff = ", ".join(f"{k} {old.get(k)!r} -> {identity.get(k)!r}"
                             for k in identity if old.get(k) != identity.get(k))
            raise BenchmarkInputError(
                f"'{preds}' holds predictions of a different run ({diff}); use another --out or delete the file"
            )
    write_text_atomic(meta, json.dumps(identity, indent=2) + "\n")


def read_done_pairs(path: Path) -> set[str]:
    """pair ids already in a MER predictions cache; cuts off an incomplete last line left by a crash."""
    data, _ = complete_lines(path)
    done = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if raw.strip():
            try:
                done.add(str(json.loads(raw)["pair_id"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchmarkInputError(
                    f"'{path}' line {number} is not a MER-Bench prediction; move the file away before resuming"
                ) from None
    return done


def _score_groups(scorer, rows, batch_size: int) -> list[str]:
    """Score a chunk of MER-Bench rows in one ``evaluate_edits`` call; one JSON line per group."""
    samples, spans = [], []
    for row in rows:
        first = len(samples)
        samples += [{"sources": [row["original_image"]], "edited": img, "instruction": row["instruction"]}
                    for img in row["edited_images"]]
        spans.append((str(row["pair_id"]), first, len(samples)))
    results = scorer.evaluate_edits(samples, batch_size=batch_size)
    lines = []
    for pid, a, b in spans:
        group = results[a:b]
        line = {"pair_id": pid, "scores": [None if r.failed else float(r.reward) for r in group],
                "failed": [bool(r.failed) for r in group]}
        if all(hasattr(r, "s_if") for r in group):  # a SpatialReward judgement (not a MIEScore overall)
            line["sub_scores"] = [_sub_scores(r) for r in group]
        lines.append(json.dumps(line) + "\n")
    return lines


def _sub_scores(result) -> dict:
    """The four 0-25 sub-scores of one ``SpatialRewardResult`` (None where a stream did not parse), under the
    names of the predictions format (:mod:`.prediction_files`), so the reward can be re-aggregated later."""
    return {name: None if value is None else float(value)
            for name, value in zip(SUB_SCORE_KEYS, (result.s_if, result.s_con, result.s_nat, result.s_art))}


def score_mer_with_spatialreward(splits: dict, model: str, out_dir, *, device: str = "auto", dtype: str = "auto",
                                 batch_size: int = 8, progress: bool = True, identity: dict | None = None,
                                 scorer=None) -> Path:
    """Score every MER-Bench group with a SpatialReward checkpoint into ``out_dir/predictions.jsonl`` (resumable).

    A candidate whose judgement could not be parsed gets ``null`` (counted wrong, never a made-up number). The
    sub-scores are kept so that ``--grid`` re-aggregates the reward with other weights without the model.
    ``scorer``: an already loaded object with SpatialReward's ``evaluate_edits``, used instead of loading ``model``.
    """
    out = Path(out_dir)
    preds = out / "predictions.jsonl"
    check_prediction_cache(out, identity or {"model": model, "splits": sorted(splits)})
    done = read_done_pairs(preds)
    todo = {name: [i for i, p in enumerate(ds["pair_id"]) if str(p) not in done] for name, ds in splits.items()}
    total = sum(len(v) for v in todo.values())
    if total == 0:
        return preds
    if scorer is None:
        scorer = load_spatialreward(model, device=device, dtype=dtype)
    # enough groups per chunk to fill a few generate batches; a crash loses at most one chunk
    chunk_groups = max(1, (4 * batch_size) // 3)
    with (tqdm(total=total, desc="scoring groups", unit="group", file=sys.stderr, disable=not progress) as bar,
          open(preds, "a", encoding="utf-8") as handle):
        for name, indices in todo.items():
            for start in range(0, len(indices), chunk_groups):
                lines = _score_groups(scorer, splits[name].select(indices[start:start + chunk_groups]), batch_size)
                handle.writelines(lines)
                handle.flush()
                os.fsync(handle.fileno())
                bar.update(len(lines))
    return preds
