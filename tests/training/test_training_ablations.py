"""The ablation of the MIEScore paper's Table 5 with trainers/train_miescore.py: other backbones (LoRA on the
language model of each family, exact lengths and over-long rows) and the training-strategy switches, each in a
2-step run on the tiny CPU config (docs/backbones.md, "Table 5, row by row", lists the row each reproduces)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("datasets")
pytest.importorskip("trl")

from modeling_miescore.training.miescore_data import MIEScoreCollator, count_tokens, prepare_dataset, row_to_sample  # noqa: E402,E501
from modeling_miescore.training.miescore_model import (LORA_PROJECTIONS, apply_lora, load_base_model,  # noqa: E402
                                                        make_lora_config)
from training_runs import SHORT_SKILL, build_dataset, parse, tiny_run_args, train_miescore  # noqa: E402


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("mie"), n_instances=6)


# --------------------------------------------------------------------------------------------------------
# other backbones
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backbone", ["qwen2_5_vl", "internvl", "llava"])
def test_lora_lands_on_the_language_model_only_for_each_family(tiny_checkpoints, backbone):
    model, _ = load_base_model(str(tiny_checkpoints("backbone", backbone)), head_hidden_size=16)
    assert model.config.backbone_config.model_type == backbone
    peft_model = apply_lora(model, make_lora_config())  # paper: r=64, alpha=32, dropout 0, LM projections
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    lora = [n for n in trainable if "lora_" in n]
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in lora} == set(LORA_PROJECTIONS)
    assert all(".backbone.language_model.layers." in n for n in lora)
    # the vision towers have q/k/v and gate/up/down projections too (InternViT, Qwen2.5-VL's MLP): untouched
    vision = [n for n, _ in model.named_modules() if "lora_" not in n and n.endswith(("q_proj", "gate_proj", "fc1"))
              and "language_model" not in n]
    assert backbone == "llava" or vision  # the regex had something to avoid
    head = [n for n in trainable if ".head." in n]
    assert head and set(trainable) == set(lora) | set(head)


def test_internvl_rows_are_counted_exactly_and_shrunk_in_whole_tiles(tiny_checkpoints, small_dataset):
    from datasets import load_dataset

    model, processor = load_base_model(str(tiny_checkpoints("backbone", "internvl")), skill=SHORT_SKILL)
    train = load_dataset(str(small_dataset))["train"].select(range(6))
    full, report = prepare_dataset(train, processor, model.config, max_length=None)
    for row, n in zip(train, full["length"]):
        sample = row_to_sample(row).load()
        assert n == count_tokens(sample, processor, model.config)
    limit = int(max(full["length"])) - 1  # the longest rows need fewer tiles
    shrunk, report = prepare_dataset(train, processor, model.config, max_length=limit)
    assert report["shrunk"] > 0 and report["dropped"] == 0 and len(shrunk) == len(train)
    batch = MIEScoreCollator(processor, model.config)([shrunk[i] for i in range(len(shrunk))])
    lengths = batch["attention_mask"].sum(1).tolist()
    for row, n, budget, length in zip(train, full["length"], shrunk["max_pixels"], lengths):
        # shrunk rows get fewer tiles and fit; the others keep their length
        assert length == (count_tokens(row_to_sample(row).load(), processor, model.config, budget) if budget else n)
        assert length <= limit or not budget
    # every tile keeps its 4 tokens: nothing is cut inside an image
    image_tokens = int((batch["input_ids"] == model.config.backbone_config.image_token_id).sum())
    assert image_tokens == 4 * batch["pixel_values"].shape[0]
    with torch.no_grad():
        assert model(**{k: v for k, v in batch.items() if k != "labels"}).scores.shape == (len(shrunk), 3)


# --------------------------------------------------------------------------------------------------------
# Table 5, one 2-step run per row (training strategy on Qwen3-VL; rows 6 and 8: other backbones)
# --------------------------------------------------------------------------------------------------------
def _run(small_dataset, model, out: Path, **overrides) -> dict:
    args = dict(max_steps=2, learning_rate=0.01, max_train_samples=4)
    args.update(overrides)
    return train_miescore.main(*parse(tiny_run_args(small_dataset, model, out, **args)))


def _tensors(folder) -> dict:
    from safetensors.torch import load_file

    return load_file(Path(folder) / "model.safetensors")


def _changed(before: dict, after: dict) -> set:
    return {k for k in before if not torch.equal(before[k], after[k])}


def _card_values(merged) -> str:
    return (Path(merged) / "README.md").read_text()


def test_row1_without_score_head(tiny_qwen3vl_path, small_dataset, tmp_path):
    """Score Head off, LoRA and SFT on: scores from the LM's digit probabilities, LoRA-tuned."""
    result = _run(small_dataset, tiny_qwen3vl_path, tmp_path / "run", score_head="lm_digits")
    merged = result["exported"]["merged"]
    config = json.loads((Path(merged) / "config.json").read_text())
    assert config["score_head"] == "lm_digits" and config["backbone_config"]["model_type"] == "qwen3_vl"
    weights = _tensors(merged)
    assert set(weights) - {k for k in weights if k.startswith("backbone.")} == {"head.digit_logits.weight"}
    from transformers import AutoModelForImageTextToText

    plain = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl_path)
    torch.testing.assert_close(weights["head.digit_logits.weight"],
                               plain.lm_head.weight[config["lm_digit_token_ids"]].detach())  # the LM's own rows
    changed = {k for k, v in plain.model.state_dict().items() if not torch.equal(v, weights[f"backbone.{k}"])}
    # LoRA on the language model (merged), and the tiny tower that tiny_cpu.yaml trains in full
    assert any(k.startswith("language_model.") for k in changed)
    assert all(k.startswith(("language_model.", "visual.")) for k in changed)
    assert "| score_head | `lm_digits` |" in _card_values(merged)


def test_row2_without_lora_trains_the_head_on_a_frozen_backbone(tiny_miescore_path, small_dataset, tmp_path):
    result = _run(small_dataset, tiny_miescore_path, tmp_path / "run", backbone_tuning="frozen")
    assert result["exported"]["adapter"] is None  # nothing but the head changed: a full checkpoint, no adapter
    changed = _changed(_tensors(tiny_miescore_path), _tensors(result["exported"]["merged"]))
    assert changed and all(k.startswith("head.") for k in changed)
    assert "| lora | `frozen backbone (head only)` |" in _card_values(result["exported"]["merged"])


def test_row4_skill_optimisation_only_is_the_zero_shot_base(tiny_qwen3vl_path, small_dataset, tmp_path):
    """No head, no LoRA, no SFT: the base VLM reads its digits with the optimised skill; evaluated, not trained."""
    skill_file = tmp_path / "skill.txt"
    skill_file.write_text("Optimised rubric: judge each dimension on 0-5.\n", encoding="utf-8")
    result = _run(small_dataset, tiny_qwen3vl_path, tmp_path / "run", score_head="lm_digits", sft="false",
                  skill_file=skill_file, eval_split="validation", max_eval_samples=4)
    assert {"eval_srcc_vq", "eval_plcc_ap", "eval_mean_corr"} <= set(result["metrics"])
    merged = result["exported"]["merged"]
    config = json.loads((Path(merged) / "config.json").read_text())
    assert config["skill"] == skill_file.read_text() and config["score_head"] == "lm_digits"
    from transformers import AutoModelForImageTextToText

    plain = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl_path).model.state_dict()
    weights = _tensors(merged)
    assert all(torch.equal(v, weights[f"backbone.{k}"]) for k, v in plain.items())  # untouched
    assert "| global_steps | 0 |" in _card_values(merged) and "| sft | False |" in _card_values(merged)


def test_row5_full_recipe_takes_the_optimised_skill_from_a_file(tiny_miescore_path, small_dataset, tmp_path):
    skill_file = tmp_path / "skill.txt"
    skill_file.write_text("Optimised rubric.\r\nLine two.\n", encoding="utf-8")
    # tiny_cpu.yaml (and _run) set a short skill: the file takes precedence
    result = _run(small_dataset, tiny_miescore_path, tmp_path / "run", skill_file=skill_file)
    config = json.loads((Path(result["exported"]["merged"]) / "config.json").read_text())
    assert config["skill"] == "Optimised rubric.\nLine two.\n"  # read as the set-skill command reads it
    assert result["exported"]["adapter"] is not None  # LoRA + head
    from modeling_miescore.hub.errors import MIEScoreInputError

    with pytest.raises(MIEScoreInputError, match="does not exist"):
        _run(small_dataset, tiny_miescore_path, tmp_path / "missing", skill_file=tmp_path / "nope.txt")


@pytest.mark.parametrize("backbone", ["qwen2_5_vl", "internvl"])
def test_rows6_and_8_other_backbones_train_and_export(tiny_checkpoints, small_dataset, tmp_path, backbone):
    start = tiny_checkpoints("backbone", backbone)
    result = _run(small_dataset, start, tmp_path / "run", modules_to_save="head")
    merged = result["exported"]["merged"]
    config = json.loads((Path(merged) / "config.json").read_text())
    assert config["backbone_config"]["model_type"] == backbone and config["auto_map"]
    adapter = json.loads((Path(result["exported"]["adapter"]) / "adapter_config.json").read_text())
    assert adapter["target_modules"] == r".*backbone\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|" \
                                        r"up_proj|down_proj)"
    from modeling_miescore.scoring.loading import load_scorer

    scorer = load_scorer(merged, device="cpu", dtype="float32")
    assert type(scorer.backbone).__name__ in ("Qwen2_5_VLModel", "InternVLModel")
    assert 0 <= scorer.score(**_first_edit(small_dataset))["overall"] <= 100


def _first_edit(dataset_dir) -> dict:
    from datasets import load_dataset

    row = load_dataset(str(dataset_dir))["train"][0]
    return {"sources": row["source_images"], "edited": row["edited_image"], "instruction": row["instruction"]}


def test_paper_config_is_row_3_and_each_row_is_one_switch(tmp_path):
    from training_runs import PAPER_YAML, config_args

    def parsed(**switches):
        script, model, _, _ = parse(config_args(PAPER_YAML, dataset="x", bf16="false", **switches))
        return script.sft, model.score_head, model.backbone_tuning, model.skill_file, model.model_name_or_path

    qwen3 = "Qwen/Qwen3-VL-8B-Instruct"
    skill = str(tmp_path / "skill.txt")
    assert parsed() == (True, "regression", "lora", None, qwen3)  # row 3
    assert parsed(score_head="lm_digits") == (True, "lm_digits", "lora", None, qwen3)  # row 1
    assert parsed(backbone_tuning="frozen") == (True, "regression", "frozen", None, qwen3)  # row 2
    assert parsed(score_head="lm_digits", sft="false", skill_file=skill) == \
        (False, "lm_digits", "lora", skill, qwen3)  # row 4 (nothing is tuned without SFT)
    assert parsed(skill_file=skill) == (True, "regression", "lora", skill, qwen3)  # row 5
    internvl = "OpenGVLab/InternVL3_5-8B-HF"
    assert parsed(skill_file=skill, model_name_or_path=internvl)[-1] == internvl  # row 8
