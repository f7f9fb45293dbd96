"""Other backbones than Qwen3-VL (MIEScore paper, Table 5: Qwen2.5-VL and InternVL3.5 rows; LLaVA stands for any
other image-text-to-text model): construction, scoring, pixel budgets, prefix reuse per family, and the head-free
``lm_digits`` scorer (Table 5 rows 1 and 4)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from edit_groups import instance_edits, max_score_diff
from modeling_miescore.hub.backbone_families import GENERIC, INTERNVL, QWEN_VL, family_of
from modeling_miescore.hub.configuration_miescore import MIEScoreConfig
from modeling_miescore.hub.modeling_miescore import MIEScoreModel
from modeling_miescore.hub.processing_miescore import as_edit_sample, image_size_kwargs, load_samples, prepare_inputs
from modeling_miescore.scoring.loading import load_scorer
from modeling_miescore.testing.tiny_models import sharpen_language_model

REUSE_FAMILIES = ["qwen2_5_vl", "internvl"]  # Qwen3-VL: tests/hub/test_prefix_reuse.py
ALL_FAMILIES = [*REUSE_FAMILIES, "llava"]


def _scorer(tiny_checkpoints, backbone, **config_kwargs):
    return load_scorer(str(tiny_checkpoints("miescore", backbone, **config_kwargs)), device="cpu", dtype="float32")


# --------------------------------------------------------------------------------------------------------
# families and what max_pixels means for each
# --------------------------------------------------------------------------------------------------------
def test_family_and_image_size_arguments_follow_the_backbone():
    from transformers import InternVLConfig

    from modeling_miescore.hub.configuration_spatialreward import SpatialRewardConfig

    qwen25 = MIEScoreConfig(backbone_config={"model_type": "qwen2_5_vl"}, max_pixels=200_000, min_pixels=50_000)
    assert family_of(qwen25) is QWEN_VL and type(qwen25.backbone_config).__name__ == "Qwen2_5_VLConfig"
    assert image_size_kwargs(qwen25) == {"size": {"shortest_edge": 50_000, "longest_edge": 200_000}}
    # InternVL3.5: 448-px tiles; the paper's budget of 1,048,576 pixels allows 5 of them (+ the thumbnail)
    internvl = MIEScoreConfig(backbone_config=InternVLConfig().to_dict())
    assert family_of(internvl) is INTERNVL and internvl.max_pixels == 1_048_576
    assert image_size_kwargs(internvl) == {"crop_to_patches": True, "min_patches": 1, "max_patches": 5}
    internvl.max_pixels, internvl.min_pixels = 3 * 448 * 448 - 1, 448 * 448
    assert image_size_kwargs(internvl)["max_patches"] == 2
    llava = MIEScoreConfig(backbone_config={"model_type": "llava"})
    assert family_of(llava) is GENERIC and image_size_kwargs(llava) == {}
    assert family_of(SpatialRewardConfig()) is QWEN_VL  # SpatialReward's config is a Qwen3-VL one


@pytest.mark.parametrize("backbone", REUSE_FAMILIES)
def test_counted_lengths_equal_the_processors(tiny_checkpoints, examples, backbone):
    """The per-family token counts (batch sorting, training lengths, budget fitting) are exact."""
    from modeling_miescore.training.miescore_data import count_tokens

    model = _scorer(tiny_checkpoints, backbone)
    processor = model.get_processor()
    rng = np.random.default_rng(0)
    odd = Image.fromarray(rng.integers(0, 255, (700, 900, 3), dtype=np.uint8))  # above the smaller budget
    samples = load_samples([as_edit_sample(s) for s in [*instance_edits(examples[:2], extra_sizes=()),
                                                         (examples[2]["sources"], odd, "Blend.")]])
    budgets = (model.config.max_pixels, model.config.max_pixels // 3)
    for budget in budgets:
        model.config.max_pixels = budget
        for sample in samples:
            expected = int(prepare_inputs(processor, [sample], model.config)["input_ids"].shape[1])
            assert count_tokens(sample, processor, model.config) == expected
    assert budgets[0] != budgets[1]


# --------------------------------------------------------------------------------------------------------
# construction and scoring
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backbone", ALL_FAMILIES)
def test_from_backbone_keeps_the_weights_of_each_family(tiny_checkpoints, backbone):
    from transformers import AutoModelForImageTextToText

    path = tiny_checkpoints("backbone", backbone)
    plain = AutoModelForImageTextToText.from_pretrained(path)
    scorer = MIEScoreModel.from_backbone(path, head_hidden_size=16)
    assert scorer.config.backbone_config.model_type == backbone
    assert type(scorer.backbone) is type(plain.model)
    for name, tensor in plain.model.state_dict().items():
        torch.testing.assert_close(scorer.backbone.state_dict()[name], tensor)
    assert set(plain.model._no_split_modules) <= set(scorer._no_split_modules)  # device_map="auto" splits right
    from_instance = MIEScoreModel.from_backbone(plain, processor=scorer.processor, head_hidden_size=16)
    assert from_instance.backbone is plain.model


@pytest.mark.parametrize("backbone", ALL_FAMILIES)
def test_score_batch_equals_per_sample_for_each_family(tiny_checkpoints, examples, backbone):
    model = _scorer(tiny_checkpoints, backbone)
    rng = np.random.default_rng(0)
    samples = [{"sources": e["sources"], "edited": e["edited"], "instruction": e["instruction"]} for e in examples]
    samples.append({"sources": [Image.fromarray(rng.integers(0, 255, (200, 90, 3), dtype=np.uint8))],
                    "edited": examples[0]["edited"], "instruction": "Blend them."})
    single = [model.score(**s) for s in samples]
    for padding_side in ("left", "right"):
        model.config.padding_side = padding_side
        batched = model.score_batch(samples, batch_size=4, reuse_prefix=False)
        assert max_score_diff(single, batched) < 1e-4
    model.config.padding_side = "left"
    assert len({round(r["overall"], 6) for r in single}) > 1


# --------------------------------------------------------------------------------------------------------
# prefix reuse: exact for Qwen2.5-VL and InternVL, reported as unavailable elsewhere
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backbone", REUSE_FAMILIES)
def test_prefix_reuse_equals_the_full_forward(tiny_checkpoints, examples, backbone):
    from modeling_miescore.hub.modeling_miescore import last_token_indices
    from modeling_miescore.hub.prefix_reuse import suffix_hidden_states

    model = sharpen_language_model(_scorer(tiny_checkpoints, backbone))
    assert model.prefix_reuse_available
    samples = instance_edits(examples, sources_from=2)  # 3 sources, 7 edits of 5 sizes
    full = model.score_batch(samples, batch_size=3, reuse_prefix=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "prefix reuse unavailable" warning for these families
        reused = model.score_batch(samples, batch_size=3, reuse_prefix=True)
    # 0-100 scale: the wide random head magnifies float rounding (InternVL: ~8e-5); the hidden states below are
    # held to 1e-4 themselves
    assert max_score_diff(full, reused) < 5e-4
    assert max(r["overall"] for r in full) - min(r["overall"] for r in full) > 0.5  # the check is sensitive

    # the hidden states themselves, float32: suffix on the prefix cache == last token of the full forward
    loaded = load_samples([as_edit_sample(s) for s in samples])
    processor = model.get_processor()
    suffix = suffix_hidden_states(model.backbone, processor, loaded, model.config, batch_size=4)
    with torch.no_grad():
        batch = prepare_inputs(processor, loaded, model.config)
        hidden = model.backbone(**batch).last_hidden_state
        whole = hidden[torch.arange(len(loaded)), last_token_indices(batch["attention_mask"])]
    error = float((suffix - whole).abs().max())
    print(f"{backbone}: max |suffix - full| hidden-state error {error:.2e} (scale {float(whole.abs().max()):.2f})")
    assert error < 1e-4


@pytest.mark.parametrize("backbone", REUSE_FAMILIES)
def test_wrong_suffix_positions_would_be_caught(tiny_checkpoints, examples, backbone, monkeypatch):
    from modeling_miescore.hub import prefix_reuse

    model = sharpen_language_model(_scorer(tiny_checkpoints, backbone))
    samples = instance_edits(examples)[:4]
    full = model.score_batch(samples, batch_size=4, reuse_prefix=False)
    original = prefix_reuse._full_positions

    def shifted(*args):
        positions = original(*args).clone()
        positions[:, -20:] += 3  # what suffix positions restarted after the prefix's last one would look like
        return positions

    monkeypatch.setattr(prefix_reuse, "_full_positions", shifted)
    assert max_score_diff(full, model.score_batch(samples, batch_size=4, reuse_prefix=True)) > 0.1


def test_score_batch_says_when_prefix_reuse_is_unavailable(tiny_checkpoints, examples):
    samples = instance_edits(examples)[:3]
    generic = _scorer(tiny_checkpoints, "llava")
    assert not generic.prefix_reuse_available and "'llava'" in generic.prefix_reuse_unavailable_reason()
    with pytest.warns(UserWarning, match="reuse_prefix: prefix reuse is implemented .* not for model_type 'llava'"):
        reused = generic.score_batch(samples, batch_size=2, reuse_prefix=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for nothing: nothing to say
        plain = generic.score_batch(samples, batch_size=2, reuse_prefix=False)
    assert max_score_diff(reused, plain) < 1e-5
    internvl = _scorer(tiny_checkpoints, "internvl")
    internvl.config.image_order = "edited_first"
    assert internvl.prefix_reuse_unavailable_reason() == \
        "the edited image is not last in the prompt (image_order='edited_first')"
    internvl.config.image_order = "sources_first"
    assert internvl.prefix_reuse_unavailable_reason() is None


# --------------------------------------------------------------------------------------------------------
# no score head: the language model's own digit probabilities (Table 5 rows 1 and 4)
# --------------------------------------------------------------------------------------------------------
def test_lm_digit_scores_are_the_language_models_expected_digits(tiny_checkpoints, examples):
    """Scores equal what the generative model itself predicts, decoded step by step with its lm_head."""
    from transformers import AutoModelForImageTextToText

    model = _scorer(tiny_checkpoints, "qwen3_vl", score_head="lm_digits")
    generative = AutoModelForImageTextToText.from_pretrained(tiny_checkpoints("backbone", "qwen3_vl")).eval()
    config, processor = model.config, model.get_processor()
    assert config.prompt_template.endswith('"attribute_preservation": <score>}')  # the format it is asked for
    sample = load_samples([as_edit_sample({"sources": examples[2]["sources"], "edited": examples[2]["edited"],
                                           "instruction": examples[2]["instruction"]})])[0]
    batch = dict(prepare_inputs(processor, [sample], config))
    expected, answer = [], []
    digits = torch.tensor(config.lm_digit_token_ids)
    with torch.no_grad():
        for prefix in config.lm_answer_token_ids:
            answer += prefix
            ids = torch.cat([batch["input_ids"], torch.tensor([answer])], dim=1)
            extra = torch.zeros((1, len(answer)), dtype=torch.long)
            logits = generative(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=batch["pixel_values"],
                                image_grid_thw=batch["image_grid_thw"],
                                mm_token_type_ids=torch.cat([batch["mm_token_type_ids"], extra], dim=1)).logits[0, -1]
            probs = torch.softmax(logits[digits], dim=-1)
            expected.append(float((probs * torch.arange(len(digits))).sum()) / (len(digits) - 1) * 100)
            answer.append(int(digits[probs.argmax()]))
    scores = model.score(sample.sources, sample.edited, sample.instruction)
    got = [scores[name] for name in config.score_names]
    assert got == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("backbone", ["qwen3_vl", "internvl"])
def test_teacher_forced_reading_equals_greedy_reading_on_the_greedy_digits(tiny_checkpoints, examples, backbone):
    """Training (one pass, digits written in) and scoring (one pass per digit) read the same positions."""
    model = _scorer(tiny_checkpoints, backbone, score_head="lm_digits")
    loaded = load_samples([as_edit_sample(s) for s in instance_edits(examples)[:3]])
    batch = dict(prepare_inputs(model.get_processor(), loaded, model.config))
    with torch.no_grad():
        greedy = model(**batch)
        digits = greedy.logits.argmax(-1)
        model.train()
        try:
            forced = model(**batch, answer_digits=digits)
            other = model(**batch, answer_digits=(digits + 1) % (model.config.lm_score_max + 1))
        finally:
            model.eval()
    torch.testing.assert_close(forced.logits, greedy.logits, atol=1e-4, rtol=1e-4)
    assert greedy.logits.shape == (3, 3, model.config.lm_score_max + 1)
    torch.testing.assert_close(forced.logits[:, 0], other.logits[:, 0])  # the first read sees no digit
    assert not torch.allclose(forced.logits[:, 2], other.logits[:, 2], atol=1e-3)  # later ones see the digits


def test_lm_digits_needs_the_output_layer_and_left_padding(tiny_checkpoints):
    from transformers import AutoModel

    path = tiny_checkpoints("backbone", "internvl")
    base = AutoModel.from_pretrained(path)  # the base model has no lm_head
    with pytest.raises(ValueError, match="output layer"):
        MIEScoreModel.from_backbone(base, score_head="lm_digits")
    model = _scorer(tiny_checkpoints, "internvl", score_head="lm_digits")
    kept = model.config.to_dict()
    with pytest.raises(ValueError, match="padding_side must be 'left'"):
        MIEScoreConfig(**{**kept, "padding_side": "right"})
    with pytest.raises(ValueError, match="from_backbone"):
        MIEScoreConfig(**{**kept, "lm_digit_token_ids": None})
    with pytest.raises(ValueError, match="score_head must be one of"):
        MIEScoreConfig(**{**kept, "score_head": "logits"})


# --------------------------------------------------------------------------------------------------------
# the CLI scores with any of these checkpoints
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backbone, config_kwargs", [("internvl", {}), ("qwen2_5_vl", {"score_head": "lm_digits"})])
def test_cli_scores_with_other_backbones(tiny_checkpoints, examples, tmp_path, capsys, backbone, config_kwargs):
    import json

    from modeling_miescore.cli.main import main
    from modeling_miescore.data.example_edits import save_example_files

    path = tiny_checkpoints("miescore", backbone, **config_kwargs)
    record = save_example_files(examples[2:3], tmp_path)[0]
    argv = ["score", "--model", path, "--device", "cpu", "--dtype", "float32", "--edited", record["edited"],
            "--instruction", record["instruction"], "--json"]
    for source in record["sources"]:
        argv += ["--source", source]
    assert main([str(a) for a in argv]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    expected = load_scorer(str(path), device="cpu", dtype="float32").score(**record)
    assert printed == pytest.approx(expected, abs=1e-5)
