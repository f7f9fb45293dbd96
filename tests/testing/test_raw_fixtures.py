"""The synthetic raw releases: layout, determinism, planted faults and raters that carry real signal."""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench, make_raw_mie_bench

DIMS = ("visual_quality", "instruction_following", "attribute_preservation")


def _tree_hashes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def mie_raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("fx") / "mie"
    info = make_raw_mie_bench(root, n_instances=24, n_models=12, seed=3, image_size=64)
    return root, info


def test_mie_layout(mie_raw):
    root, info = mie_raw
    instances = [json.loads(x) for x in (root / "instances.jsonl").read_text().splitlines()]
    edits = [json.loads(x) for x in (root / "edits.jsonl").read_text().splitlines()]
    assert len(instances) == 24 and len(edits) == 24 * 12
    assert {"instance_id", "task", "instruction", "sources"} <= set(instances[0])
    assert {"edit_id", "instance_id", "editing_model", "image"} <= set(edits[0])
    assert all(len(i["sources"]) >= 2 for i in instances)  # MIE: two or more sources
    assert len({e["editing_model"] for e in edits}) == 12
    for rel in instances[0]["sources"] + [edits[0]["image"]]:
        with Image.open(root / rel) as im:
            assert im.size == (64, 64) and im.mode == "RGB"
    ratings = pd.read_csv(root / "ratings.csv")
    assert list(ratings.columns) == ["subject_id", "edit_id", "dimension", "rating"]
    assert ratings["rating"].between(0, 5).all()
    assert set(ratings["dimension"]) == set(DIMS)
    per_item = ratings.groupby(["edit_id", "dimension"]).size()
    assert (per_item == 15).all()  # paper: 15 raters per image
    truth = pd.read_csv(root / "truth.csv", keep_default_na=False)
    assert len(truth) == len(edits) and set(truth["edit_id"]) == {e["edit_id"] for e in edits}
    meta = json.loads((root / "truth.json").read_text())
    assert meta["unreliable_subjects"] == info["unreliable_subjects"] and len(info["unreliable_subjects"]) == 2


def test_mie_deterministic(tmp_path, mie_raw):
    root, _ = mie_raw
    again = tmp_path / "again"
    make_raw_mie_bench(again, n_instances=24, n_models=12, seed=3, image_size=64)
    assert _tree_hashes(again) == _tree_hashes(root)
    other = tmp_path / "other"
    make_raw_mie_bench(other, n_instances=2, n_models=12, seed=4, image_size=64)
    assert (other / "ratings.csv").read_bytes()[:2000] != (root / "ratings.csv").read_bytes()[:2000]


def _sharpness(path: Path) -> float:
    a = np.asarray(Image.open(path).convert("L"), dtype=float)
    return float(np.abs(np.diff(a, axis=0)).mean() + np.abs(np.diff(a, axis=1)).mean())


def test_mie_faults_are_in_the_pixels_and_the_latent(mie_raw):
    root, info = mie_raw
    truth = info["truth"]
    faults = truth["faults"].str.split(";")
    has = {f: faults.apply(lambda fs, f=f: f in fs) for f in ("blur", "jpeg", "color_shift", "missing_source", "pasted")}
    clean = truth["faults"] == ""
    assert clean.sum() > 50 and all(v.sum() >= 5 for v in has.values())
    # each fault lowers the right dimension of the latent quality
    lat = truth[["latent_vq", "latent_if", "latent_ap"]]
    assert lat[has["blur"]]["latent_vq"].mean() < lat[clean]["latent_vq"].mean() - 0.8
    assert lat[has["jpeg"]]["latent_vq"].mean() < lat[clean]["latent_vq"].mean() - 0.6
    assert lat[has["missing_source"]]["latent_if"].mean() < lat[clean]["latent_if"].mean() - 1.0
    assert lat[has["missing_source"]]["latent_ap"].mean() < lat[clean]["latent_ap"].mean() - 0.8
    assert lat[has["color_shift"]]["latent_ap"].mean() < lat[clean]["latent_ap"].mean() - 0.6
    only_cs = truth["faults"] == "color_shift"
    if only_cs.sum() >= 3:  # a pure colour shift barely touches IF
        assert abs(lat[only_cs]["latent_if"].mean() - lat[clean]["latent_if"].mean()) < 0.6
    # blur is visible: blurred edits are less sharp than clean edits of the same instances
    sharp = {r.edit_id: _sharpness(root / "edits" / f"{r.edit_id}.jpg") for r in truth.itertuples()}
    blurred = truth[has["blur"] & ~has["jpeg"]]
    diffs = []
    for r in blurred.itertuples():
        peers = truth[(truth["instance_id"] == r.instance_id) & clean]
        if len(peers):
            diffs.append(sharp[r.edit_id] - np.mean([sharp[e] for e in peers["edit_id"]]))
    assert len(diffs) >= 5 and np.mean(diffs) < 0


def test_mie_raters_follow_latent_and_unreliable_are_noisier(mie_raw):
    root, info = mie_raw
    ratings = pd.read_csv(root / "ratings.csv")
    truth = info["truth"].set_index("edit_id")
    short = dict(zip(DIMS, ("vq", "if", "ap")))
    ratings["latent"] = [truth.at[e, f"latent_{short[d]}"] for e, d in zip(ratings["edit_id"], ratings["dimension"])]
    corr = ratings.groupby("subject_id")[["rating", "latent"]].apply(lambda g: g["rating"].corr(g["latent"]))
    bad = set(info["unreliable_subjects"])
    honest = corr[[s not in bad for s in corr.index]]
    assert honest.min() > 0.9
    assert corr[list(bad)].max() < honest.min() - 0.1
    # unreliable raters are unbiased (not wild): their mean residual is near zero
    res = (ratings["rating"] - ratings["latent"]).groupby(ratings["subject_id"]).mean()
    assert res[list(bad)].abs().max() < 0.2


def test_mie_mos_format_and_append(tmp_path):
    root = tmp_path / "mos"
    make_raw_mie_bench(root, n_instances=3, n_models=2, seed=1, image_size=48, rating_format="mos")
    assert not (root / "ratings.csv").exists()
    mos = pd.read_csv(root / "mos.csv")
    assert list(mos.columns) == ["edit_id", "mos_vq", "mos_if", "mos_ap"] and len(mos) == 6
    assert mos[["mos_vq", "mos_if", "mos_ap"]].stack().between(0, 100).all()
    make_raw_mie_bench(root, n_instances=2, n_models=2, seed=1, image_size=48, rating_format="mos", instance_offset=3)
    ids = [json.loads(x)["instance_id"] for x in (root / "instances.jsonl").read_text().splitlines()]
    assert ids == [f"mie-{i:05d}" for i in range(5)]
    assert len(pd.read_csv(root / "mos.csv")) == 10 and len(pd.read_csv(root / "truth.csv")) == 10


def test_mer_layout_votes_and_planted_no_majority(tmp_path):
    root = tmp_path / "mer"
    info = make_raw_mer_bench(root, n_samples=24, seed=5, image_size=64)
    samples = [json.loads(x) for x in (root / "samples.jsonl").read_text().splitlines()]
    cands = [json.loads(x) for x in (root / "candidates.jsonl").read_text().splitlines()]
    assert len(samples) == 24 and len(cands) == 24 * 6
    assert Counter(s["category"] for s in samples) == {"general": 12, "human_basic": 6, "human_fine": 6}  # 2:1:1
    assert all(s["subtask"] for s in samples)
    with Image.open(root / samples[0]["original_image"]) as im:
        assert im.size == (64, 64)
    with open(root / "annotations.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert set(rows[0]) == {"annotator_id", "candidate_id", "overall", "sc", "pq"}
    by_cand = {}
    for r in rows:
        by_cand.setdefault(r["candidate_id"], []).append(r)
    assert all(len(v) == 5 for v in by_cand.values()) and len(by_cand) == len(cands)
    truth = info["truth"].set_index("candidate_id")
    planted = set(info["no_majority"])
    assert 0 < len(planted) < len(cands) // 4
    for cid, votes in by_cand.items():
        top = Counter(v["overall"] for v in votes).most_common(1)[0]
        if cid in planted:
            assert top[1] < 3
        else:
            assert top == (truth.at[cid, "overall"], top[1]) and top[1] >= 3
            for d in ("sc", "pq"):
                t, n = Counter(v[d] for v in votes).most_common(1)[0]
                assert n >= 3 and t == truth.at[cid, d]
    # poor-PQ candidates really are degraded: with the same SC tier, they are farther from the original
    orig = {s["sample_id"]: np.asarray(Image.open(root / s["original_image"]), dtype=float) for s in samples}
    dist = {c["candidate_id"]: np.abs(np.asarray(Image.open(root / c["image"]), dtype=float) - orig[c["sample_id"]]).mean()
            for c in cands}
    compared = 0
    for sc in ("good", "medium"):
        good_pq = [dist[c] for c in truth.index if truth.at[c, "pq"] == "good" and truth.at[c, "sc"] == sc]
        poor_pq = [dist[c] for c in truth.index if truth.at[c, "pq"] == "poor" and truth.at[c, "sc"] == sc]
        if good_pq and poor_pq:
            assert np.mean(poor_pq) > np.mean(good_pq) + 5
            compared += 1
    assert compared >= 1


def test_mer_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_raw_mer_bench(a, n_samples=6, seed=2, image_size=48)
    make_raw_mer_bench(b, n_samples=6, seed=2, image_size=48)
    assert _tree_hashes(a) == _tree_hashes(b)
