"""Every edited image of a dataset as a score-batch input (MIE-Bench, converted benchmarks with pointwise and
pairwise configs, MER-Bench), as `miescore judge --dataset` and `miescore spatialreward-data --input DIR` read
them; built from the raw fixtures with the real builders and converters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modeling_miescore.data.dataset_edits import export_dataset_edits
from modeling_miescore.data.spatialreward_pipeline.samples import read_edit_records
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.testing import raw_benchmarks as rb


def _lines(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:  # every image the line names exists beside the file
        assert all((path.parent / p).is_file() for p in [*record["sources"], record["edited"]])
    return records


def test_converted_benchmark_with_pointwise_and_pairwise_configs(tmp_path):
    from modeling_miescore.data.converters import get_converter
    from modeling_miescore.evaluation.converted_benchmarks import edit_ids, load_benchmark

    rb.make_raw_editreward_bench(tmp_path / "raw")
    get_converter("editreward-bench")(tmp_path / "raw", tmp_path / "ds", progress=False).build()
    inputs, categories = export_dataset_edits(str(tmp_path / "ds"), tmp_path / "work", progress=False)
    records = _lines(inputs)
    data = load_benchmark(str(tmp_path / "ds"))
    needed = {i for config, frame in data.frames.items() for i in edit_ids(frame, config)}
    assert sorted(r["id"] for r in records) == sorted(needed)  # each edited image once, every config
    assert len(needed) < sum(len(edit_ids(f, c)) for c, f in data.frames.items())  # some are in several rows
    assert all(len(r["sources"]) == 1 and r["instruction"].startswith("edit group") for r in records)
    assert categories == {}


def test_mer_bench_candidates_and_categories(tmp_path):
    from modeling_miescore.data.builders.mer_bench import build_mer_bench

    rb.make_raw_mer_bench(tmp_path / "raw", n_samples=8, seed=0, image_size=32)
    build_mer_bench(tmp_path / "raw", tmp_path / "ds", groups_per_type=4, progress=False)
    import datasets

    every, categories = export_dataset_edits(str(tmp_path / "ds"), tmp_path / "all", progress=False)
    candidates = {c for split in ("2pair", "3pair", "4pair")
                  for ids in datasets.load_dataset(str(tmp_path / "ds"), split=split)["candidate_ids"] for c in ids}
    assert sorted(r["id"] for r in _lines(every)) == sorted(candidates)
    assert set(categories) == candidates and set(categories.values()) <= {"general", "human_basic", "human_fine"}
    records, problems = read_edit_records(str(tmp_path / "ds"), "2pair", tmp_path / "two", progress=False)
    two = {c for ids in datasets.load_dataset(str(tmp_path / "ds"), split="2pair")["candidate_ids"] for c in ids}
    assert not problems and {r.id for r in records} == two
    assert all(r.category == categories[r.id] and Path(r.edited).is_absolute() for r in records)


def test_mie_bench_split_and_errors(tmp_path):
    from modeling_miescore.data.builders.mie_bench import build_mie_bench

    rb.make_raw_mie_bench(tmp_path / "raw", n_instances=4, n_models=2, seed=2, image_size=32)
    build_mie_bench(tmp_path / "raw", tmp_path / "ds", progress=False, split_method="hash")
    import datasets

    train = datasets.load_dataset(str(tmp_path / "ds"), split="train")
    inputs, _ = export_dataset_edits(str(tmp_path / "ds"), tmp_path / "work", split="train", progress=False)
    records = _lines(inputs)
    assert [r["id"] for r in records] == [str(i) for i in train["id"]]
    assert [len(r["sources"]) for r in records] == [len(s) for s in train["source_images"]]
    with pytest.raises(MIEScoreInputError, match="no split 'nope'"):
        export_dataset_edits(str(tmp_path / "ds"), tmp_path / "w2", split="nope", progress=False)
