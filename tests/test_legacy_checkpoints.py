"""Checkpoints saved before the Hub files were named by their model (issue 26: ``parsing.py``, ``aggregation.py``,
``drawing.py``, ``relaxed_json.py`` -> ``spatialreward_*.py``, ``overall.py`` -> ``miescore_overall.py``) still load
and score the same, with their own code (``trust_remote_code=True``) and through the installed package
(``load_scorer`` / ``load_spatialreward``).

``tests/fixtures/hub_files_0.1.0_f5fd4f9.tar.gz`` holds the root ``modeling_miescore/*.py`` files at commit f5fd4f9
(version 0.1.0, the last before the rename; ``git archive f5fd4f9 modeling_miescore/*.py`` without ``__init__.py``).
The checkpoints here are *saved by that code*: it is imported as a package of its own, builds a tiny scorer and a
tiny SpatialReward judge, and ``save_pretrained`` copies the old file set into each folder.
"""

from __future__ import annotations

import importlib
import sys
import tarfile
from pathlib import Path

import pytest

ARCHIVE = Path(__file__).parent / "fixtures" / "hub_files_0.1.0_f5fd4f9.tar.gz"
LEGACY_PACKAGE = "legacy_hub_0_1_0"
OLD_NAMES = {"MIEScore": {"overall.py"}, "SpatialReward": {"parsing.py", "aggregation.py", "drawing.py",
                                                           "relaxed_json.py"}}


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    """The pre-rename Hub files imported as the package ``legacy_hub_0_1_0`` (removed again afterwards)."""
    root = tmp_path_factory.mktemp("legacy")
    package = root / LEGACY_PACKAGE
    package.mkdir()
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(package, filter="data")
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(root))
    try:
        yield {name: importlib.import_module(f"{LEGACY_PACKAGE}.{name}")
               for name in ("modeling_miescore", "modeling_spatialreward")}
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == LEGACY_PACKAGE or m.startswith(LEGACY_PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def legacy_checkpoints(legacy, tmp_path_factory):
    """``{"MIEScore": (path, old model), "SpatialReward": (path, old model)}``, each saved by the old code."""
    import torch

    from modeling_miescore.testing.qwen_vocab import build_processor, build_qwen3vl
    from modeling_miescore.testing.tiny_spatialreward import TINY_DEFAULTS, sharpen

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
    scorer.save_pretrained(root / "miescore")
    judge = legacy["modeling_spatialreward"].SpatialRewardModel.from_pretrained(
        backbone, **{**TINY_DEFAULTS, "max_new_tokens": 8})
    judge.processor = processor
    sharpen(judge, seed=0)
    judge.save_pretrained(root / "spatialreward")
    return {"MIEScore": (root / "miescore", scorer.eval()), "SpatialReward": (root / "spatialreward", judge.eval())}


def test_the_checkpoints_carry_the_old_file_names(legacy_checkpoints):
    for kind, (path, _) in legacy_checkpoints.items():
        names = {p.name for p in Path(path).glob("*.py")}
        assert OLD_NAMES[kind] <= names, (kind, sorted(names))
        assert not any(n.startswith(("spatialreward_aggregation", "spatialreward_parsing", "miescore_overall"))
                       for n in names)


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
    assert type(package).__module__ == "modeling_miescore.modeling_miescore"
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
    from modeling_miescore.spatialreward_tokens import strip_control_tokens
    from modeling_miescore.data.example_edits import save_example_files

    path, old = legacy_checkpoints["SpatialReward"]
    records = save_example_files(examples[:2], tmp_path)
    expected = [(r.raw_sc, r.raw_pq, r.reward, r.failed) for r in old.evaluate_edits(records, batch_size=2)]
    own_code = AutoModelForImageTextToText.from_pretrained(path, trust_remote_code=True)
    assert type(own_code).__module__.startswith("transformers_modules."), type(own_code).__module__
    package = load_spatialreward(str(path), device="cpu", dtype="float32")
    assert type(package).__module__ == "modeling_miescore.modeling_spatialreward"
    # the package strips every chat-control token of its one rule (modeling_miescore.control_tokens) from a
    # generation, the old code only the chat and vision tokens: the same judgement of the same generation
    restripped = [([strip_control_tokens(t) for t in sc], [strip_control_tokens(t) for t in pq], reward, failed)
                  for sc, pq, reward, failed in expected]
    for model, want in ((own_code, expected), (package, restripped)):
        got = [(r.raw_sc, r.raw_pq, r.reward, r.failed) for r in model.evaluate_edits(records, batch_size=2)]
        assert got == want
    assert expected[0][0] != expected[1][0]  # the generations depend on the images
