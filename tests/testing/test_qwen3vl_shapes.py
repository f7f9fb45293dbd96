"""Qwen3-VL at the released widths with one layer on each side (``testing.qwen3vl_shapes``, used by
benchmarks/bench_realistic.py): the layers have the released shapes, the deepstack taps fit the shorter tower,
the special-token ids come from the tokenizer, and a checkpoint built by the helper loads and scores."""

import pytest
import torch

from modeling_miescore.testing.qwen3vl_shapes import (
    QWEN3_VL_2B,
    QWEN3_VL_8B,
    build_shaped_miescore,
    scaled_deepstack_indexes,
    shaped_qwen3vl_config,
)
from modeling_miescore.testing.tiny_models import build_tiny_processor


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_processor().tokenizer


@pytest.mark.parametrize("shape, released", [("8b", QWEN3_VL_8B), ("2b", QWEN3_VL_2B)])
def test_one_layer_each_side_with_the_released_layer_shapes(tokenizer, shape, released):
    from transformers import Qwen3VLModel

    config = shaped_qwen3vl_config(tokenizer, shape, vocab_size=151936)
    with torch.device("meta"):  # shapes only, no memory
        backbone = Qwen3VLModel(config)
    text, vision = released["text"], released["vision"]
    assert len(backbone.language_model.layers) == 1 and len(backbone.visual.blocks) == 1
    layer = backbone.language_model.layers[0]
    hidden = text["hidden_size"]
    assert layer.self_attn.q_proj.weight.shape == (text["num_attention_heads"] * 128, hidden)
    assert layer.self_attn.k_proj.weight.shape == (8 * 128, hidden)
    assert layer.mlp.gate_proj.weight.shape == (text["intermediate_size"], hidden)
    assert backbone.language_model.embed_tokens.weight.shape == (151936, hidden)
    block = backbone.visual.blocks[0]
    assert block.mlp.linear_fc1.weight.shape == (vision["intermediate_size"], vision["hidden_size"])
    assert backbone.visual.merger.linear_fc2.weight.shape == (hidden, 4 * vision["hidden_size"])
    assert config.vision_config.deepstack_visual_indexes == [0]  # one tap, added after language layer 0
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    # the released table itself is not changed by building a config from it
    assert released["text"]["rope_parameters"]["mrope_section"] == [24, 20, 20]


def test_deepstack_taps_scale_into_the_shorter_tower():
    assert scaled_deepstack_indexes([8, 16, 24], 27, 27, 36) == [8, 16, 24]  # released depth: unchanged
    assert scaled_deepstack_indexes([8, 16, 24], 27, 9, 3) == [2, 5, 8]
    assert scaled_deepstack_indexes([5, 11, 17], 24, 4, 2) == [0, 1]  # 0, 1, 2 -> at most one per text layer
    assert scaled_deepstack_indexes([8, 16, 24], 27, 1, 1) == [0]


def test_bad_shape_or_depth_is_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="unknown shape '7b'.*8b, 2b"):
        shaped_qwen3vl_config(tokenizer, "7b")
    with pytest.raises(ValueError, match="at least one layer"):
        shaped_qwen3vl_config(tokenizer, "2b", text_layers=0)


def test_a_built_checkpoint_loads_and_its_scores_depend_on_the_input(tmp_path, examples):
    from modeling_miescore.scoring.loading import load_scorer

    path = build_shaped_miescore(tmp_path / "tiny", "tiny", vocab="tiny")
    model = load_scorer(str(path), device="cpu", dtype="float32")
    first, second = (model.score(e["sources"], e["edited"], e["instruction"]) for e in examples[:2])
    assert set(first) == set(second) and first != second
