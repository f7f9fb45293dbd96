"""MER-Bench builder: majority vote, 2/3/4-pair group rules checked against the raw annotations,
schema compatible with the authors' release, determinism, validation and atomic writes."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from modeling_miescore.cli.main import main as miescore
from modeling_miescore.data.builders.mer_bench import build_mer_bench, majority_tier
from modeling_miescore.data.builders.output_folder import OutputExistsError
from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench

RANK = {"poor": 0, "medium": 1, "good": 2}
AUTHOR_COLUMNS = {"pair_id", "instruction", "original_image", "edited_images", "label", "sample_id"}


def tree_hashes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("mer")
    raw = base / "raw"
    info = make_raw_mer_bench(raw, n_samples=40, seed=1, image_size=64)
    out = base / "out"
    summary = build_mer_bench(raw, out, progress=False, groups_per_type=15, seed=0)
    cache = tmp_path_factory.mktemp("hf_cache")
    import datasets

    ds = datasets.load_dataset(str(out), cache_dir=str(cache))
    return {"raw": raw, "out": out, "info": info, "summary": summary, "ds": ds, "cache": cache}


def raw_majorities(raw: Path) -> dict:
    """Majority tiers recomputed straight from annotations.csv (independent of the builder)."""
    ann = pd.read_csv(raw / "annotations.csv")
    out = {}
    for cid, g in ann.groupby("candidate_id"):
        tiers = {}
        for d in ("overall", "sc", "pq"):
            t, n = Counter(g[d]).most_common(1)[0]
            tiers[d] = t if n >= 3 else None
        out[cid] = tiers
    return out


def test_groups_follow_the_pair_rules(built):
    raw, ds = built["raw"], built["ds"]
    maj = raw_majorities(raw)
    cand_sample = {json.loads(x)["candidate_id"]: json.loads(x)["sample_id"]
                   for x in (raw / "candidates.jsonl").read_text().splitlines()}
    assert set(ds) == {"2pair", "3pair", "4pair"}
    used = []
    for split in ds:
        k = int(split[0])
        cols = ds[split].remove_columns(["original_image", "edited_images"])
        assert cols.num_rows == 15
        for row in cols:
            ids = row["candidate_ids"]
            assert len(ids) == k == len(row["editing_models"]) == len(row["overall_tiers"])
            assert {cand_sample[c] for c in ids} == {row["sample_id"]}  # one sample per group
            tiers = [maj[c] for c in ids]
            assert all(None not in t.values() for t in tiers)  # only majority-voted candidates
            assert [t["overall"] for t in tiers] == row["overall_tiers"]
            assert [t["sc"] for t in tiers] == row["sc_tiers"] and [t["pq"] for t in tiers] == row["pq_tiers"]
            keys = [(RANK[t["overall"]], RANK[t["sc"]], RANK[t["pq"]]) for t in tiers]
            assert all(a > b for a, b in zip(keys, keys[1:])), keys  # best first, strictly (no ties)
            overall = [t["overall"] for t in tiers]
            if k == 2:
                assert overall[0] != overall[1]
            elif k == 3:
                assert overall == ["good", "medium", "poor"]
            else:
                assert sorted(set(overall), key=RANK.get, reverse=True) == ["good", "medium", "poor"]
                dup = [t for t, n in Counter(overall).items() if n == 2]
                assert len(dup) == 1  # the fourth shares its overall tier with one base member ...
                twins = [keys[i] for i, t in enumerate(overall) if t == dup[0]]
                assert twins[0][1:] != twins[1][1:]  # ... and differs only in SC/PQ
            assert row["label"] == row["category"]
            used += ids
    assert len(used) == len(set(used))  # each candidate in at most one group


def test_needs_review_matches_planted_no_majority(built):
    planted = set(built["info"]["no_majority"])
    assert planted
    nr = built["summary"].needs_review
    assert {r["candidate_id"] for r in nr} == planted
    assert all(r["dimensions"] == ["overall"] for r in nr)
    listed = pd.read_csv(built["out"] / "needs_review.csv")
    assert set(listed["candidate_id"]) == planted
    card = (built["out"] / "README.md").read_text()
    assert "## Needs review" in card and all(c in card for c in planted)
    for split in built["ds"]:
        for ids in built["ds"][split]["candidate_ids"]:
            assert not planted & set(ids)


def test_schema_and_images_match_raw(built):
    import datasets

    ds, raw = built["ds"], built["raw"]
    for split in ds:
        assert AUTHOR_COLUMNS <= set(ds[split].column_names)
        assert {"category", "subtask", "editing_models"} <= set(ds[split].column_names)
        f = ds[split].features
        assert isinstance(f["original_image"], datasets.Image) and isinstance(f["edited_images"].feature, datasets.Image)
    row = ds["4pair"][0]
    cands = {json.loads(x)["candidate_id"]: json.loads(x) for x in (raw / "candidates.jsonl").read_text().splitlines()}
    samples = {json.loads(x)["sample_id"]: json.loads(x) for x in (raw / "samples.jsonl").read_text().splitlines()}
    assert len(row["edited_images"]) == 4 and all(isinstance(im, Image.Image) for im in row["edited_images"])
    for im, cid in zip(row["edited_images"], row["candidate_ids"]):
        assert np.array_equal(np.asarray(im), np.asarray(Image.open(raw / cands[cid]["image"])))
        assert cands[cid]["editing_model"] in row["editing_models"]
    s = samples[row["sample_id"]]
    assert np.array_equal(np.asarray(row["original_image"]), np.asarray(Image.open(raw / s["original_image"])))
    assert row["instruction"] == s["instruction"] and row["subtask"] == s["subtask"] and row["label"] == s["category"]
    stream = datasets.load_dataset(str(built["out"]), split="3pair", streaming=True, cache_dir=str(built["cache"]))
    first = next(iter(stream))
    assert first["pair_id"] == ds["3pair"][0]["pair_id"]
    assert len(first["edited_images"]) == 3 and isinstance(first["edited_images"][0], Image.Image)


def test_deterministic_and_seeded(built, tmp_path):
    again = tmp_path / "again"
    build_mer_bench(built["raw"], again, progress=False, groups_per_type=15, seed=0)
    assert tree_hashes(again) == tree_hashes(built["out"])
    other = tmp_path / "other"
    build_mer_bench(built["raw"], other, progress=False, groups_per_type=15, seed=1)
    import pyarrow.parquet as pq

    ids = lambda out: pq.read_table(next((out / "data").glob("3pair-*.parquet")), columns=["pair_id"]).column(0).to_pylist()
    assert ids(other) != ids(built["out"])


def test_shortfall_reported_when_data_runs_out(built, tmp_path):
    out = tmp_path / "out"
    s = build_mer_bench(built["raw"], out, progress=False, groups_per_type=200)
    assert s.shortfall and all(v > 0 for v in s.shortfall.values())
    assert any("fewer groups than requested" in w for w in s.warnings)
    assert s.num_groups == sum(v["num_examples"] for v in s.splits.values())
    assert 0 < s.splits["4pair"]["num_examples"] < 200


def test_majority_tier():
    assert majority_tier(["good", "good", "good", "poor", "medium"]) == "good"
    assert majority_tier(["good", "good", "medium", "medium", "poor"]) is None
    assert majority_tier(["poor"] * 5) == "poor"


def test_all_validation_errors_reported_at_once(tmp_path):
    raw = tmp_path / "raw"
    make_raw_mer_bench(raw, n_samples=4, seed=3, image_size=40)
    samples = [json.loads(x) for x in (raw / "samples.jsonl").read_text().splitlines()]
    samples[1]["category"] = "animals"  # line 2: unknown category
    samples[2]["original_image"] = "originals/missing.jpg"  # line 3: missing image
    lines = [json.dumps(s) for s in samples] + [json.dumps(samples[0]), "{bad json"]  # 5 duplicate, 6 malformed
    (raw / "samples.jsonl").write_text("\n".join(lines) + "\n")
    cands = [json.loads(x) for x in (raw / "candidates.jsonl").read_text().splitlines()]
    cands[0]["sample_id"] = "nowhere"  # line 1: unknown sample
    (raw / cands[1]["image"]).write_bytes(b"not an image")  # line 2: unreadable image
    (raw / "candidates.jsonl").write_text("\n".join(json.dumps(c) for c in cands) + "\n")
    ann = (raw / "annotations.csv").read_text().splitlines()
    f = ann[1].split(",")
    ann[1] = ",".join(f[:2] + ["excellent"] + f[3:])  # line 2: bad tier
    # drop one annotation of candidate on line 5 of candidates.jsonl -> wrong count
    victim = cands[4]["candidate_id"]
    drop = next(i for i, l in enumerate(ann) if i > 0 and l.split(",")[1] == victim)
    ann.pop(drop)
    ann.append(ann[3])  # duplicate annotation
    (raw / "annotations.csv").write_text("\n".join(ann) + "\n")
    out = tmp_path / "out"
    with pytest.raises(DatasetValidationError) as exc:
        build_mer_bench(raw, out, progress=False)
    where = {(p.file, p.line): p.message for p in exc.value.problems}
    expected = {
        ("samples.jsonl", 2): "unknown category",
        ("samples.jsonl", 3): "not found",
        ("samples.jsonl", 5): "duplicate sample_id",
        ("samples.jsonl", 6): "malformed JSON",
        ("candidates.jsonl", 1): "unknown sample_id",
        ("candidates.jsonl", 2): "unreadable image",
        ("candidates.jsonl", 5): "expected 5",
        ("annotations.csv", 2): "not one of good / medium / poor",
        ("annotations.csv", len(ann)): "duplicate annotation",
    }
    for key, words in expected.items():
        assert key in where, f"missing problem at {key}; got {sorted(where)}"
        assert words in where[key], (key, where[key])
    assert not out.exists() and [p.name for p in tmp_path.glob(".out.*")] == [".out.lock"]  # no temporary folder


def test_missing_column_and_cli(tmp_path, capsys):
    def main(argv):
        return miescore(["build-dataset", "mer-bench", *argv])

    raw = tmp_path / "raw"
    make_raw_mer_bench(raw, n_samples=4, seed=3, image_size=40)
    good = (raw / "annotations.csv").read_text()
    (raw / "annotations.csv").write_text(good.replace("annotator_id,candidate_id,overall,sc,pq", "annotator_id,candidate_id,overall,sc", 1))
    assert main(["--raw", str(raw), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "annotations.csv:1: missing column(s) 'pq'" in err and "Traceback" not in err
    (raw / "annotations.csv").write_text(good)
    assert main(["--raw", str(raw), "--out", str(tmp_path / "out"), "--no-progress", "--groups-per-type", "2"]) == 0
    assert "MER-Bench written to" in capsys.readouterr().out
    with pytest.raises(OutputExistsError):
        build_mer_bench(raw, tmp_path / "out", progress=False)


@pytest.mark.slow
def test_full_size_200_groups_per_type(tmp_path):
    make_raw_mer_bench(tmp_path / "raw", n_samples=400, seed=0)
    s = build_mer_bench(tmp_path / "raw", tmp_path / "out", progress=False)  # paper: 200 groups per type
    assert {k: v["num_examples"] for k, v in s.splits.items()} == {"2pair": 200, "3pair": 200, "4pair": 200}
    assert not s.shortfall and s.needs_review


def test_groups_are_stratified_2_1_1_by_category(tmp_path):
    """SpatialReward sec. 4.2: general : human-basic : human-fine = 2:1:1; Table 2's Overall is the 2:1:1-weighted
    category mean in 7 of 8 rows, i.e. 2:1:1 groups. The fixture's samples alone would not give 2:1:1 groups."""
    import datasets

    raw = tmp_path / "raw"
    make_raw_mer_bench(raw, n_samples=48, seed=0, image_size=32)
    shares = {}
    for stratify in (True, False):
        out = tmp_path / f"out-{stratify}"
        summary = build_mer_bench(raw, out, groups_per_type=12, progress=False, stratify_categories=stratify)
        assert not any("2:1:1" in w for w in summary.warnings)
        shares[stratify] = {split: Counter(datasets.load_dataset(str(out), split=split)["category"])
                            for split in ("2pair", "3pair", "4pair")}
        assert ("stratified by category" in (out / "README.md").read_text()) is stratify
    assert all(c == {"general": 6, "human_basic": 3, "human_fine": 3} for c in shares[True].values())
    assert any(c != {"general": 6, "human_basic": 3, "human_fine": 3} for c in shares[False].values())
    # too few human-fine samples for their quota: the others fill the rest, and the build says so
    summary = build_mer_bench(raw, tmp_path / "short", groups_per_type=40, progress=False)
    assert any("groups are not 2:1:1 over the categories" in w for w in summary.warnings)
