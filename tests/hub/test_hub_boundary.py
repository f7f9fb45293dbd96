"""The Hub boundary: ``modeling_miescore/hub/`` is exactly what a checkpoint ships, and it runs alone.

How transformers (``transformers.dynamic_module_utils``) treats a checkpoint's code:

* ``save_pretrained`` -> ``custom_object_save`` copies the file that defines the config / model class and every
  file reached through ``from .x import ...`` (``get_relative_import_files``: a line regex over the whole
  source, so imports inside function bodies count). ``from . import x``, ``from .x.y import`` and absolute
  imports of the package are not followed: a Hub file that used them would break in a checkpoint.
* ``from_pretrained(..., trust_remote_code=True)`` runs ``check_imports`` on each file, which imports every
  top-level package the file imports anywhere (``get_imports``: an AST walk, function bodies included; only
  ``try`` blocks and ``if is_x_available()`` blocks are skipped) and fails if one is missing.

So the static tests walk the same imports (``try`` blocks included, to be strict) and compare with the declared
file lists below; the last test loads both kinds of checkpoint in a fresh interpreter where the package and
the project's other dependencies are missing (``modeling_miescore.diagnostics.isolated_load``, which
``miescore doctor`` runs too).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from transformers.dynamic_module_utils import get_imports, get_relative_import_files, get_relative_imports

import modeling_miescore
import modeling_miescore.hub
from modeling_miescore.diagnostics.isolated_load import (IsolatedLoadJob, load_and_score_without_package,
                                                         run_without_package)

PACKAGE_ROOT = Path(modeling_miescore.__file__).parent
HUB = Path(modeling_miescore.hub.__file__).parent  # the Hub files, flat

# Besides the standard library, Hub files may import only these. tqdm and huggingface_hub (model cards) are hard
# dependencies of transformers (checked below), so every environment that loads a checkpoint has them.
ALLOWED_PACKAGES = {"torch", "transformers", "numpy", "PIL", "tqdm", "huggingface_hub"}

# The files save_pretrained copies into each kind of checkpoint (config + model file and all they import).
CHECKPOINT_FILES = {
    "MIEScore": {
        "configuration_miescore.py", "modeling_miescore.py", "miescore_overall.py", "miescore_score_heads.py",
        "skill_miescore.py", "lm_digit_scores.py", "backbone_families.py", "batched_scoring.py", "image_io.py",
        "errors.py", "prefix_reuse.py", "processing_miescore.py", "control_tokens.py", "pipeline_miescore.py",
        "model_card.py",
    },
    "SpatialReward": {
        "configuration_spatialreward.py", "modeling_spatialreward.py", "spatialreward_aggregation.py",
        "spatialreward_drawing.py", "spatialreward_judgement.py", "spatialreward_parsing.py",
        "spatialreward_relaxed_json.py", "spatialreward_tokens.py", "backbone_families.py", "batched_scoring.py",
        "image_io.py", "errors.py", "prefix_reuse.py", "processing_miescore.py", "control_tokens.py",
        "pipeline_miescore.py", "model_card.py",
    },
}
ENTRY_FILES = {
    "MIEScore": ("configuration_miescore.py", "modeling_miescore.py"),
    "SpatialReward": ("configuration_spatialreward.py", "modeling_spatialreward.py"),
}
# Modules of hub/ that are not copied into checkpoints: only its package marker.
HUB_NOT_IN_CHECKPOINTS = {"__init__.py"}


def _tree(name: str) -> ast.Module:
    return ast.parse((HUB / name).read_text(encoding="utf-8"), filename=name)


def relative_imports(name: str) -> set[str]:
    """Sibling modules a Hub file imports (``from .x import y``, anywhere in the file), as file names."""
    found = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and node.module and "." not in node.module, (
                f"{name}:{node.lineno}: only 'from .module import name' is followed by transformers' loader")
            found.add(f"{node.module}.py")
    return found


def absolute_imports(name: str) -> set[str]:
    """Top-level packages a Hub file imports anywhere (function bodies and try blocks included)."""
    found = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module.split(".")[0])
    return found


def checkpoint_files(kind: str) -> set[str]:
    """The entry files and everything they reach through relative imports, transitively."""
    files, todo = set(), list(ENTRY_FILES[kind])
    while todo:
        name = todo.pop()
        if name not in files:
            assert (HUB / name).is_file(), f"a Hub file imports {name}, which is not in modeling_miescore/hub/"
            files.add(name)
            todo += sorted(relative_imports(name))
    return files


ALL_HUB_FILES = sorted(set().union(*CHECKPOINT_FILES.values()))


@pytest.mark.parametrize("kind", sorted(CHECKPOINT_FILES))
def test_checkpoint_file_lists_are_the_declared_ones(kind):
    assert checkpoint_files(kind) == CHECKPOINT_FILES[kind]
    # ... and transformers' own walk finds the same files
    by_transformers = set(ENTRY_FILES[kind])
    for entry in ENTRY_FILES[kind]:
        by_transformers |= {Path(p).name for p in get_relative_import_files(HUB / entry)}
    assert by_transformers == CHECKPOINT_FILES[kind]


@pytest.mark.parametrize("name", ALL_HUB_FILES)
def test_hub_file_imports_only_allowed_packages_and_siblings(name):
    # transformers reads relative imports with a regex: it must see exactly what the AST sees
    assert {f"{m}.py" for m in get_relative_imports(HUB / name)} == relative_imports(name)
    allowed = ALLOWED_PACKAGES | set(sys.stdlib_module_names)
    outside = absolute_imports(name) - allowed
    assert not outside, f"{name} imports {sorted(outside)}; a Hub file may import only {sorted(ALLOWED_PACKAGES)}, "\
                        "the standard library and its siblings (from .x import y)"
    assert set(get_imports(HUB / name)) <= allowed  # what check_imports will import on load


def test_hub_is_exactly_what_a_checkpoint_ships():
    hub_modules = {p.name for p in HUB.iterdir() if p.suffix == ".py" or p.is_dir() and p.name != "__pycache__"}
    assert hub_modules - HUB_NOT_IN_CHECKPOINTS == set(ALL_HUB_FILES), (
        "modeling_miescore/hub/ holds exactly the files a checkpoint ships, flat; put other modules in another "
        "subpackage")
    assert {p.name for p in PACKAGE_ROOT.glob("*.py")} == {"__init__.py"}, (
        "the root of modeling_miescore/ holds only the lazy front door; Hub files go in hub/, others in a subpackage")


def test_tqdm_numpy_and_huggingface_hub_come_with_transformers():
    hard = {req.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower().replace("-", "_")
            for req in importlib.metadata.requires("transformers") if "extra ==" not in req}
    assert {"tqdm", "numpy", "huggingface_hub"} <= hard


def test_checkpoints_load_and_score_without_the_package(tiny_miescore, tiny_miescore_path, tiny_spatialreward_path,
                                                         examples, tmp_path):
    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.data.example_edits import save_example_files

    for kind, path in (("MIEScore", tiny_miescore_path), ("SpatialReward", tiny_spatialreward_path)):
        copied = {p.name for p in Path(path).glob("*.py")}
        assert copied == CHECKPOINT_FILES[kind], f"save_pretrained copied {sorted(copied)} for {kind}"
        assert not [p for p in Path(path).iterdir() if p.suffix in (".bin", ".pt", ".pth")]  # safetensors only
    records = save_example_files(examples[:3], tmp_path)  # 2 and 3 sources, different sizes
    expected_scores = [tiny_miescore.score(**r) for r in records]
    judge = SpatialRewardModel.from_pretrained(tiny_spatialreward_path)
    expected_texts = [[r.raw_sc, r.raw_pq] for r in judge.evaluate_edits(records[:2], batch_size=2)]

    out = load_and_score_without_package([
        IsolatedLoadJob(str(tiny_miescore_path), records, auto_classes=("AutoModel",), batch_size=1),
        IsolatedLoadJob(str(tiny_spatialreward_path), records[:2],
                        auto_classes=("AutoModelForImageTextToText", "AutoModel"), batch_size=2),
    ], timeout=300)
    mie, judge = out["results"]
    assert mie["classes"]["AutoModel"].startswith("transformers_modules."), mie["classes"]
    assert judge["config"]["model_type"] == "spatialreward" and judge["config"]["max_new_tokens"] == 8
    assert judge["classes"]["AutoModelForImageTextToText"].startswith("transformers_modules."), judge["classes"]
    assert judge["classes"]["AutoModel"].endswith(".SpatialRewardModel"), judge["classes"]
    texts = [[j["raw_sc"], j["raw_pq"]] for j in judge["judgements"]]
    assert out["loaded"] == []
    assert len(mie["scores"]) == len(expected_scores) == len(records)
    for got, want in zip(mie["scores"], expected_scores):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-6)
    assert texts == expected_texts
    assert len({text[0][0] for text in texts}) == 2  # the texts depend on the images (sharpened weights)


PIPELINE = """
from transformers import pipeline

records = values["records"]
scorer = pipeline("image-edit-scoring", model=values["miescore"], trust_remote_code=True)
judge = pipeline("image-edit-scoring", model=values["spatialreward"], trust_remote_code=True)
report({"classes": [type(p).__module__ + "." + type(p).__name__ for p in (scorer, judge)],
        "models": [type(p.model).__name__ for p in (scorer, judge)],
        "one": scorer(records[0]), "many": scorer(records, batch_size=2),
        "judged": judge(records[:2], batch_size=2), "judged_one": judge(records[0])})
"""


def test_scoring_pipeline_loads_from_the_checkpoints_without_the_package(
        tiny_miescore, tiny_miescore_path, tiny_spatialreward_path, examples, tmp_path):
    """pipeline("image-edit-scoring", model=CKPT, trust_remote_code=True): the pipeline class comes from the
    checkpoint (config.custom_pipelines), one dict gives one result, a list gives a list, equal to the models'
    own score / evaluate_edits in this process; SpatialReward gives rewards and parsed details, no raw text."""
    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.hub.pipeline_miescore import CUSTOM_PIPELINES
    from modeling_miescore.data.example_edits import save_example_files

    for path in (tiny_miescore_path, tiny_spatialreward_path):
        config = json.loads((Path(path) / "config.json").read_text())
        assert config["custom_pipelines"] == CUSTOM_PIPELINES and (Path(path) / "pipeline_miescore.py").is_file()
    records = save_example_files(examples[:3], tmp_path)
    expected_scores = tiny_miescore.score_batch(records, batch_size=2)
    expected_one = tiny_miescore.score(**records[0])
    judge = SpatialRewardModel.from_pretrained(tiny_spatialreward_path)
    judged = [r.to_dict() for r in judge.evaluate_edits(records[:2], batch_size=2)]
    judged_one = judge.evaluate_edit(**records[0]).to_dict()

    out = run_without_package(PIPELINE, {"miescore": str(tiny_miescore_path), "records": records,
                                         "spatialreward": str(tiny_spatialreward_path)}, timeout=300)
    assert out["loaded"] == []
    assert all(c.startswith("transformers_modules.") and c.endswith("pipeline_miescore.ImageEditScoringPipeline")
               for c in out["classes"]), out["classes"]
    assert out["models"] == ["MIEScoreModel", "SpatialRewardModel"]
    assert isinstance(out["one"], dict) and len(out["many"]) == len(records)
    for got, want in zip([out["one"], *out["many"]], [expected_one, *expected_scores]):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-6)
    assert isinstance(out["judged_one"], dict) and len(out["judged"]) == 2
    for got, want in zip([out["judged_one"], *out["judged"]], [judged_one, *judged]):
        assert "raw_sc" not in got and "raw_pq" not in got
        want = json.loads(json.dumps({k: v for k, v in want.items() if k not in ("raw_sc", "raw_pq")}))
        assert got == want
        assert {"reward", "failed", "s_if", "s_con", "s_nat", "s_art", "regions", "reasoning"} <= got.keys()


# MIEScore checkpoints on the other backbones of Table 5 (Qwen2.5-VL, InternVL), on a generic one (LLaVA) and
# without head (Qwen3-VL, score_head="lm_digits"): each saved, then loaded and scored in the blocked interpreter.
OTHER_BACKBONES = {"qwen2_5_vl": ("qwen2_5_vl", {}), "internvl": ("internvl", {}), "llava": ("llava", {}),
                   "qwen3_vl lm_digits": ("qwen3_vl", {"score_head": "lm_digits"})}

LOAD_OTHER_BACKBONES = """
from transformers import AutoModel

scores = {}
for name, path in values["paths"].items():
    model = AutoModel.from_pretrained(path, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    scores[name] = [model.score(**r) for r in values["records"]]
report({"scores": scores})
"""


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_other_backbone_checkpoints_load_and_score_without_the_package(tiny_checkpoints, examples, tmp_path):
    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.data.example_edits import save_example_files

    paths = {name: str(tiny_checkpoints("miescore", backbone, **kwargs))
             for name, (backbone, kwargs) in OTHER_BACKBONES.items()}
    for name, path in paths.items():
        copied = {p.name for p in Path(path).glob("*.py")}
        assert copied == CHECKPOINT_FILES["MIEScore"], f"save_pretrained copied {sorted(copied)} for {name}"
    records = save_example_files(examples[:2], tmp_path)  # two edits of different sources and sizes
    expected = {name: [load_scorer(path, device="cpu", dtype="float32").score(**r) for r in records]
                for name, path in paths.items()}
    out = run_without_package(LOAD_OTHER_BACKBONES, {"records": records, "paths": paths})
    assert out["loaded"] == []
    assert out["scores"].keys() == expected.keys()
    for name, want in expected.items():
        for got_one, want_one in zip(out["scores"][name], want):
            assert got_one.keys() == want_one.keys()
            for key in want_one:
                assert got_one[key] == pytest.approx(want_one[key], abs=1e-5), (name, key)
        assert want[0] != want[1], name  # the scores depend on the input
