"""Scoring a benchmark split with a checkpoint, without the model: the image/JSONL export for ``score-batch`` and
where it is cached, the prediction-cache identity, and the resumable MER-Bench scoring loop (with a stand-in
scorer) that keeps each candidate's sub-scores."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import datasets
import pytest
from PIL import Image

from modeling_miescore.data.errors import BenchmarkInputError
from modeling_miescore.data.input_export import export_mie_inputs, input_cache_dir
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


def test_input_cache_lives_under_the_hf_cache_keyed_by_the_split(mie_split, tmp_path, monkeypatch):
    from huggingface_hub import constants

    ds, _ = mie_split
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf_home"))
    default = input_cache_dir(ds)
    assert default == tmp_path / "hf_home" / "miescore" / "mie-bench-inputs" / ds._fingerprint
    assert input_cache_dir(ds) == default  # the same split resumes into the same folder
    assert input_cache_dir(ds.select([0, 1])) != default  # other rows, other folder
    assert input_cache_dir(ds, tmp_path / "mine") == tmp_path / "mine" / "mie-bench-inputs" / ds._fingerprint
    export_mie_inputs(ds, default, progress=False)
    assert (default / "inputs.jsonl").is_file() and len(list((default / "images").iterdir())) == 6


def test_prediction_cache_refuses_another_run_and_records_identity(tmp_path):
    first = {"model": "m1", "dataset": "d", "split": "test"}
    check_prediction_cache(tmp_path, first)
    assert json.loads((tmp_path / "predictions_source.json").read_text()) == first  # beside predictions.jsonl
    assert [p.name for p in tmp_path.iterdir()] == ["predictions_source.json"]  # no cache folder in the report
    check_prediction_cache(tmp_path, {**first, "model": "m2"})  # no predictions yet: nothing to protect
    (tmp_path / "predictions.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(BenchmarkInputError, match=r"different run \(model 'm2' -> 'm3'\)"):
        check_prediction_cache(tmp_path, {**first, "model": "m3"})
    check_prediction_cache(tmp_path, {**first, "model": "m2"})  # the same run resumes


@dataclass
class _Judgement:
    """The fields of ``SpatialRewardResult`` that the MER-Bench loop reads."""

    reward: float
    failed: bool
    s_if: float | None = None
    s_con: float | None = None
    s_nat: float | None = None
    s_art: float | None = None


class _StandInScorer:
    """Reward = length of the edited 'image' string, sub-scores derived from it; an edited value 'bad' fails to
    parse (its PQ stream is missing)."""

    def __init__(self):
        self.calls = []

    def evaluate_edits(self, samples, batch_size):
        self.calls.append(len(samples))
        out = []
        for s in samples:
            n, bad = float(len(s["edited"])), s["edited"] == "bad"
            out.append(_Judgement(n, bad, s_if=n, s_con=n + 0.5, s_nat=None if bad else 2 * n,
                                  s_art=None if bad else 1.0))
        return out


def _stand_in_loader(monkeypatch, scorer) -> None:
    """Serve ``scorer`` from ``load_spatialreward`` without loading a checkpoint."""
    from modeling_miescore.scoring import loading

    monkeypatch.setattr(loading, "load_spatialreward", lambda model, device, dtype: scorer)


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
    assert records["p1"]["sub_scores"] == [{"s_if": 3.0, "s_con": 3.5, "naturalness": 6.0, "artifacts": 1.0},
                                           {"s_if": 1.0, "s_con": 1.5, "naturalness": 2.0, "artifacts": 1.0}]
    assert records["p2"] == {"pair_id": "p2", "scores": [None, 2.0], "failed": [True, False],
                             "sub_scores": [{"s_if": 3.0, "s_con": 3.5, "naturalness": None, "artifacts": None},
                                            {"s_if": 2.0, "s_con": 2.5, "naturalness": 4.0, "artifacts": 1.0}]}
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
