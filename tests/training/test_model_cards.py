"""The model cards ``save_pretrained`` writes (modeling_miescore/hub/model_card.py) as a Hugging Face user meets them:
Hub metadata without local paths, the score scale, both papers' BibTeX, and usage code that runs as written and
gives the model's own results. (The trainers' cards: tests/training/test_training.py, tests/training/test_spatialreward_training.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from card_blocks import python_blocks, run_python_blocks
from export_cards import check_export_cards
from modeling_miescore.hub.model_card import REPO_PLACEHOLDER, ModelCardInfo, render_model_card

REPO = Path(__file__).resolve().parents[2]


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


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_the_code_of_both_save_pretrained_cards_runs_and_gives_the_models_results(
        tiny_miescore, tiny_miescore_path, tiny_spatialreward_path, examples, tmp_path):
    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.data.example_edits import save_example_files

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


def test_card_ids_are_hub_repo_ids_never_local_paths(tmp_path):
    from modeling_miescore.training.card_inputs import ModelCardArguments, card_repo_ids

    assert card_repo_ids(ModelCardArguments(), "Qwen/Qwen3-VL-8B-Instruct", str(tmp_path)) == (
        "Qwen/Qwen3-VL-8B-Instruct", [])  # a local dataset folder is not named
    assert card_repo_ids(ModelCardArguments(base_model_id="org/base", dataset_id="org/data"), str(tmp_path),
                         str(tmp_path)) == ("org/base", ["org/data"])
    with pytest.raises(ValueError, match="--base_model_id .* is not a Hub repo id"):
        card_repo_ids(ModelCardArguments(base_model_id=str(tmp_path / "a" / "b")), None, None)


def test_save_pretrained_keeps_a_readme_and_names_a_hub_base(tiny_miescore_path, tmp_path):
    from modeling_miescore.hub.modeling_miescore import MIEScoreModel

    model = MIEScoreModel.from_pretrained(tiny_miescore_path)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "README.md").write_text("# A card with more information\n")
    model.save_pretrained(kept)
    assert (kept / "README.md").read_text() == "# A card with more information\n"  # never replaced

    model.config.backbone_config._name_or_path = "Qwen/Qwen3-VL-8B-Instruct"  # as after from_backbone(repo id)
    model.save_pretrained(tmp_path / "new")
    assert card_meta(tmp_path / "new")["base_model"] == "Qwen/Qwen3-VL-8B-Instruct"


def test_trainer_card_has_metadata_and_hyperparameters():
    info = ModelCardInfo(base_model="Qwen/Qwen3-VL-8B-Instruct", datasets=["org/mie-bench"],
                         metrics={"eval_srcc_vq": 0.81, "eval_plcc_vq": 0.8, "eval_srcc_if": 0.7, "eval_plcc_if": 0.71,
                                  "eval_srcc_ap": 0.6, "eval_plcc_ap": 0.62, "eval_mean_corr": 0.707},
                         hyperparameters={"learning_rate": 3e-5, "lora": {"r": 64, "alpha": 32}},
                         dataset_split_sizes={"train": 10, "validation": 3})
    import yaml

    text = render_model_card("miescore", info)
    meta = yaml.safe_load(text.split("---")[1])
    assert meta["library_name"] == "transformers" and meta["license"] == "apache-2.0"
    assert meta["base_model"] == "Qwen/Qwen3-VL-8B-Instruct" and meta["datasets"] == ["org/mie-bench"]
    assert meta["pipeline_tag"] and "miescore" in meta["tags"]
    values = {m["name"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert values["SRCC (visual quality)"] == 0.81 and len(values) == 6  # 3 dimensions x SRCC/PLCC
    # the metric types of the model-index are the ids of the `metrics` list (https://hf.co/metrics)
    types = {m["type"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert types == set(meta["metrics"]) == {"spearmanr", "pearsonr"}
    assert meta["model-index"][0]["results"][0]["dataset"]["type"] == "org/mie-bench"
    assert "| learning_rate | 3e-05 |" in text and '"r": 64' in text
    adapter = yaml.safe_load(render_model_card("miescore", info, adapter=True).split("---")[1])
    assert adapter["library_name"] == "peft" and "base_model:adapter:Qwen/Qwen3-VL-8B-Instruct" in adapter["tags"]
    # local folders never reach the metadata; an unknown dataset id leaves the model-index out (it needs one)
    local = yaml.safe_load(render_model_card("miescore", ModelCardInfo(
        base_model=str(REPO), datasets=[str(REPO)], metrics=info.metrics)).split("---")[1])
    assert "base_model" not in local and "datasets" not in local and "model-index" not in local
    assert local["metrics"] == ["pearsonr", "spearmanr"]
    bibtex = text.split("```bibtex\n")[1].split("```")[0]
    assert "@misc{miescore," in bibtex and "title        = {MIEScore: Human-Aligned Evaluation" in bibtex
    assert "eprint        = {2602.07458}" in bibtex and "Long, Yancheng" in bibtex and "Yang, Shuo}" in bibtex


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_adapter_on_a_plain_qwen3vl_base_card_scores_like_the_merged_export(tiny_qwen3vl_path, examples,
                                                                             tmp_path):
    """The paper's case: the scorer is built on a plain Qwen3-VL (from_backbone); the adapter card's recipe builds
    it the same way, with the run's overrides, from the code shipped beside the adapter."""
    pytest.importorskip("peft")
    from modeling_miescore.data.example_edits import save_example_files
    from modeling_miescore.training.miescore_export import export_model
    from modeling_miescore.training.miescore_model import apply_lora, load_base_model, make_lora_config

    overrides = dict(head_hidden_size=16, skill="Rate the edit.", min_pixels=16384, max_pixels=16384)
    model, processor = load_base_model(str(tiny_qwen3vl_path), **overrides)
    peft_model = apply_lora(model, make_lora_config(r=4, alpha=8))
    with torch.no_grad():  # stands in for training: moves every trainable weight (LoRA and head)
        generator = torch.Generator().manual_seed(0)
        for _, parameter in sorted(peft_model.named_parameters()):
            if parameter.requires_grad:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    peft_model.save_pretrained(tmp_path / "final")
    processor.save_pretrained(tmp_path / "final")
    exported = export_model(str(tiny_qwen3vl_path), tmp_path / "final", tmp_path / "export",
                            base_config_overrides=overrides)
    merged, adapter = Path(exported["merged"]), Path(exported["adapter"])
    assert ".from_backbone(BASE, **overrides)" in (adapter / "README.md").read_text()
    (tmp_path / "imgs").mkdir()
    records = save_example_files(examples[:2], tmp_path / "imgs")
    local, _ = load_base_model(str(merged))
    expected = [local.eval().score(**r) for r in records]
    check_export_cards(merged, adapter, tiny_qwen3vl_path, records, expected, tmp_path / "cards",
                        base_is_scorer=False)


def test_a_spatialreward_adapter_card_without_a_hub_base_names_the_folders_of_its_run(tmp_path):
    """SFT/GRPO recipe cards: without --base_model_id the adapter card's code loads the run's own folders (and says
    to replace them before pushing); a pushed card names Hub ids or placeholders, never a local path."""
    import dataclasses
    from types import SimpleNamespace

    from modeling_miescore.hub.model_card import BASE_PLACEHOLDER
    from modeling_miescore.training.card_inputs import ModelCardArguments
    from modeling_miescore.training.spatialreward_recipe import run_card, write_run_cards

    base, out = tmp_path / "base", tmp_path / "run"
    base.mkdir(), out.mkdir()
    (out / "adapter_config.json").write_text("{}")
    args = SimpleNamespace(world_size=1, **dict.fromkeys(
        ("num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay",
         "per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "seed"), 1))
    trainer = SimpleNamespace(args=args, state=SimpleNamespace(global_step=2))
    card = run_card("sft", trainer, ModelCardArguments(), SimpleNamespace(model_name_or_path=str(base)), "rows",
                    SimpleNamespace(reasons={}, kept=3, total=3), {})
    write_run_cards(out, card, {}, copy_code=False)
    code = "\n".join(python_blocks((out / "README.md").read_text()))
    replace = "  # a folder on the machine that trained: replace it by the Hub repo id before pushing"
    assert f"ADAPTER = {json.dumps(str(out.resolve()))}{replace}\n" in code
    assert f"BASE = {json.dumps(str(base.resolve()))}{replace}\n" in code
    assert "base_model" not in card_meta(out)  # the metadata never holds a local path
    write_run_cards(out, dataclasses.replace(card, repo_id="someone/sr-lora"), {}, copy_code=False)  # pushed
    text = (out / "README.md").read_text()
    assert 'ADAPTER = "someone/sr-lora"\n' in text and f'BASE = "{BASE_PLACEHOLDER}"\n' in text
    assert str(tmp_path) not in text
