"""The model cards ``save_pretrained`` writes (modeling_miescore/model_card.py) as a Hugging Face user meets them:
Hub metadata without local paths, the score scale, both papers' BibTeX, and usage code that runs as written and
gives the model's own results. (The trainers' cards: tests/test_training.py, tests/test_spatialreward_training.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from card_blocks import python_blocks, run_python_blocks
from modeling_miescore.model_card import REPO_PLACEHOLDER


def card_meta(folder: Path) -> dict:
    return yaml.safe_load((folder / "README.md").read_text().split("---\n")[1])


def _probe(expression: str) -> str:
    """A python block appended to a card: ``expression`` (names the card's code defined), as one JSON line."""
    return f"\n```python\nimport json\nprint('PROBE', json.dumps({expression}))\n```\n"


@pytest.mark.parametrize("kind", ["miescore", "spatialreward"])
def test_save_pretrained_writes_a_card_with_hub_metadata(kind, tiny_miescore_path, tiny_spatialreward_path):
    folder = Path(tiny_miescore_path if kind == "miescore" else tiny_spatialreward_path)
    meta, text = card_meta(folder), (folder / "README.md").read_text()
    assert (meta["library_name"], meta["pipeline_tag"], meta["license"]) == (
        "transformers", "image-text-to-text", "apache-2.0")
    assert kind in meta["tags"] and "custom_code" in meta["tags"]
    assert "base_model" not in meta and "datasets" not in meta  # built from local folders: no local path in YAML
    assert ("0-100 MOS scale" if kind == "miescore" else "in [0, 1]") in text  # the score scale
    assert "does not record how these weights were trained" in text  # and says what it cannot know
    bibtex = text.split("```bibtex\n")[1].split("```")[0]
    assert "@misc{miescore," in bibtex and "@misc{long2026spatialreward," in bibtex and "2602.07458" in bibtex
    blocks = "\n".join(python_blocks(text))
    assert REPO_PLACEHOLDER[kind] in blocks and 'pipeline("image-edit-scoring"' in blocks


def test_the_code_of_both_save_pretrained_cards_runs_and_gives_the_models_results(
        tiny_miescore, tiny_miescore_path, tiny_spatialreward_path, examples, tmp_path):
    from modeling_miescore.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.testing import save_example_files

    (tmp_path / "examples").mkdir()
    record = save_example_files(examples[:1], tmp_path / "examples")[0]
    for name, src in zip(("source_1.png", "source_2.png", "edited.png"), [*record["sources"][:2], record["edited"]]):
        shutil.copy(src, tmp_path / name)  # the example inputs the cards' code names
    example = {"sources": ["source_1.png", "source_2.png"], "edited": "edited.png",
               "instruction": "Put the cat from the second image on the sofa in the first image"}
    expected_scores = tiny_miescore.score(**{**example, "sources": [str(tmp_path / s) for s in example["sources"]],
                                             "edited": str(tmp_path / "edited.png")})
    judge = SpatialRewardModel.from_pretrained(tiny_spatialreward_path)
    expected_result = judge.evaluate_edit([str(tmp_path / s) for s in example["sources"]],
                                          str(tmp_path / "edited.png"), example["instruction"]).to_dict()

    cards = {
        "miescore": ((Path(tiny_miescore_path) / "README.md").read_text() + _probe("scores"),
                     {REPO_PLACEHOLDER["miescore"]: str(tiny_miescore_path)}),
        "spatialreward": ((Path(tiny_spatialreward_path) / "README.md").read_text() + _probe("result.to_dict()"),
                          {REPO_PLACEHOLDER["spatialreward"]: str(tiny_spatialreward_path)}),
    }
    proc = run_python_blocks(cards, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores, result = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
                      if line.startswith("PROBE ")]
    assert scores.keys() == expected_scores.keys()
    for key, value in expected_scores.items():
        assert scores[key] == pytest.approx(value, abs=1e-5)
    assert result == json.loads(json.dumps(expected_result))


def test_save_pretrained_keeps_a_readme_and_names_a_hub_base(tiny_miescore_path, tmp_path):
    from modeling_miescore.modeling_miescore import MIEScoreModel

    model = MIEScoreModel.from_pretrained(tiny_miescore_path)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "README.md").write_text("# A card with more information\n")
    model.save_pretrained(kept)
    assert (kept / "README.md").read_text() == "# A card with more information\n"  # never replaced

    model.config.backbone_config._name_or_path = "Qwen/Qwen3-VL-8B-Instruct"  # as after from_backbone(repo id)
    model.save_pretrained(tmp_path / "new")
    assert card_meta(tmp_path / "new")["base_model"] == "Qwen/Qwen3-VL-8B-Instruct"
