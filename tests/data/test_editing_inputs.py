"""Editing requests from JSONL, MIE-Bench, MER-Bench and a converted editing benchmark, and their bad inputs."""

from __future__ import annotations

import json

import pytest

from modeling_miescore.data.editing_inputs import read_editing_inputs
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.hub.processing_miescore import MAX_INSTRUCTION_CHARS
from modeling_miescore.testing import raw_benchmarks as rb


def test_jsonl_requests_and_their_source_ids(editing_requests):
    requests = read_editing_inputs(str(editing_requests))
    assert [r.id for r in requests] == ["cat-red", "coffee-cat", "rocket-red", "astronaut-rocket"]
    assert [len(r.sources) for r in requests] == [1, 2, 1, 2]
    # the same photo file content -> the same source id (the cat of request 1 is the cat of request 2)
    assert requests[0].source_ids[0] == requests[1].source_ids[1] != requests[1].source_ids[0]
    images = requests[1].load_sources()
    assert [i.mode for i in images] == ["RGB", "RGB"] and images[0].size == (64, 64)
    assert len(read_editing_inputs(str(editing_requests), limit=2)) == 2


def _write(path, lines):
    path.write_text("\n".join(json.dumps(x) if isinstance(x, dict) else x for x in lines) + "\n")
    return str(path)


def test_bad_jsonl_requests_are_all_reported(tmp_path, editing_requests):
    good = json.loads(editing_requests.read_text().splitlines()[0])
    photo = str(editing_requests.parent / good["sources"][0])
    (tmp_path / "broken.png").write_bytes(b"not an image at all")
    path = _write(tmp_path / "bad.jsonl", [
        {"id": "a", "sources": [photo], "instruction": "fine"},
        {"id": "b", "sources": ["missing.png"], "instruction": "x"},
        {"id": "c", "sources": [str(tmp_path / "broken.png")], "instruction": "x"},
        {"id": "d", "sources": [photo], "instruction": "x" * (MAX_INSTRUCTION_CHARS + 1)},
        {"id": "a", "sources": [photo], "instruction": "again"},
        {"id": "e", "sources": [], "instruction": "x"},
        "{not json",
    ])
    with pytest.raises(MIEScoreInputError) as info:
        read_editing_inputs(path)
    message = str(info.value)
    assert message.startswith(f"6 bad editing request(s) in {path}")
    for expected in ["bad.jsonl:2: source 1 'missing.png' does not exist", "bad.jsonl:3:", "broken.png",
                     f"bad.jsonl:4: the request has an instruction of {MAX_INSTRUCTION_CHARS + 1:,} characters",
                     "bad.jsonl:5: duplicate id 'a' (first at", "bad.jsonl:6: 'sources' must be a non-empty list",
                     "bad.jsonl:7: invalid JSON"]:
        assert expected in message
    with pytest.raises(MIEScoreInputError, match="a split applies to datasets only"):
        read_editing_inputs(str(editing_requests), split="train")


def test_mie_bench_train_split_one_request_per_instance(tmp_path):
    import datasets

    from modeling_miescore.data.builders.mie_bench import build_mie_bench

    rb.make_raw_mie_bench(tmp_path / "raw", n_instances=4, n_models=2, seed=2, image_size=32)
    build_mie_bench(tmp_path / "raw", tmp_path / "ds", progress=False, split_method="hash")
    train = datasets.load_dataset(str(tmp_path / "ds"), split="train")
    requests = read_editing_inputs(str(tmp_path / "ds"))
    assert sorted(r.id for r in requests) == sorted(set(train["instance_id"]))  # 2 edits per instance -> once
    first = train[0]
    request = next(r for r in requests if r.id == first["instance_id"])
    assert request.instruction == first["instruction"] and len(request.sources) == len(first["source_images"])
    assert request.source_ids == tuple(f"{request.id}:{k}" for k in range(len(request.sources)))
    assert request.load_sources()[0].size == first["source_images"][0].size


def test_mer_bench_every_sample_once(tmp_path):
    import datasets

    from modeling_miescore.data.builders.mer_bench import build_mer_bench

    rb.make_raw_mer_bench(tmp_path / "raw", n_samples=8, seed=0, image_size=32)
    build_mer_bench(tmp_path / "raw", tmp_path / "ds", groups_per_type=4, progress=False)
    samples = {s for split in ("2pair", "3pair", "4pair")
               for s in datasets.load_dataset(str(tmp_path / "ds"), split=split)["sample_id"]}
    requests = read_editing_inputs(str(tmp_path / "ds"))
    assert sorted(r.id for r in requests) == sorted(samples) and all(len(r.sources) == 1 for r in requests)
    two = read_editing_inputs(str(tmp_path / "ds"), split="2pair")
    assert {r.id for r in two} == set(datasets.load_dataset(str(tmp_path / "ds"), split="2pair")["sample_id"])


def _editing_dataset(folder, rows):
    """A converted editing benchmark as the editor-bench converters write it: config `editing`, split `test`."""
    import datasets
    import yaml

    features = datasets.Features({"id": datasets.Value("string"), "source_images": datasets.List(datasets.Image()),
                                  "instruction": datasets.Value("string"), "category": datasets.Value("string"),
                                  "language": datasets.Value("string")})
    (folder / "data" / "editing").mkdir(parents=True)
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(folder / "data/editing/test-00000.parquet"))
    card = {"configs": [{"config_name": "editing", "data_files": [{"split": "test",
                                                                   "path": "data/editing/test-*.parquet"}]}],
            "miescore_benchmark": {"name": "gedit-bench", "kinds": ["editing"]}}
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n\n# test\n")
    return str(folder)


def test_converted_editing_benchmark(tmp_path, editing_requests):
    from PIL import Image

    photo = Image.open(next(editing_requests.parent.glob("*.png"))).convert("RGB")
    folder = _editing_dataset(tmp_path / "gedit", {
        "id": ["k1", "k2"], "source_images": [[photo], [photo, photo]], "instruction": ["make it red", "swap"],
        "category": ["color_alter", "subject-replace"], "language": ["en", "en"]})
    requests = read_editing_inputs(folder)
    assert [r.id for r in requests] == ["k1", "k2"] and [len(r.sources) for r in requests] == [1, 2]
    assert requests[0].extra == {"category": "color_alter", "language": "en"}
    assert requests[1].load_sources()[1].size == photo.size
    bad = _editing_dataset(tmp_path / "bad", {"id": ["k1"], "source_images": [[]], "instruction": ["x"],
                                              "category": [""], "language": ["en"]})
    with pytest.raises(MIEScoreInputError, match=r"row 0 \(id k1\): no source images"):
        read_editing_inputs(bad)


def test_not_an_editing_dataset(tmp_path):
    from modeling_miescore.data.converters import get_converter

    rb.make_raw_editreward_bench(tmp_path / "raw")
    get_converter("editreward-bench")(tmp_path / "raw", tmp_path / "ds", progress=False).build()
    with pytest.raises(MIEScoreInputError, match="without an 'editing' config.*ratings of edits"):
        read_editing_inputs(str(tmp_path / "ds"))
    with pytest.raises(MIEScoreInputError, match="not a folder"):
        read_editing_inputs(str(tmp_path / "nowhere"))
