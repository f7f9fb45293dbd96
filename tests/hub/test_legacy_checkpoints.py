"""Checkpoints saved by earlier layouts of the Hub files still load and score the same, with their own code
(``trust_remote_code=True``) and through the installed package (``load_scorer`` / ``load_spatialreward``):

* ``0.1.0``: before the Hub files were named by their model (issue 26: ``parsing.py``, ``aggregation.py``,
  ``drawing.py``, ``relaxed_json.py`` -> ``spatialreward_*.py``, ``overall.py`` -> ``miescore_overall.py``);
  ``tests/fixtures/hub_files_0.1.0_f5fd4f9.tar.gz`` holds the root ``modeling_miescore/*.py`` files at commit
  f5fd4f9 (``git archive f5fd4f9 modeling_miescore/*.py`` without ``__init__.py``).
* ``flat``: the last layout with the Hub files at the package root, before ``modeling_miescore/hub/`` (and before
  ``errors.py``: ``MIEScoreInputError`` lived in ``image_io.py``); ``tests/fixtures/hub_files_flat_2f0e4de.tar.gz``
  holds the root ``modeling_miescore/*.py`` files at commit 2f0e4de, without ``__init__.py``. Its ``config.json``
  is kept below as data (:data:`FLAT_CONFIG`): what every checkpoint of that layout on the Hub holds.

The checkpoints here are *saved by that code*: it is imported as a package of its own, builds a tiny scorer and a
tiny SpatialReward judge, and ``save_pretrained`` copies the old file set into each folder.
"""

from __future__ import annotations

import importlib
import json
import sys
import tarfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
RELEASES = {"0.1.0": "hub_files_0.1.0_f5fd4f9.tar.gz", "flat": "hub_files_flat_2f0e4de.tar.gz"}
# The file names a release's checkpoints carry that today's do not
OLD_NAMES = {"0.1.0": {"MIEScore": {"overall.py"},
                       "SpatialReward": {"parsing.py", "aggregation.py", "drawing.py", "relaxed_json.py"}},
             "flat": {"MIEScore": set(), "SpatialReward": set()}}
# config.json's loading fields as the flat layout (main at 2f0e4de) wrote them: auto_map names "file.Class" of the
# checkpoint's own code files, which must keep their flat names in every checkpoint saved since.
PIPELINES = {"image-edit-scoring": {"impl": "pipeline_miescore.ImageEditScoringPipeline", "pt": ["AutoModel"],
                                    "type": "multimodal"}}
FLAT_CONFIG = {
    "MIEScore": {"auto_map": {"AutoConfig": "configuration_miescore.MIEScoreConfig",
                              "AutoModel": "modeling_miescore.MIEScoreModel"},
                 "model_type": "miescore", "architectures": ["MIEScoreModel"], "custom_pipelines": PIPELINES},
    "SpatialReward": {"auto_map": {"AutoConfig": "configuration_spatialreward.SpatialRewardConfig",
                                   "AutoModel": "modeling_spatialreward.SpatialRewardModel",
                                   "AutoModelForImageTextToText": "modeling_spatialreward.SpatialRewardModel"},
                      "model_type": "spatialreward", "architectures": ["SpatialRewardModel"],
                      "custom_pipelines": PIPELINES},
}


def loading_fields(path) -> dict:
    config = json.loads((Path(path) / "config.json").read_text())
    return {key: config.get(key) for key in ("auto_map", "model_type", "architectures", "custom_pipelines")}


@pytest.fixture(scope="module", params=sorted(RELEASES))
def legacy(request, tmp_path_factory):
    """``(release, {"modeling_miescore": module, "modeling_spatialreward": module})``: a release's Hub files
    imported as the package ``legacy_hub_<release>`` (removed again afterwards)."""
    release = request.param
    package_name = "legacy_hub_" + release.replace(".", "_")
    root = tmp_path_factory.mktemp("legacy")
    package = root / package_name
    package.mkdir()
    with tarfile.open(FIXTURES / RELEASES[release]) as archive:
        archive.extractall(package, filter="data")
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(root))
    try:
        yield release, {name: importlib.import_module(f"{package_name}.{name}")
                        for name in ("modeling_miescore", "modeling_spatialreward")}
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == package_name or m.startswith(package_name + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def legacy_checkpoints(legacy, tmp_path_factory):
    """``{"release": name, "MIEScore": (path, old model), "SpatialReward": (path, old model)}``, each saved by the
    old code (the folders are named by the release: transformers caches a checkpoint's code by folder name)."""
    import torch

    from modeling_miescore.testing.qwen_vocab import build_processor, build_qwen3vl
    from modeling_miescore.testing.tiny_spatialreward import TINY_DEFAULTS, sharpen

    release, legacy = legacy
    root = tmp_path_factory.mktemp("legacy-ckpt")
    processor = build_processor("tiny")
    backbone = build_qwen3vl(root / "qwen3vl", vocab="tiny", seed=0, processor=processor)
    torch.manual_seed(1)
    scorer = legacy["modeling_miescore"].MIEScoreModel.from_backbone(backbone, processor=processor,
                                                                     head_hidden_size=32)
    with torch.no_grad():  # a wide random head, so that the scores depend on the input
        for module in scorer.head.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 1.0 / module.in_features**0.5)
    scorer.save_pretrained(root / f"miescore-{release}")
    judge = legacy["modeling_spatialreward"].SpatialRewardModel.from_pretrained(
        backbone, **{**TINY_DEFAULTS, "max_new_tokens": 8})
    judge.processor = processor
    sharpen(judge, seed=0)
    judge.save_pretrained(root / f"spatialreward-{release}")
    return {"release": release, "MIEScore": (root / f"miescore-{release}", scorer.eval()),
            "SpatialReward": (root / f"spatialreward-{release}", judge.eval())}


def test_the_checkpoints_carry_the_old_file_names(legacy_checkpoints):
    release = legacy_checkpoints["release"]
    for kind in ("MIEScore", "SpatialReward"):
        names = {p.name for p in Path(legacy_checkpoints[kind][0]).glob("*.py")}
        assert OLD_NAMES[release][kind] <= names, (kind, sorted(names))
        assert "errors.py" not in names  # MIEScoreInputError was defined in image_io.py
        if release == "0.1.0":
            assert not any(n.startswith(("spatialreward_aggregation", "spatialreward_parsing", "miescore_overall"))
                           for n in names)
        else:
            assert loading_fields(legacy_checkpoints[kind][0]) == FLAT_CONFIG[kind]


def test_checkpoints_saved_now_keep_the_flat_layouts_config(tiny_miescore_path, tiny_spatialreward_path):
    """The Hub files moved into modeling_miescore/hub/; a checkpoint still ships them flat, named as before."""
    for kind, path in (("MIEScore", tiny_miescore_path), ("SpatialReward", tiny_spatialreward_path)):
        assert loading_fields(path) == FLAT_CONFIG[kind]
        names = {p.name for p in Path(path).glob("*.py")}
        assert {value.split(".")[0] + ".py" for value in FLAT_CONFIG[kind]["auto_map"].values()} <= names
        assert "errors.py" in names and not any(p.is_dir() for p in Path(path).iterdir())


def test_an_old_miescore_checkpoint_loads_and_scores_the_same(legacy_checkpoints, examples, tmp_path):
    from transformers import AutoModel

    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.data.example_edits import save_example_files

    path, old = legacy_checkpoints["MIEScore"]
    records = save_example_files(examples[:3], tmp_path)
    expected = old.score_batch(records, batch_size=2)
    own_code = AutoModel.from_pretrained(path, trust_remote_code=True)
    assert type(own_code).__module__.startswith("transformers_modules."), type(own_code).__module__
    package = load_scorer(str(path), device="cpu", dtype="float32")
    assert type(package).__module__ == "modeling_miescore.hub.modeling_miescore"
    for model in (own_code, package):
        got = model.score_batch(records, batch_size=2)
        for one, want in zip(got, expected):
            assert one.keys() == want.keys()
            for key in want:
                assert one[key] == pytest.approx(want[key], abs=1e-5), key
    assert expected[0] != expected[1]  # the scores depend on the input


def test_an_old_spatialreward_checkpoint_loads_and_judges_the_same(legacy_checkpoints, examples, tmp_path):
    from transformers import AutoModelForImageTextToText

    from modeling_miescore.scoring.loading import load_spatialreward
    from modeling_miescore.hub.spatialreward_tokens import strip_control_tokens
    from modeling_miescore.data.example_edits import save_example_files

    path, old = legacy_checkpoints["SpatialReward"]
    records = save_example_files(examples[:2], tmp_path)
    expected = [(r.raw_sc, r.raw_pq, r.reward, r.failed) for r in old.evaluate_edits(records, batch_size=2)]
    own_code = AutoModelForImageTextToText.from_pretrained(path, trust_remote_code=True)
    assert type(own_code).__module__.startswith("transformers_modules."), type(own_code).__module__
    package = load_spatialreward(str(path), device="cpu", dtype="float32")
    assert type(package).__module__ == "modeling_miescore.hub.modeling_spatialreward"
    # the package strips every chat-control token of its one rule (modeling_miescore.hub.control_tokens) from a
    # generation, the old code only the chat and vision tokens: the same judgement of the same generation
    restripped = [([strip_control_tokens(t) for t in sc], [strip_control_tokens(t) for t in pq], reward, failed)
                  for sc, pq, reward, failed in expected]
    for model, want in ((own_code, expected), (package, restripped)):
        got = [(r.raw_sc, r.raw_pq, r.reward, r.failed) for r in model.evaluate_edits(records, batch_size=2)]
        assert got == want
    assert expected[0][0] != expected[1][0]  # the generations depend on the images
