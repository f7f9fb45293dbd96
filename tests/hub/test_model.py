import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from modeling_miescore import overall_score
from modeling_miescore.scoring.loading import ModelLoadError, load_scorer
from modeling_miescore.hub.modeling_miescore import MIEScoreModel, last_token_indices

KEYS = {"visual_quality", "instruction_following", "attribute_preservation", "overall"}


def test_score_returns_the_four_keys_on_the_mos_scale(tiny_miescore, examples):
    scores = tiny_miescore.score(examples[0]["sources"], examples[0]["edited"], examples[0]["instruction"])
    assert set(scores) == KEYS
    assert all(isinstance(v, float) and 0.0 <= v <= 100.0 for v in scores.values())
    expected = overall_score(scores["visual_quality"], scores["instruction_following"], scores["attribute_preservation"])
    assert scores["overall"] == pytest.approx(expected, rel=1e-9)
    other = tiny_miescore.score(examples[3]["sources"], examples[3]["edited"], examples[3]["instruction"])
    assert other != scores  # the random-weight model still depends on its input


# Loading a checkpoint in a fresh process without the package: tests/hub/test_hub_boundary.py.


def test_checkpoint_contains_code_config_and_processor(tiny_miescore_path):
    files = set(os.listdir(tiny_miescore_path))
    assert {"config.json", "model.safetensors", "configuration_miescore.py", "modeling_miescore.py",
            "processing_miescore.py", "image_io.py", "miescore_overall.py", "skill_miescore.py",
            "processor_config.json", "tokenizer.json", "chat_template.jinja"} <= files
    assert not any(f.endswith((".bin", ".pt", ".pth")) for f in files)
    config = json.loads((tiny_miescore_path / "config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_miescore.MIEScoreConfig",
                                  "AutoModel": "modeling_miescore.MIEScoreModel"}
    assert config["max_pixels"] == 1_048_576 and config["overall_weights"] == [0.3, 0.4, 0.3]
    assert config["backbone_config"]["model_type"] == "qwen3_vl"


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_score_batch_equals_per_sample(tiny_miescore, examples, padding_side):
    tiny_miescore.config.padding_side = padding_side
    try:
        rng = np.random.default_rng(0)
        samples = [{"sources": e["sources"], "edited": e["edited"], "instruction": e["instruction"]} for e in examples]
        # a different image size and a single-source sample, so the batch mixes lengths and source counts
        odd = Image.fromarray(rng.integers(0, 255, (200, 90, 3), dtype=np.uint8))
        samples.append({"sources": [odd], "edited": examples[0]["edited"], "instruction": "Blend them."})
        single = [tiny_miescore.score(**s) for s in samples]
        batched = tiny_miescore.score_batch(samples, batch_size=4)
        assert len(batched) == len(samples)
        for one, many in zip(single, batched):
            for key in KEYS:
                assert many[key] == pytest.approx(one[key], abs=1e-4)
        assert len({round(r["overall"], 6) for r in batched}) > 1
    finally:
        tiny_miescore.config.padding_side = "left"


def test_last_token_indices_left_and_right_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert last_token_indices(mask).tolist() == [4, 2, 4]


def test_overall_score_vectorised():
    vq, if_, ap = np.array([40.0, 80.0, 0.0]), np.array([50.0, 60.0, 70.0]), np.array([60.0, 90.0, 50.0])
    want = np.exp(0.3 * np.log(vq[:2]) + 0.4 * np.log(if_[:2]) + 0.3 * np.log(ap[:2]))
    got = overall_score(vq, if_, ap)
    np.testing.assert_allclose(got[:2], want)
    assert got[2] == 0.0
    tensor = overall_score(torch.tensor(vq), torch.tensor(if_), torch.tensor(ap))
    np.testing.assert_allclose(tensor.numpy(), got)
    assert isinstance(overall_score(40, 50, 60), float)
    assert overall_score(10, 20, 30, weights=(1, 0, 0)) == pytest.approx(10)


def test_from_backbone_keeps_qwen3vl_weights(tiny_qwen3vl_path):
    from transformers import Qwen3VLForConditionalGeneration

    plain = Qwen3VLForConditionalGeneration.from_pretrained(tiny_qwen3vl_path)
    scorer = MIEScoreModel.from_backbone(tiny_qwen3vl_path, max_pixels=200_000)
    assert scorer.config.max_pixels == 200_000
    for name, tensor in plain.model.state_dict().items():
        torch.testing.assert_close(scorer.backbone.state_dict()[name], tensor)
    assert scorer.processor is not None
    assert torch.isfinite(scorer.head.out_proj.weight).all() and scorer.head.out_proj.weight.abs().sum() > 0
    from_instance = MIEScoreModel.from_backbone(plain, processor=scorer.processor)
    assert from_instance.backbone is plain.model


def test_load_scorer_dtype_and_errors(tiny_miescore_path, tiny_qwen3vl_path, tmp_path, examples):
    bf16 = load_scorer(str(tiny_miescore_path), device="cpu", dtype="bfloat16")
    assert bf16.dtype == torch.bfloat16
    scores = bf16.score(examples[0]["sources"], examples[0]["edited"], examples[0]["instruction"])
    assert all(np.isfinite(v) for v in scores.values())
    with pytest.raises(ModelLoadError, match="plain Qwen3-VL checkpoint"):
        load_scorer(str(tiny_qwen3vl_path))
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_scorer(str(tmp_path / "missing-model"))
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_scorer(str(tmp_path))
    with pytest.raises(ModelLoadError, match="Hugging Face Hub"):
        load_scorer("nobody/no-such-miescore-model")
