"""Scoring a benchmark split with a checkpoint, without the model: the image/JSONL export for ``score-batch``,
the prediction-cache identity, and the resumable MER-Bench scoring loop (with a stand-in scorer)."""

from __future__ import annotations

import io
import json
import sys
import types
from dataclasses import dataclass

import datasets
import pytest
from PIL import Image

from modeling_miescore.evaluation.errors import BenchmarkInputError
from modeling_miescore.evaluation.input_export import export_mie_inputs
from modeling_miescore.evaluation.model_runs import (
    check_prediction_cache,
    score_mer_with_spatialreward,
)


def _image_bytes(colour, fmt="PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.fixture
def mie_split():
    red, green, blue = _image_bytes("red"), _image_bytes("green", "JPEG"), _image_bytes("blue")
    features = datasets.Features({
        "id": datasets.Value("string"), "instance_id": datasets.Value("string"),
        "instruction": datasets.Value("string"),
        "source_images": datasets.List(datasets.Image()), "edited_image": datasets.Image(),
    })
    rows = {
        "id": ["a/1", "a/2", "b/1"],
        "instance_id": ["a", "a", "b"],
        "instruction": ["put it left", "put it left", "make it blue"],
        "source_images": [[{"bytes": red, "path": None}, {"bytes": green, "path": None}]] * 2
        + [[{"bytes": blue, "path": None}]],
        "edited_image": [{"bytes": b, "path": None} for b in (green, blue, red)],
    }
    return datasets.Dataset.from_dict(rows, features=features), (red, green, blue)


def test_export_writes_exact_bytes_once_per_instance_and_a_score_batch_jsonl(mie_split, tmp_path):
    ds, (red, green, blue) = mie_split
    path = export_mie_inputs(ds, tmp_path / "cache", progress=False)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["a/1", "a/2", "b/1"]
    assert lines[0]["sources"] == lines[1]["sources"] == ["images/a_s1.png", "images/a_s2.jpg"]
    assert lines[0]["edited"] == "images/a_1_edited.jpg"  # '/' is not kept in file names
    assert lines[2] == {"id": "b/1", "sources": ["images/b_s1.png"], "edited": "images/b_1_edited.png",
                        "instruction": "make it blue"}
    cache = tmp_path / "cache"
    assert (cache / "images/a_s1.png").read_bytes() == red
    assert (cache / "images/a_s2.jpg").read_bytes() == green
    assert (cache / "images/a_2_edited.png").read_bytes() == blue
    assert (cache / "images/b_1_edited.png").read_bytes() == red
    assert sorted(p.name for p in (cache / "images").iterdir()) == [
        "a_1_edited.jpg", "a_2_edited.png", "a_s1.png", "a_s2.jpg", "b_1_edited.png", "b_s1.png"]  # no temp files


def test_export_rerun_keeps_complete_images_and_rewrites_torn_ones(mie_split, tmp_path):
    ds, (red, _, blue) = mie_split
    export_mie_inputs(ds, tmp_path, progress=False)
    kept, torn = tmp_path / "images/a_s1.png", tmp_path / "images/b_s1.png"
    kept_inode = kept.stat().st_ino
    torn.write_bytes(blue[:10])  # a crash left half a file
    export_mie_inputs(ds, tmp_path, progress=False)
    assert kept.stat().st_ino == kept_inode  # not rewritten
    assert kept.read_bytes() == red and torn.read_bytes() == blue


def test_export_names_missing_columns(mie_split, tmp_path):
    ds, _ = mie_split
    with pytest.raises(BenchmarkInputError, match="lacks column.*instruction"):
        export_mie_inputs(ds.remove_columns("instruction"), tmp_path, progress=False)


def test_prediction_cache_refuses_another_run_and_records_identity(tmp_path):
    first = {"model": "m1", "dataset": "d", "split": "test"}
    check_prediction_cache(tmp_path, first)
    assert json.loads((tmp_path / "cache/predictions_source.json").read_text()) == first
    check_prediction_cache(tmp_path, {**first, "model": "m2"})  # no predictions yet: nothing to protect
    (tmp_path / "predictions.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(BenchmarkInputError, match=r"different run \(model 'm2' -> 'm3'\)"):
        check_prediction_cache(tmp_path, {**first, "model": "m3"})
    check_prediction_cache(tmp_path, {**first, "model": "m2"})  # the same run resumes


@dataclass
class _Judgement:
    reward: float
    failed: bool


class _StandInScorer:
    """Reward = length of the edited 'image' string; an edited value 'bad' fails to parse."""

    def __init__(self):
        self.calls = []

    def evaluate_edits(self, samples, batch_size):
        self.calls.append(len(samples))
        return [_Judgement(float(len(s["edited"])), s["edited"] == "bad") for s in samples]


def _stand_in_loader(monkeypatch, scorer) -> None:
    """Serve ``scorer`` from ``load_spatialreward`` without importing the real module (torch, transformers)."""
    module = types.ModuleType("modeling_miescore.scoring.loading")
    module.load_spatialreward = lambda model, device, dtype: scorer
    monkeypatch.setitem(sys.modules, module.__name__, module)


def _mer_splits():
    def split(rows):
        return datasets.Dataset.from_dict({
            "pair_id": [r[0] for r in rows], "original_image": ["o"] * len(rows),
            "instruction": ["i"] * len(rows), "edited_images": [r[1] for r in rows]})

    return {"2pair": split([("p1", ["aaa", "a"]), ("p2", ["bad", "aa"]), ("p3", ["a", "aaaa"])]),
            "3pair": split([("q1", ["aaa", "aa", "a"])])}


def test_mer_scoring_writes_one_line_per_group_and_resumes(tmp_path, monkeypatch):
    scorer = _StandInScorer()
    _stand_in_loader(monkeypatch, scorer)
    splits = _mer_splits()
    out = tmp_path / "run"
    path = score_mer_with_spatialreward(splits, "ckpt", out, batch_size=2, progress=False)
    records = {r["pair_id"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert list(records) == ["p1", "p2", "p3", "q1"]
    assert records["p1"]["scores"] == [3.0, 1.0]
    assert records["p2"] == {"pair_id": "p2", "scores": [None, 2.0], "failed": [True, False]}
    assert records["q1"]["scores"] == [3.0, 2.0, 1.0]
    assert scorer.calls == [4, 2, 3]  # chunks of max(1, 4 * 2 // 3) = 2 groups

    # a crash in the middle of a line: the rerun cuts it off and scores only what is missing
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][:7])
    scorer.calls.clear()
    score_mer_with_spatialreward(splits, "ckpt", out, batch_size=2, progress=False)
    assert [json.loads(x)["pair_id"] for x in path.read_text().splitlines()] == ["p1", "p2", "p3", "q1"]
    assert scorer.calls == [2, 3]
    scorer.calls.clear()
    score_mer_with_spatialreward(splits, "ckpt", out, batch_size=2, progress=False)  # finished: no model load
    assert scorer.calls == []


def test_mer_scoring_refuses_a_cache_that_is_not_mer_predictions(tmp_path, monkeypatch):
    _stand_in_loader(monkeypatch, _StandInScorer())
    (tmp_path / "predictions.jsonl").write_text('{"id": "x", "overall": 1}\n')
    with pytest.raises(BenchmarkInputError, match="line 1 is not a MER-Bench prediction"):
        score_mer_with_spatialreward(_mer_splits(), "ckpt", tmp_path, progress=False)
