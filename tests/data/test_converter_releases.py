"""The converters on fixtures that carry the quirks of the real releases (each fixture cites its release in
``modeling_miescore/testing/raw_benchmarks/``): MMRB2's prompt origins shared by different source sets and its
multi-image responses, GenAI-Bench's two splits, AURORA ratings written on one line, IEQA's JSON Lines with an
out-of-scale MOS, EBench-18K's per-model copies of each source, EditReward-Bench ids without ``_``; and the export
of a converted benchmark as scoring input, where every row must carry its own sources."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.data.converters import get_converter
from modeling_miescore.data.dataset_edits import export_dataset_edits
from modeling_miescore.testing import raw_benchmarks as rb


def convert(name, raw, out, **options):
    return get_converter(name)(raw, out, progress=False, **options).build()


def load(out, config):
    import datasets

    return datasets.load_dataset(str(out), config, split="test")


def test_mmrb2_exported_rows_carry_their_own_sources(tmp_path):
    truth = rb.make_raw_mmrb2(tmp_path / "raw", n_pairs=6)
    convert("mmrb2", tmp_path / "raw", tmp_path / "ds")
    inputs, _ = export_dataset_edits(str(tmp_path / "ds"), tmp_path / "work", progress=False)
    records = [json.loads(line) for line in inputs.read_text().splitlines()]
    assert len(records) == 12
    for record in records:
        pair_id = record["id"][:-2]  # <pair id>_A / _B
        own = [(tmp_path / "raw" / rel).read_bytes() for rel in truth["sources"][pair_id]]
        assert [(inputs.parent / rel).read_bytes() for rel in record["sources"]] == own, record["id"]


def test_input_export_keeps_each_rows_sources_even_when_an_instance_mixes_them(tmp_path):
    """A dataset whose instance groups rows with different sources (what MMRB2's origin-as-group did) still
    exports each row with its own sources."""
    import datasets

    from modeling_miescore.data.input_export import export_mie_inputs
    from modeling_miescore.testing.raw_benchmarks.external_images import source_photo
    from modeling_miescore.testing.raw_benchmarks.photos import image_bytes

    images = [image_bytes(source_photo(k)) for k in range(4)]
    ds = datasets.Dataset.from_dict(
        {"id": ["e1", "e2", "e3"], "instance_id": ["same", "same", "same"], "instruction": ["x"] * 3,
         "source_images": [[{"bytes": images[0], "path": "a.jpg"}], [{"bytes": images[1], "path": "b.jpg"}],
                           [{"bytes": images[0], "path": "a.jpg"}]],
         "edited_image": [{"bytes": images[k], "path": f"e{k}.jpg"} for k in (2, 3, 2)]},
        features=datasets.Features({"id": datasets.Value("string"), "instance_id": datasets.Value("string"),
                                    "instruction": datasets.Value("string"),
                                    "source_images": datasets.List(datasets.Image(decode=False)),
                                    "edited_image": datasets.Image(decode=False)}))
    path = export_mie_inputs(ds, tmp_path / "cache", progress=False)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    got = [(path.parent / r["sources"][0]).read_bytes() for r in records]
    assert got == [images[0], images[1], images[0]]
    assert records[0]["sources"] == records[2]["sources"] != records[1]["sources"]  # shared where equal


def test_mmrb2_multi_image_response_is_refused_and_counted(tmp_path):
    truth = rb.make_raw_mmrb2(tmp_path / "raw", n_pairs=6, multi_image_responses=1)
    summary = convert("mmrb2", tmp_path / "raw", tmp_path / "ds")
    ds = load(tmp_path / "ds", "pairwise")
    assert len(ds) == 5 and truth["multi"][0] not in ds["id"]
    assert summary.warnings == [f"1 pair(s) refused: a response holds several images, and a pointwise scorer rates "
                                f"one ({truth['multi'][0]})"]
    assert "1 pair(s) refused" in (tmp_path / "ds" / "README.md").read_text()
    assert "warning: 1 pair(s) refused" in summary.describe()


def test_imagenhub_overall_averages_each_raters_geometric_mean(tmp_path):
    truth = rb.make_raw_imagenhub(tmp_path / "raw", n_samples=4)
    convert("imagenhub", tmp_path / "raw", tmp_path / "ds")
    ds = load(tmp_path / "ds", "pointwise")
    differs = 0
    for row in ds:
        sc, pq = truth["scores"][row["id"]]
        assert row["human_overall"] == pytest.approx(truth["overall"][row["id"]])
        differs += abs(row["human_overall"] - math.sqrt(sc * pq)) > 0.05
    assert differs >= len(ds) // 2  # the fixture's raters disagree, as the released ones often do


def test_genai_bench_defaults_to_the_919_vote_split_and_says_so(tmp_path):
    truth = rb.make_raw_genai_bench(tmp_path / "raw", n_votes=6, other_splits={"test": 9})
    convert("genai-bench", tmp_path / "raw", tmp_path / "default")
    ds = load(tmp_path / "default", "pairwise")
    assert ds["id"] == truth["ids"] and set(ds["subset"]) == {"test_v1"}
    assert "Part of the release converted: split test_v1" in (tmp_path / "default" / "README.md").read_text()
    convert("genai-bench", tmp_path / "raw", tmp_path / "test", split="test")
    assert len(load(tmp_path / "test", "pairwise")) == 9


def test_aurora_ids_are_the_records_own_identity(tmp_path):
    raw = tmp_path / "raw"
    rb.make_raw_aurora_bench(raw, n_pairs=6)
    file = raw / "valid_aurora_human_ratings_pairwise.json"
    convert("aurora-bench", raw, tmp_path / "indented")
    indented = load(tmp_path / "indented", "pairwise")
    records = json.loads(file.read_text())
    file.write_text(json.dumps(records))  # the same release on one line
    convert("aurora-bench", raw, tmp_path / "one-line")
    one_line = load(tmp_path / "one-line", "pairwise")
    assert one_line["id"] == indented["id"] and len(set(one_line["id"])) == 6
    assert all(i.startswith("aurora-") for i in one_line["id"])
    file.write_text(json.dumps(records + [records[1]]))  # an exact repeat: kept once, counted
    summary = convert("aurora-bench", raw, tmp_path / "repeat")
    assert len(load(tmp_path / "repeat", "pairwise")) == 6
    assert "1 record(s) repeat an earlier one" in summary.warnings[0]
    conflicting = dict(records[1], model1_dim1_score=9.0)
    file.write_text(json.dumps(records + [conflicting]))
    with pytest.raises(DatasetValidationError) as info:
        convert("aurora-bench", raw, tmp_path / "conflict")
    assert [str(p) for p in info.value.problems] == [
        "valid_aurora_human_ratings_pairwise.json:1: the same pair (prompt and images) as line 1 with other scores "
        "[9.0, 2.0] (there [1.0, 2.0])"]


def test_ieqa_refuses_a_mos_off_the_0_100_scale_and_an_unknown_dimension(tmp_path):
    raw = tmp_path / "raw"
    rb.make_raw_ieqa(raw, n_edits=3)
    path = raw / "ieqa.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["response"] = "The quality score is -500.00"
    lines[4]["query"] = lines[4]["query"].replace("from editing instruction alignment aspect", "from vibes aspect")
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(DatasetValidationError) as info:
        convert("ieqa", raw, tmp_path / "out")
    problems = [str(p) for p in info.value.problems]
    assert "ieqa.jsonl:1: score -500 is outside the 0-100 MOS scale of the query" in problems
    assert "ieqa.jsonl:5: query names no known dimension" in problems
    assert not (tmp_path / "out").exists()


def test_ebench_groups_the_per_model_copies_of_a_source(tmp_path):
    truth = rb.make_raw_ebench(tmp_path / "raw", n_sources=3, n_models=3)
    convert("ebench-18k", tmp_path / "raw", tmp_path / "ds")
    ds = load(tmp_path / "ds", "pointwise")
    by_group: dict[str, set] = {}
    for edit_id, group in zip(ds["id"], ds["group_id"]):
        by_group.setdefault(group, set()).add(truth["groups"][edit_id])
    assert len(by_group) == 3 and all(len(names) == 1 for names in by_group.values())
    assert sorted(map(len, [[i for i, g in zip(ds["id"], ds["group_id"]) if g == k] for k in by_group])) == [3, 3, 3]


def test_editreward_bench_groups_ids_without_underscore_by_their_first_10_characters(tmp_path):
    from modeling_miescore.data.converters.editreward_bench import group_of

    assert group_of("erb0000004AvsC") == "erb0000004" and group_of("g004_AvsC") == "g004"
    rb.make_raw_editreward_bench(tmp_path / "raw")
    convert("editreward-bench", tmp_path / "raw", tmp_path / "ds")
    points = load(tmp_path / "ds", "pointwise")
    sizes = {}
    for group in points["group_id"]:
        sizes[group] = sizes.get(group, 0) + 1
    # 2pair: three groups of 2 candidates; 3pair: one group of 3; 4pair: one group of 4 (not one group per row)
    assert sorted(sizes.values()) == [2, 2, 2, 3, 4]
    assert Path(tmp_path / "ds" / "README.md").is_file()


def test_imgedit_refuses_text_after_the_json_object(tmp_path):
    """A second object pasted after basic_edit.json's (json.load refuses it) is a problem with its line, not
    silently ignored."""
    rb.make_raw_imgedit_bench(tmp_path / "raw")
    path = tmp_path / "raw" / "basic_edit.json"
    lines = path.read_text().count("\n")
    path.write_text(path.read_text() + '{"9999": {"id": "x.jpg", "prompt": "p", "edit_type": "add"}}\n')
    with pytest.raises(DatasetValidationError) as err:
        convert("imgedit-bench", tmp_path / "raw", tmp_path / "out")
    [problem] = err.value.problems
    assert (problem.file, problem.line) == ("basic_edit.json", lines + 1)
    assert "extra data after the object" in problem.message
    assert not (tmp_path / "out").exists()


def test_an_embedded_image_outside_the_accepted_formats_is_refused(tmp_path):
    """Images stored in a Parquet / Arrow release pass the same format allowlist as image files (PNG, JPEG, WebP,
    TIFF, BMP, GIF): a PPM is refused with the row and the column, as a PPM file would be."""
    from PIL import Image

    from modeling_miescore.data.builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
    from modeling_miescore.data.converters.release_files import embedded_image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, format="PPM")
    problems = ProblemCollector(tmp_path)
    check = RecordCheck(problems, "data/test-00000-of-00001.parquet", 3, ImageChecker(tmp_path))
    assert embedded_image(check, {"bytes": buffer.getvalue(), "path": "x.ppm"}, "x", "source_image") is None
    [problem] = problems.problems
    assert (problem.file, problem.line) == ("data/test-00000-of-00001.parquet", 3)
    assert problem.message.startswith("source_image: unreadable image (") and "PNG, JPEG" in problem.message
