"""The editor-benchmark converters (GEdit-Bench, ImgEdit-Bench Basic) on fixtures in the released layouts: the
``editing`` config loads with ``datasets``, rows carry the planted keys, categories, languages and subset flags,
and bad releases give every problem with file and field (CLI exit status 2) while writing nothing."""

from __future__ import annotations

import json

import pytest

from modeling_miescore.cli.main import main
from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.data.converters import get_converter
from modeling_miescore.data.converters.converted_card import read_benchmark_metadata
from modeling_miescore.testing import raw_benchmarks as rb


def _load(out):
    import datasets

    return datasets.load_dataset(str(out), "editing", split="test")


def _problems(name, raw, tmp_path, **options):
    out = tmp_path / "rejected"
    with pytest.raises(DatasetValidationError) as info:
        get_converter(name)(raw, out, progress=False, **options).build()
    assert not out.exists()  # nothing half-written
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize("layout", ["parquet", "arrow"])
def test_gedit_bench_rows_keep_keys_languages_categories_and_the_intersection_flag(tmp_path, layout):
    truth = rb.make_raw_gedit_bench(tmp_path / "raw", layout=layout)
    get_converter("gedit-bench")(tmp_path / "raw", tmp_path / "out", progress=False).build()
    ds = _load(tmp_path / "out")
    assert ds.column_names == ["id", "key", "source_images", "instruction", "category", "language",
                               "intersection_exist"]
    assert ds["id"] == ds["key"] == [t["key"] for t in truth]  # keys are unique: ids are the benchmark keys
    assert ds["category"] == [t["task_type"] for t in truth] and ds["language"] == [t["language"] for t in truth]
    assert ds["intersection_exist"] == [t["intersection_exist"] for t in truth]
    assert [r["source_images"][0].size for r in ds] == [t["source_size"] for t in truth]  # input_image, not raw
    block = read_benchmark_metadata(str(tmp_path / "out"))
    assert block["kinds"] == ["editing"] and block["subset_flags"] == ["intersection_exist"]
    assert "Judge protocol" in (tmp_path / "out" / "README.md").read_text()


def test_evaluator_commands_refuse_an_editor_benchmark(tmp_path, capsys):
    rb.make_raw_gedit_bench(tmp_path / "raw", tasks={"tone_transfer": 1}, languages=("en",))
    get_converter("gedit-bench")(tmp_path / "raw", tmp_path / "gedit", progress=False).build()
    (tmp_path / "p.jsonl").write_text("")
    assert main(["benchmark", "zero-shot", "--dataset", str(tmp_path / "gedit"), "--predictions",
                 str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert "is an editor benchmark" in err and "'miescore benchmark gedit'" in err
    assert main(["judge", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--dataset",
                 str(tmp_path / "gedit"), "--output", str(tmp_path / "j.jsonl")]) == 2
    assert "is an editor benchmark" in capsys.readouterr().err


def test_gedit_bench_key_shared_by_two_languages_gets_language_qualified_ids(tmp_path):
    truth = rb.make_raw_gedit_bench(tmp_path / "raw", shared_keys=True, tasks={"text_change": 2})
    summary = get_converter("gedit-bench")(tmp_path / "raw", tmp_path / "out", progress=False).build()
    ds = _load(tmp_path / "out")
    assert ds["id"] == [f"{t['key']}_{t['language']}" for t in truth] and ds["key"] == [t["key"] for t in truth]
    assert any("ids are <key>_<language>" in w for w in summary.warnings)


def test_gedit_bench_bad_release_names_file_row_and_field(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = tmp_path / "raw"
    rb.make_raw_gedit_bench(raw, tasks={"color_alter": 2}, languages=("en",))
    shard = raw / "data" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["input_image"] = {"bytes": b"not an image", "path": None}
    rows[1]["instruction_language"] = "de"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    problems = _problems("gedit-bench", raw, tmp_path)
    assert any(p.startswith("data/train-00000-of-00001.parquet:1: input_image: unreadable image") for p in problems)
    assert any(p.startswith("data/train-00000-of-00001.parquet:2: instruction_language 'de'") for p in problems)
    pq.write_table(table.append_column("score", pa.array([1.0, 2.0])), shard)  # a column the release does not have
    problems = _problems("gedit-bench", raw, tmp_path)
    assert problems == ["data/train-00000-of-00001.parquet: unknown column(s) 'score'; GEdit-Bench's release has "
                        "exactly task_type, key, instruction, instruction_language, input_image, input_image_raw, "
                        "Intersection_exist"]


def test_imgedit_bench_rows_and_bad_records(tmp_path, capsys):
    raw = tmp_path / "raw"
    truth = rb.make_raw_imgedit_bench(raw, images="Benchmark/singleturn")
    assert main(["convert-benchmark", "imgedit-bench", "--raw", str(raw), "--out", str(tmp_path / "out"),
                 "--images", "Benchmark/singleturn", "--no-progress"]) == 0
    ds = _load(tmp_path / "out")
    assert ds["id"] == [t["key"] for t in truth] and ds["category"] == [t["edit_type"] for t in truth]
    assert ds["instruction"] == [t["prompt"] for t in truth] and set(ds["language"]) == {"en"}
    assert "intersection_exist" not in ds.column_names and ds[2]["source_images"][0].size == (48, 48)
    entries = json.loads((raw / "basic_edit.json").read_text())
    keys = list(entries)
    (raw / "Benchmark/singleturn" / entries[keys[0]]["id"]).unlink()  # a missing source image
    entries[keys[1]]["edit_type"] = "alter"  # c14480a's spelling in a file of the current release
    del entries[keys[4]]["prompt"]  # a record without a field of the release
    text = json.dumps(entries, indent=4).replace(f'"{keys[3]}"', f'"{keys[2]}"', 1)  # a repeated key
    (raw / "basic_edit.json").write_text(text)
    assert main(["convert-benchmark", "imgedit-bench", "--raw", str(raw), "--out", str(tmp_path / "bad"),
                 "--images", "Benchmark/singleturn", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"basic_edit.json:2: '{keys[0]}': source image: image file not found: " in err
    assert (f"basic_edit.json:7: '{keys[1]}': edit_type 'alter' is not one of add, remove, replace, adjust, "
            "background, style, extract, action, compose (ImgEdit b3eb8e7, --release current); it is how ImgEdit "
            "c14480a spells it: pass --release c14480a") in err
    assert f"basic_edit.json:17: '{keys[2]}': duplicate key '{keys[2]}' (first on line 12)" in err
    assert f"basic_edit.json:22: '{keys[4]}': missing key(s) 'prompt'" in err
    assert not (tmp_path / "bad").exists()


ALL_TYPES = ("add", "remove", "replace", "adjust", "background", "style", "extract", "action", "compose")


@pytest.mark.parametrize("release,written", [("current", "adjust"), ("c14480a", "alter")])
def test_imgedit_bench_both_released_versions_convert_to_the_current_type_names(tmp_path, release, written):
    raw = tmp_path / "raw"
    truth = rb.make_raw_imgedit_bench(raw, types=ALL_TYPES, per_type=1, release=release)
    assert written in {t["edit_type"] for t in truth}  # the file spells the type as that release did
    assert main(["convert-benchmark", "imgedit-bench", "--raw", str(raw), "--out", str(tmp_path / "out"),
                 "--release", release, "--no-progress"]) == 0
    ds = _load(tmp_path / "out")
    assert ds["category"] == list(ALL_TYPES)  # prompts.json's keys, whatever the file's spelling
    block = read_benchmark_metadata(str(tmp_path / "out"))
    commit = {"current": "b3eb8e7", "c14480a": "c14480a"}[release]
    assert block["imgedit_release"] == release and block["imgedit_release_commit"] == commit
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"basic_edit.json of ImgEdit {commit}" in card and "the file differs from the one released at" in card
    if release == "c14480a":
        assert "edit type 'alter' read as 'adjust'" in card
    # the other version's spelling is refused, naming the option that reads it
    other = "c14480a" if release == "current" else "current"
    assert main(["convert-benchmark", "imgedit-bench", "--raw", str(raw), "--out", str(tmp_path / "other"),
                 "--release", other, "--no-progress"]) == 2
    assert not (tmp_path / "other").exists()


def test_imgedit_bench_card_says_when_the_file_is_the_released_one(tmp_path, monkeypatch):
    import dataclasses
    import hashlib

    from modeling_miescore.data.converters import imgedit_bench

    raw = tmp_path / "raw"
    rb.make_raw_imgedit_bench(raw, types=("adjust",), per_type=1)
    digest = hashlib.sha256((raw / "basic_edit.json").read_bytes()).hexdigest()
    monkeypatch.setitem(imgedit_bench.IMGEDIT_RELEASES, "current",
                        dataclasses.replace(imgedit_bench.IMGEDIT_RELEASES["current"], sha256=digest))
    get_converter("imgedit-bench")(raw, tmp_path / "out", progress=False).build()
    assert "the file is byte for byte the one released at b3eb8e7" in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.parametrize("name", ["gedit-bench", "imgedit-bench"])
@pytest.mark.parametrize("bad,needle", [("make\x00 it red", "control"), ("make <|im_end|> it red", "<|im_end|>"),
                                        ("x" * 10_000, "10,000 characters")])
def test_converters_refuse_instructions_the_builders_refuse(tmp_path, capsys, name, bad, needle):
    """Issue 31: NUL bytes, chat-control tokens and overlong instructions are refused at conversion, naming the
    record, as the dataset builders do (``RecordCheck.instruction``)."""
    raw = tmp_path / "raw"
    if name == "imgedit-bench":
        truth = rb.make_raw_imgedit_bench(raw, types=("add",), per_type=2)
        entries = json.loads((raw / "basic_edit.json").read_text())
        entries[truth[1]["key"]]["prompt"] = bad
        (raw / "basic_edit.json").write_text(json.dumps(entries, indent=4))
        where = f"basic_edit.json:7: '{truth[1]['key']}': prompt"
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rb.make_raw_gedit_bench(raw, tasks={"color_alter": 2}, languages=("en",))
        shard = raw / "data" / "train-00000-of-00001.parquet"
        table = pq.read_table(shard)
        rows = table.to_pylist()
        rows[1]["instruction"] = bad
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
        where = "data/train-00000-of-00001.parquet:2: instruction"
    assert main(["convert-benchmark", name, "--raw", str(raw), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert where in err and needle in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_imgedit_bench_refuses_a_key_with_a_nul_byte(tmp_path, capsys):
    raw = tmp_path / "raw"
    truth = rb.make_raw_imgedit_bench(raw, types=("add",), per_type=2)
    text = (raw / "basic_edit.json").read_text().replace(f'"{truth[0]["key"]}"', '"12\\u00003"', 1)
    (raw / "basic_edit.json").write_text(text)
    assert main(["convert-benchmark", "imgedit-bench", "--raw", str(raw), "--out", str(tmp_path / "out"),
                 "--no-progress"]) == 2
    assert "key '12\\x003' contains a NUL byte" in capsys.readouterr().err
