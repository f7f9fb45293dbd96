"""The external-benchmark converters on fixtures written in each release's exact format (scikit-image photos):
``datasets.load_dataset`` loads the output, counts / labels / scores are the planted ones, and bad raw data gives
every problem with file:line (CLI exit status 2) while writing nothing."""

from __future__ import annotations

import json

import pytest

from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.data.converters import get_converter
from modeling_miescore.data.converters.converted_card import read_benchmark_metadata
from modeling_miescore.testing import raw_benchmarks as rb


def convert(name, raw, out, **options):
    get_converter(name)(raw, out, progress=False, **options).build()
    return out


def load(out, config):
    import datasets

    return datasets.load_dataset(str(out), config, split="test")


def labels(ds):
    return [ds.features["label"].int2str(v) for v in ds["label"]]


def record_lines(text: str, opener: str) -> list[int]:
    """1-based numbers of the lines that are exactly ``opener`` (where each record of an indented JSON starts)."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if line == opener]


def set_parquet_cell(path, column: str, row: int, value) -> None:
    """Rewrite one cell of a Parquet shard (0-based ``row``), keeping the schema and its metadata."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[row] = value
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, [values]), path)


def problems_of(name, raw, tmp_path, **options):
    out = tmp_path / "rejected"
    with pytest.raises(DatasetValidationError) as info:
        convert(name, raw, out, **options)
    assert not out.exists()  # nothing half-written
    return [str(p) for p in info.value.problems]


def test_the_card_records_the_spec(tmp_path):
    # (every registered converter and its declaration: tests/evaluation/test_benchmark_registry.py)
    raw = tmp_path / "raw"
    rb.make_raw_ieqa(raw.mkdir() or raw)
    block = read_benchmark_metadata(str(convert("ieqa", raw, tmp_path / "ieqa")))
    assert block["name"] == "ieqa" and block["dimensions"]["editing_alignment"] == "instruction_following"
    assert block["release_part"] == "file *.jsonl"
    card = (tmp_path / "ieqa" / "README.md").read_text()
    assert "EditHF's inference.py" in card and "Part of the release converted: file *.jsonl" in card
    assert card.rstrip().endswith("""@article{xu2026edithf1m,
  title   = {EditHF-1M: A Million-Scale Rich Human Preference Feedback for Image Editing},
  author  = {Xu, Zitong and Duan, Huiyu and Ji, Zhongpeng and Zhang, Xinyun and Liu, Yutao and Min, Xiongkuo and others},
  journal = {arXiv preprint arXiv:2603.14916},
  year    = {2026}
}
```""")  # the citation the spec declares (schema.bibtex), in BibTeX, ends the card


def test_genai_bench_votes_become_labels(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_genai_bench(raw, n_votes=8)
    ds = load(convert("genai-bench", raw, tmp_path / "out"), "pairwise")
    assert len(ds) == 8 and ds["id"] == truth["ids"]
    assert labels(ds) == [{"leftvote": "a", "rightvote": "b", "tievote": "tie", "bothbad_vote": "both_bad"}[v]
                          for v in truth["votes"]]
    assert ds[0]["edited_a_id"] == "test_v1-00001-left" and ds[0]["model_b"] == "InstructPix2Pix"
    assert len(ds[0]["source_images"]) == 1 and ds[0]["edited_a"].size == (48, 48)


def test_genai_bench_bad_vote_is_reported_with_file_and_row(tmp_path):
    raw = tmp_path / "raw"
    rb.make_raw_genai_bench(raw, n_votes=4)
    set_parquet_cell(raw / "image_edition" / "test_v1-00000-of-00001.parquet", "vote_type", 2, "maybe")
    problems = problems_of("genai-bench", raw, tmp_path)
    assert problems == ["image_edition/test_v1-00000-of-00001.parquet:3: vote_type 'maybe' is not one of leftvote, "
                        "rightvote, tievote, bothbad_vote"]


def test_aurora_bench_labels_follow_the_scores_and_bad_records_name_their_line(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_aurora_bench(raw, n_pairs=6)
    ds = load(convert("aurora-bench", raw, tmp_path / "out"), "pairwise")
    assert labels(ds) == truth["labels"] == ["a", "b", "tie", "a", "b", "tie"]
    assert ds[0]["edited_a_id"] == "images/0_aurora.jpg" and ds[0]["model_a"] == "AURORA"
    file = raw / "valid_aurora_human_ratings_pairwise.json"
    records = json.loads(file.read_text())
    records[1]["path2"] = "images/missing.jpg"
    del records[4]["model2_dim1_score"]
    file.write_text(json.dumps(records, indent=2))
    problems = problems_of("aurora-bench", raw, tmp_path)
    starts = record_lines(file.read_text(), "  {")
    lines = [starts[1], starts[4]]
    assert sorted(problems) == sorted([
        f"valid_aurora_human_ratings_pairwise.json:{lines[0]}: path2: image file not found: 'images/missing.jpg'",
        f"valid_aurora_human_ratings_pairwise.json:{lines[1]}: missing key(s) 'model2_dim1_score'"])


def test_editscore_bench_first_output_is_preferred_and_dimensions_are_mapped(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_editscore_bench(raw, n_pairs=6)
    ds = load(convert("editscore-bench", raw, tmp_path / "out"), "pairwise")
    assert labels(ds) == ["a"] * 6
    assert [[a, b] for a, b in zip(ds["edited_a_id"], ds["edited_b_id"])] == truth["keys"]
    mapping = {"prompt_following": "instruction_following", "consistency": "attribute_preservation",
               "overall": "overall"}
    assert ds["dimension"] == [mapping[d] for d in truth["dimensions"]] and ds["subset"] == truth["tasks"]
    (raw / "state.json").unlink()
    assert problems_of("editscore-bench", raw, tmp_path)[0].startswith("state.json: file not found")


def test_editreward_bench_pairs_and_candidates(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_editreward_bench(raw)
    out = convert("editreward-bench", raw, tmp_path / "out")
    pairs = load(out, "pairwise")
    assert dict(zip(pairs["id"], labels(pairs))) == truth["pairs"]
    assert sorted(set(pairs["subset"])) == ["2pair", "3pair", "4pair"]
    points = load(out, "pointwise")
    assert dict(zip(points["id"], points["human_overall"])) == truth["candidates"]
    assert points["human_visual_quality"] == [None] * len(points)


def test_editreward_bench_conflicting_candidate_scores_are_reported(tmp_path):
    raw = tmp_path / "raw"
    rb.make_raw_editreward_bench(raw)
    # row 2 is AvsC: candidate A had 8.0 in row 1 (AvsB)
    set_parquet_cell(raw / "3pair" / "train-00000-of-00001.parquet", "score_1", 1, 1.5)
    problems = problems_of("editreward-bench", raw, tmp_path)
    assert problems == ["3pair/train-00000-of-00001.parquet:2: candidate 3pair-erb0000004_A has score 1.5 here but "
                        "8.0 at "
                        "3pair/train-00000-of-00001.parquet:1"]


def test_imagenhub_ratings_are_averaged_over_raters(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_imagenhub(raw, n_samples=4)
    ds = load(convert("imagenhub", raw, tmp_path / "out"), "pointwise")
    assert len(ds) == 8
    for row in ds:
        sc, pq = truth["scores"][row["id"]]
        assert row["human_instruction_following"] == pytest.approx(sc)
        assert row["human_visual_quality"] == pytest.approx(pq)
        assert row["human_overall"] == pytest.approx(truth["overall"][row["id"]])
        assert row["instruction"].startswith("make photo")
    rater = raw / "eval" / "human_ratings" / "Text-Guided_IE" / "Text-Guided_IE_rater2.tsv"
    lines = rater.read_text().splitlines()
    lines[2] = lines[2].replace("[", "(", 1)
    rater.write_text("\n".join(lines) + "\n")
    problems = problems_of("imagenhub", raw, tmp_path)
    assert len(problems) == 1 and problems[0].startswith(
        "eval/human_ratings/Text-Guided_IE/Text-Guided_IE_rater2.tsv:3: MagicBrush: expected [SC, PQ]")


def test_ebench_joins_the_three_files_and_strips_the_authors_prefix(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_ebench(raw, n_sources=3, n_models=2)
    ds = load(convert("ebench-18k", raw, tmp_path / "out"), "pointwise")
    assert sorted(ds["id"]) == sorted(truth["scores"])
    for row in ds:
        expected = truth["scores"][row["id"]]
        assert (row["human_visual_quality"], row["human_instruction_following"],
                row["human_attribute_preservation"]) == (expected["test_v.json"], expected["test_e.json"],
                                                         expected["test_c.json"])
        assert row["instruction"].startswith("Add a hat") and row["editing_model"] in ("model00", "model01")
    lines = (raw / "test_e.json").read_text().splitlines()
    record = json.loads(lines[1])
    record["response"] = "I cannot rate this"
    lines[1] = json.dumps(record)
    (raw / "test_e.json").write_text("\n".join(lines) + "\n")
    problems = problems_of("ebench-18k", raw, tmp_path)
    assert problems[0] == "test_e.json:2: response 'I cannot rate this' has no 'score is <number>'"
    assert problems[1].endswith("has no score in test_e.json")


def test_ieqa_json_lines_join_the_three_dimensions(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_ieqa(raw, n_edits=5)
    ds = load(convert("ieqa", raw, tmp_path / "out"), "pointwise")
    assert ds["id"] == [r["id"] for r in truth["rows"]]
    assert ds["human_instruction_following"] == [r["editing_alignment"] for r in truth["rows"]]
    assert ds["human_visual_quality"] == [r["visual_quality"] for r in truth["rows"]]
    assert ds["editing_model"] == [r["editing_model"] for r in truth["rows"]]
    lines = (raw / "ieqa.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace("The quality score is 30.00", "The quality score is high")
    (raw / "ieqa.jsonl").write_text("\n".join(lines) + "\n")
    assert problems_of("ieqa", raw, tmp_path) == [
        "ieqa.jsonl:2: response 'The quality score is high' has no 'score is <number>'",
        "ieqa.jsonl:7: edit 'edited/editor-1/ieqa-1.jpg' has no score in a usable line asking for 'visual quality'"]


def test_mmrb2_single_and_multi_image_pairs(tmp_path):
    raw = tmp_path / "raw"
    truth = rb.make_raw_mmrb2(raw, n_pairs=6)
    ds = load(convert("mmrb2", raw, tmp_path / "out"), "pairwise")
    assert list(zip(ds["id"], labels(ds), ds["subset"])) == truth["pairs"]
    assert [len(s) for s in ds["source_images"]] == [len(truth["sources"][i]) for i in ds["id"]]
    # a group is one prompt (its own sources + instruction), not the prompt's origin: pairs 0/4 and 1/3 share
    # theirs, pairs 2 and 5 only share the origin "new_synthetic_edit"
    groups = ds["group_id"]
    assert groups[0] == groups[4] and groups[1] == groups[3] and len(set(groups)) == 4
    assert groups[2] != groups[5] and groups[2].startswith("new_synthetic_edit/")
    data = json.loads((raw / "edit.json").read_text())
    data["pairs"][3]["chosen"] = "tie"
    (raw / "edit.json").write_text(json.dumps(data, indent=2))
    line = record_lines((raw / "edit.json").read_text(), "    {")[3]
    problems = problems_of("mmrb2", raw, tmp_path)
    assert len(problems) == 1 and problems[0].startswith("edit.json:")
    assert problems[0].endswith("chosen (or human_preference) must be 'A' or 'B', got 'tie'")
    assert int(problems[0].split(":")[1]) == line


def test_cli_converts_and_exits_2_on_bad_raw_data(tmp_path, capsys):
    from modeling_miescore.cli.main import main

    raw = tmp_path / "raw"
    rb.make_raw_ieqa(raw, n_edits=4)
    assert main(["convert-benchmark", "ieqa", "--raw", str(raw), "--out", str(tmp_path / "ok"),
                 "--no-progress"]) == 0
    assert "IEQA (EditHF-1M subset): 4 pointwise rows" in capsys.readouterr().out
    (raw / "edited" / "editor-0" / "ieqa-2.jpg").write_bytes(b"not a jpeg")
    assert main(["convert-benchmark", "ieqa", "--raw", str(raw), "--out", str(tmp_path / "bad"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "ieqa.jsonl:3: target image: unreadable image 'edited/editor-0/ieqa-2.jpg'" in err
    assert not (tmp_path / "bad").exists()
