"""MIE-Bench builder: screening, MOS signal, splits, determinism, validation, atomicity, round trip."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image
from scipy.stats import spearmanr

from modeling_miescore.cli.main import main as miescore
from modeling_miescore.data.builders import output_folder
from modeling_miescore.data.builders.output_folder import HubPushError, HubPushUnavailableError
from modeling_miescore.data.builders.mie_bench import build_mie_bench
from modeling_miescore.data.builders.mie_bench_split import DEFAULT_SPLIT_SALT, split_of, stratified_splits
from modeling_miescore.data.builders.output_folder import OutputExistsError
from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.data.schema import TASKS
from modeling_miescore.data.mos import overall_mos
from modeling_miescore.testing.raw_benchmarks import make_raw_mie_bench

N_INSTANCES = 32


def tree_hashes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def no_leftovers(out: Path) -> bool:
    """No temporary or half-renamed folders beside ``out`` (its lock file ``.<name>.lock`` stays, unlocked)."""
    from filelock import FileLock

    with FileLock(out.parent / f".{out.name}.lock", timeout=0):  # no build holds it any more
        pass
    lock = f".{out.name}.lock"
    return not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.") and p.name != lock]


def load(out: Path, cache: Path, **kw):
    import datasets

    return datasets.load_dataset(str(out), cache_dir=str(cache), **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("mie")
    raw = base / "raw"
    info = make_raw_mie_bench(raw, n_instances=N_INSTANCES, n_models=12, seed=7, image_size=64)
    out = base / "out"
    summary = build_mie_bench(raw, out, progress=False, max_shard_bytes="400KB")
    return {"base": base, "raw": raw, "out": out, "info": info, "summary": summary,
            "cache": tmp_path_factory.mktemp("hf_cache")}


# ---------------------------------------------------------------------------------------------
# screening and MOS signal
# ---------------------------------------------------------------------------------------------


def test_screening_rejects_planted_unreliable_raters_only(built):
    planted = sorted(built["info"]["unreliable_subjects"])
    scr = built["summary"].screening
    assert sorted(scr["rejected_subjects"]) == planted
    kept = [s["subject"] for s in scr["subject_stats"] if not s["rejected"]]
    assert len(kept) == 20 - len(planted) and not set(kept) & set(planted)
    on_disk = json.loads((built["out"] / "screening_report.json").read_text())
    assert sorted(on_disk["rejected_subjects"]) == planted
    card = (built["out"] / "README.md").read_text()
    assert "## Screening report" in card and all(s in card for s in planted)


def test_mos_correlates_with_planted_latent_quality(built):
    ds = load(built["out"], built["cache"])
    rows = pd.concat([ds[s].remove_columns(["source_images", "edited_image"]).to_pandas() for s in ds])
    truth = built["info"]["truth"].set_index("edit_id").loc[rows["id"]]
    for s in ("vq", "if", "ap"):
        rho = spearmanr(rows[f"mos_{s}"], truth[f"latent_{s}"].to_numpy())[0]
        assert rho > 0.9, (s, rho)  # measured ~0.99 on seeds 0-9
    # the faults move the MOS of the right dimension
    faults = truth["faults"].to_numpy()
    clean = faults == ""
    blur = np.array(["blur" in f for f in faults])
    missing = np.array(["missing_source" in f for f in faults])
    assert rows["mos_vq"][blur].mean() < rows["mos_vq"][clean].mean() - 10
    assert rows["mos_if"][missing].mean() < rows["mos_if"][clean].mean() - 10
    assert rows["mos_ap"][missing].mean() < rows["mos_ap"][clean].mean() - 10
    expected = overall_mos(rows["mos_vq"].to_numpy(), rows["mos_if"].to_numpy(), rows["mos_ap"].to_numpy())
    np.testing.assert_allclose(rows["mos_overall"].to_numpy(), expected)
    assert (rows[["n_vq", "n_if", "n_ap"]] <= 15).all().all() and (rows["n_vq"] >= 10).all()


# ---------------------------------------------------------------------------------------------
# splits
# ---------------------------------------------------------------------------------------------


def test_no_instance_in_two_splits(built):
    ds = load(built["out"], built["cache"])
    seen = {}
    for split in ds:
        for iid in set(ds[split]["instance_id"]):
            assert iid not in seen, f"{iid} in {seen.get(iid)} and {split}"
            seen[iid] = split
    assert len(seen) == N_INSTANCES
    assert set(ds) == {"train", "validation", "test"}
    tasks = {json.loads(x)["instance_id"]: json.loads(x)["task"]
             for x in (built["raw"] / "instances.jsonl").read_text().splitlines()}
    assert seen == stratified_splits(tasks)  # the default: 3:1:1 within each task


def test_split_proportions_on_a_large_id_set():
    ids = [f"inst-{i:06d}" for i in range(30000)]
    counts = pd.Series([split_of(i) for i in ids]).value_counts(normalize=True)
    assert counts["train"] == pytest.approx(0.6, abs=0.012)
    assert counts["validation"] == pytest.approx(0.2, abs=0.012)
    assert counts["test"] == pytest.approx(0.2, abs=0.012)
    assert [split_of(i) for i in ids[:500]] == [split_of(i) for i in ids[:500]]  # pure function of the id
    moved = sum(split_of(i) != split_of(i, salt=DEFAULT_SPLIT_SALT + "x") for i in ids[:2000])
    assert moved > 500  # the salt matters


def test_adding_instances_does_not_move_old_ones_with_the_hash_split(built, tmp_path):
    raw2 = tmp_path / "raw2"
    shutil.copytree(built["raw"], raw2)
    make_raw_mie_bench(raw2, n_instances=12, n_models=12, seed=7, image_size=64, instance_offset=N_INSTANCES)
    out1, out2 = tmp_path / "out1", tmp_path / "out2"
    build_mie_bench(built["raw"], out1, progress=False, split_method="hash")
    s2 = build_mie_bench(raw2, out2, progress=False, split_method="hash")
    assert s2.num_instances == N_INSTANCES + 12
    import pyarrow.parquet as pq

    def split_map(out):
        m = {}
        for f in (out / "data").glob("*.parquet"):
            split = f.name.split("-")[0]
            for iid in pq.read_table(f, columns=["instance_id"]).column(0).to_pylist():
                m[iid] = split
        return m

    old, new = split_map(out1), split_map(out2)
    assert len(old) == N_INSTANCES and len(new) == N_INSTANCES + 12
    assert all(new[i] == s for i, s in old.items())


# ---------------------------------------------------------------------------------------------
# determinism, sharding, card
# ---------------------------------------------------------------------------------------------


def test_rebuild_is_byte_for_byte_identical(built, tmp_path):
    first = tree_hashes(built["out"])
    again = tmp_path / "again"
    build_mie_bench(built["raw"], again, progress=False, max_shard_bytes="400KB")
    assert tree_hashes(again) == first
    # --overwrite onto an existing build also gives the same bytes, and leaves nothing behind
    build_mie_bench(built["raw"], again, progress=False, max_shard_bytes="400KB", overwrite=True)
    assert tree_hashes(again) == first and no_leftovers(again)


def test_shards_are_bounded_and_card_matches_data(built):
    files = sorted((built["out"] / "data").glob("*.parquet"))
    assert len(files) > 3
    assert all(f.stat().st_size <= 400_000 for f in files)
    text = (built["out"] / "README.md").read_text()
    header = yaml.safe_load(text.split("---\n")[1])
    assert header["license"] == "cc-by-nc-4.0"
    info = header["dataset_info"][0]
    splits = {s["name"]: s["num_examples"] for s in info["splits"]}
    assert splits == {k: v["num_examples"] for k, v in built["summary"].splits.items()}
    assert sum(splits.values()) == N_INSTANCES * 12
    names = info["features"][2]["dtype"]["class_label"]["names"]
    assert [names[str(i)] for i in range(16)] == list(TASKS)
    # counts are generated from the data
    truth = built["info"]["truth"]
    for task, n in truth.groupby("task").size().items():
        inst = truth[truth["task"] == task]["instance_id"].nunique()
        assert f"| {task} | " in text and f" | {inst} | {n} |" in text
    for model, n in truth.groupby("editing_model").size().items():
        assert f"| {model} | {n} |" in text
    for k in ("## Counts per number of source images", "## MOS summary", "## License", "## Citation", "CC BY 4.0"):
        assert k in text


# ---------------------------------------------------------------------------------------------
# load_dataset round trip
# ---------------------------------------------------------------------------------------------


def test_load_dataset_round_trip_and_streaming(built):
    import datasets

    ds = load(built["out"], built["cache"])
    feats = ds["train"].features
    assert isinstance(feats["task"], datasets.ClassLabel) and feats["task"].names == list(TASKS)
    assert isinstance(feats["source_images"], datasets.List) and isinstance(feats["source_images"].feature, datasets.Image)
    row = ds["test"][0]
    assert isinstance(row["edited_image"], Image.Image)
    assert len(row["source_images"]) == row["num_sources"] >= 2
    assert all(isinstance(im, Image.Image) for im in row["source_images"])
    inst = {json.loads(x)["instance_id"]: json.loads(x) for x in (built["raw"] / "instances.jsonl").read_text().splitlines()}
    raw_inst = inst[row["instance_id"]]
    assert feats["task"].int2str(row["task"]) == raw_inst["task"]
    assert row["instruction"] == raw_inst["instruction"]
    for im, rel in zip(row["source_images"], raw_inst["sources"]):  # original bytes, same pixels
        assert np.array_equal(np.asarray(im), np.asarray(Image.open(built["raw"] / rel)))
    stream = load(built["out"], built["cache"], split="test", streaming=True)
    first = next(iter(stream))
    assert first["id"] == row["id"] and isinstance(first["edited_image"], Image.Image)
    assert [type(x) for x in first["source_images"]] == [type(x) for x in row["source_images"]]
    assert stream.features["task"].names == list(TASKS)
    assert sum(1 for _ in stream) == ds["test"].num_rows


def test_mos_csv_input(tmp_path, built):
    raw = tmp_path / "raw"
    make_raw_mie_bench(raw, n_instances=6, n_models=3, seed=2, image_size=48, rating_format="mos")
    out = tmp_path / "out"
    s = build_mie_bench(raw, out, progress=False)
    assert s.mos_source == "mos" and s.screening is None and not (out / "screening_report.json").exists()
    ds = load(out, built["cache"])
    rows = pd.concat([ds[k].remove_columns(["source_images", "edited_image"]).to_pandas() for k in ds]).set_index("id")
    mos = pd.read_csv(raw / "mos.csv").set_index("edit_id").loc[rows.index]
    for k in ("mos_vq", "mos_if", "mos_ap"):
        np.testing.assert_allclose(rows[k], mos[k])
    np.testing.assert_allclose(rows["mos_overall"], overall_mos(mos["mos_vq"], mos["mos_if"], mos["mos_ap"]))
    assert rows["n_vq"].isna().all() and rows["std_vq"].isna().all()
    assert "taken as given from `mos.csv`" in (out / "README.md").read_text()


# ---------------------------------------------------------------------------------------------
# validation: every problem at once, with file and line
# ---------------------------------------------------------------------------------------------


def _small_raw(path: Path, **kw) -> Path:
    make_raw_mie_bench(path, n_instances=6, n_models=2, seed=11, image_size=40, **kw)
    return path


def _rewrite_jsonl(path: Path, edit):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")


def test_all_validation_errors_reported_at_once(tmp_path):
    raw = _small_raw(tmp_path / "raw")

    def bad_instances(lines):
        objs = [json.loads(x) for x in lines]
        objs[1]["task"] = "teleportation"  # line 2: unknown task
        objs[2]["sources"] = []  # line 3: no sources
        objs[3]["sources"][0] = "sources/does_not_exist.jpg"  # line 4: missing image
        (raw / objs[4]["sources"][1]).write_bytes(b"\x89PNG\r\n\x1a\n garbage")  # line 5: unreadable image
        out = [json.dumps(o) for o in objs]
        out.append('{"instance_id": "broken", "task": ')  # line 7: malformed JSON
        out.append(json.dumps(objs[0]))  # line 8: duplicate instance_id
        out.append(json.dumps({"instance_id": "x9", "task": "interaction"}))  # line 9: missing keys
        return out

    def bad_edits(lines):
        objs = [json.loads(x) for x in lines]
        objs[0]["instance_id"] = "mie-99999"  # line 1: unknown instance
        objs[2]["image"] = "edits/nope.jpg"  # line 3: missing image
        out = [json.dumps(o) for o in objs]
        out.append(json.dumps(objs[1]))  # line 13: duplicate edit_id
        return out

    _rewrite_jsonl(raw / "instances.jsonl", bad_instances)
    _rewrite_jsonl(raw / "edits.jsonl", bad_edits)
    lines = (raw / "ratings.csv").read_text().splitlines()
    f = lines[1].split(",")
    lines[1] = ",".join(f[:3] + ["7.5"])  # line 2: out of range
    f = lines[2].split(",")
    lines[2] = ",".join(f[:3] + ["abc"])  # line 3: not a number
    f = lines[3].split(",")
    lines[3] = ",".join(f[:2] + ["sharpness", f[3]])  # line 4: unknown dimension
    f = lines[4].split(",")
    lines[4] = ",".join([f[0], "ghost-edit"] + f[2:])  # line 5: unknown edit
    lines.append(lines[6])  # last line: duplicate rating
    (raw / "ratings.csv").write_text("\n".join(lines) + "\n")
    n_lines = len(lines)

    out = tmp_path / "out"
    with pytest.raises(DatasetValidationError) as exc:
        build_mie_bench(raw, out, progress=False)
    where = {(p.file, p.line): p.message for p in exc.value.problems}
    expected = {
        ("instances.jsonl", 2): "unknown task",
        ("instances.jsonl", 3): "no sources",
        ("instances.jsonl", 4): "not found",
        ("instances.jsonl", 5): "unreadable image",
        ("instances.jsonl", 7): "malformed JSON",
        ("instances.jsonl", 8): "duplicate instance_id",
        ("instances.jsonl", 9): "missing key",
        ("edits.jsonl", 1): "unknown instance_id",
        ("edits.jsonl", 3): "not found",
        ("edits.jsonl", 13): "duplicate edit_id",
        ("ratings.csv", 2): "out of range",
        ("ratings.csv", 3): "not a number",
        ("ratings.csv", 4): "unknown dimension",
        ("ratings.csv", 5): "unknown edit_id",
        ("ratings.csv", n_lines): "duplicate rating",
    }
    for key, words in expected.items():
        assert key in where, f"missing problem at {key}; got {sorted(where)}"
        assert words in where[key], (key, where[key])
    msg = str(exc.value)
    assert "instances.jsonl:2:" in msg and "ratings.csv:3:" in msg and "nothing was written" in msg
    assert not out.exists() and no_leftovers(out)


def test_missing_columns_and_files_are_named(tmp_path):
    raw = _small_raw(tmp_path / "raw")
    text = (raw / "ratings.csv").read_text()
    (raw / "ratings.csv").write_text(text.replace("subject_id,edit_id,dimension,rating", "subject_id,edit_id,dimension,score", 1))
    with pytest.raises(DatasetValidationError) as exc:
        build_mie_bench(raw, tmp_path / "out", progress=False)
    [p] = exc.value.problems
    assert (p.file, p.line) == ("ratings.csv", 1) and "'rating'" in p.message

    raw2 = _small_raw(tmp_path / "raw2", rating_format="mos")
    (raw2 / "mos.csv").write_text((raw2 / "mos.csv").read_text().replace("mos_ap", "mos_xx", 1))
    (raw2 / "edits.jsonl").unlink()
    with pytest.raises(DatasetValidationError) as exc:
        build_mie_bench(raw2, tmp_path / "out", progress=False)
    got = {(p.file, p.line) for p in exc.value.problems}
    assert ("mos.csv", 1) in got and ("edits.jsonl", None) in got


# ---------------------------------------------------------------------------------------------
# atomic writes
# ---------------------------------------------------------------------------------------------


def test_failed_build_leaves_nothing_and_never_clobbers(tmp_path, monkeypatch):
    raw = _small_raw(tmp_path / "raw")
    out = tmp_path / "out"
    # a crash while writing: no output folder, no temporary folder
    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("modeling_miescore.data.builders.base.write_dataset_card", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        build_mie_bench(raw, out, progress=False)
    assert not out.exists() and no_leftovers(out)
    monkeypatch.undo()

    build_mie_bench(raw, out, progress=False)
    good = tree_hashes(out)
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        build_mie_bench(raw, out, progress=False)
    # a failing rebuild with overwrite=True keeps the old dataset
    (raw / "edits.jsonl").write_text((raw / "edits.jsonl").read_text() + "{oops\n")
    with pytest.raises(DatasetValidationError):
        build_mie_bench(raw, out, progress=False, overwrite=True)
    monkeypatch.setattr("modeling_miescore.data.builders.base.write_dataset_card", boom)
    (raw / "edits.jsonl").write_text("\n".join((raw / "edits.jsonl").read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(RuntimeError):
        build_mie_bench(raw, out, progress=False, overwrite=True)
    assert tree_hashes(out) == good and no_leftovers(out)


# ---------------------------------------------------------------------------------------------
# CLI entry point and --push-to-hub guard
# ---------------------------------------------------------------------------------------------


def test_cli_exit_codes_and_messages(tmp_path, capsys):
    raw = _small_raw(tmp_path / "raw")
    out = tmp_path / "out"

    def main(argv):
        return miescore(["build-dataset", "mie-bench", *argv])

    assert main(["--raw", str(raw), "--out", str(out), "--no-progress", "--max-shard-bytes", "1MB"]) == 0
    assert "MIE-Bench written to" in capsys.readouterr().out
    assert main(["--raw", str(raw), "--out", str(out), "--no-progress"]) == 2
    assert "already exists" in capsys.readouterr().err
    (raw / "instances.jsonl").write_text((raw / "instances.jsonl").read_text() + "not json\n")
    assert main(["--raw", str(raw), "--out", str(tmp_path / "o2"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "instances.jsonl:7: malformed JSON" in err and "Traceback" not in err


def test_push_to_hub_guard(tmp_path, monkeypatch):
    raw = _small_raw(tmp_path / "raw")
    out = tmp_path / "out"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubPushUnavailableError, match="offline"):
        build_mie_bench(raw, out, progress=False, push_to_hub="someone/mie-bench")
    assert not out.exists()  # checked before building
    with pytest.raises(HubPushUnavailableError, match="invalid repository id"):
        build_mie_bench(raw, out, progress=False, push_to_hub="not a/valid/repo")

    # online but the upload fails: one clear error, the local dataset is complete, nothing partial pushed
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: False)
    calls = []

    monkeypatch.setenv("HF_TOKEN", "hf_test_token")

    class FakeApi:
        def __init__(self, token=None):
            pass

        def whoami(self):
            return {"name": "someone"}

        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw.get("repo_type")))

        def upload_folder(self, **kw):
            calls.append(("upload_folder", kw["repo_id"], kw["repo_type"]))
            raise ConnectionError("Name or service not known")

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    with pytest.raises(HubPushError, match="nothing was committed"):
        build_mie_bench(raw, out, progress=False, push_to_hub="someone/mie-bench")
    assert calls == [("create_repo", "someone/mie-bench", "dataset"), ("upload_folder", "someone/mie-bench", "dataset")]
    assert (out / "README.md").exists() and list((out / "data").glob("*.parquet"))


# ---------------------------------------------------------------------------------------------
# full-size fixture (the paper's 12 editing models, 200 instances, default 128 px images)
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_full_size_fixture_200_instances_x_12_models(tmp_path):
    import time

    t0 = time.perf_counter()
    info = make_raw_mie_bench(tmp_path / "raw", n_instances=200, n_models=12, seed=0)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = build_mie_bench(tmp_path / "raw", tmp_path / "out", progress=False)
    t_build = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
    print(f"\nfixture {t_gen:.1f} s, build {t_build:.1f} s, output {size / 1e6:.1f} MB, splits "
          f"{ {k: v['num_examples'] for k, v in s.splits.items()} }")
    assert s.num_rows == 2400 and sorted(s.screening["rejected_subjects"]) == sorted(info["unreliable_subjects"])
    counts = {k: v["num_instances"] for k, v in s.splits.items()}
    assert 0.5 < counts["train"] / 200 < 0.7 and 0.12 < counts["validation"] / 200 < 0.28
    ds = load(tmp_path / "out", tmp_path / "cache")
    rows = pd.concat([ds[k].remove_columns(["source_images", "edited_image"]).to_pandas() for k in ds])
    truth = info["truth"].set_index("edit_id").loc[rows["id"]]
    for d in ("vq", "if", "ap"):
        assert spearmanr(rows[f"mos_{d}"], truth[f"latent_{d}"].to_numpy())[0] > 0.95
    assert t_gen < 300 and t_build < 300  # measured ~8 s and ~4 s on 2 shared cores
