from importlib import resources

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.hub.configuration_miescore import MIEScoreConfig
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.hub.processing_miescore import (
    as_edit_sample,
    build_messages,
    estimate_num_tokens,
    num_image_tokens,
    prepare_inputs,
    resized_image_size,
)
from modeling_miescore.hub.skill_miescore import DEFAULT_SKILL


@pytest.fixture(scope="module")
def config():
    return MIEScoreConfig(backbone_config={"model_type": "qwen3_vl"})


def _texts_and_images(messages):
    content = messages[0]["content"]
    return [c.get("text") for c in content if c["type"] == "text"], [c for c in content if c["type"] == "image"]


def test_default_skill_ships_as_text_file_and_config_default(config):
    text = resources.files("modeling_miescore.hub").joinpath("default_skill.txt").read_text()
    assert text == DEFAULT_SKILL
    assert config.skill == DEFAULT_SKILL
    for dimension in ("Visual quality", "Instruction following", "Attribute preservation"):
        assert dimension in DEFAULT_SKILL
    assert "role of every source" in DEFAULT_SKILL  # multi-source aware


def test_messages_label_sources_then_instruction_then_edited_last(config):
    messages, roles = build_messages(3, "Put {the} cat on the table", config)
    assert roles == ["source:0", "source:1", "source:2", "edited"]
    content = messages[0]["content"]
    kinds = [c["type"] for c in content]
    assert kinds == ["text", "image", "text", "image", "text", "image", "text", "image", "text"]
    assert content[0]["text"].startswith(DEFAULT_SKILL) and content[0]["text"].endswith("Source image 1:")
    assert content[2]["text"] == "\nSource image 2:"
    assert content[4]["text"] == "\nSource image 3:"
    assert "Editing instruction: Put {the} cat on the table" in content[6]["text"]  # braces kept verbatim
    assert content[6]["text"].endswith("Edited image:")


def test_edited_first_order_swaps_blocks():
    config = MIEScoreConfig(backbone_config={"model_type": "qwen3_vl"}, image_order="edited_first")
    _, roles = build_messages(2, "x", config)
    assert roles == ["edited", "source:0", "source:1"]


def test_config_rejects_bad_fields():
    with pytest.raises(ValueError, match="image_order"):
        MIEScoreConfig(backbone_config={"model_type": "qwen3_vl"}, image_order="random")
    with pytest.raises(ValueError, match="overall_weights"):
        MIEScoreConfig(backbone_config={"model_type": "qwen3_vl"}, overall_weights=[0.5, 0.5])
    with pytest.raises(ValueError, match="{edited}"):
        MIEScoreConfig(backbone_config={"model_type": "qwen3_vl"}, prompt_template="{sources} {instruction}")


@pytest.mark.parametrize(
    "sample, message",
    [
        ({"sources": [], "edited": "e.png", "instruction": "x"}, "zero source images"),
        ({"sources": ["a.png"], "edited": "e.png", "instruction": "   "}, "empty instruction"),
        ({"sources": ["a.png"], "instruction": "x"}, "missing edited"),
        ({"sources": ["a.png"], "edited": None, "instruction": "x"}, "no edited image"),
        (42, "must be a dict"),
    ],
)
def test_sample_validation(sample, message):
    with pytest.raises(MIEScoreInputError, match=message):
        as_edit_sample(sample)


def test_single_source_is_wrapped():
    assert as_edit_sample({"sources": "a.png", "edited": "e.png", "instruction": " x "}).sources == ["a.png"]


def test_prepare_inputs_batches_and_respects_pixel_budget(tiny_miescore):
    processor = tiny_miescore.get_processor()
    config = MIEScoreConfig(backbone_config={"model_type": "qwen3_vl"}, max_pixels=128 * 128, min_pixels=32 * 32)
    big = Image.fromarray(np.zeros((640, 480, 3), dtype=np.uint8))
    small = Image.fromarray(np.zeros((40, 40, 3), dtype=np.uint8))
    samples = [as_edit_sample({"sources": [big, small], "edited": big, "instruction": "a"}).load(),
               as_edit_sample({"sources": [small], "edited": small, "instruction": "a longer instruction"}).load()]
    batch = prepare_inputs(processor, samples, config, padding_side="left")
    assert batch["image_grid_thw"].shape == (5, 3)
    pixels = batch["image_grid_thw"][:, 1] * batch["image_grid_thw"][:, 2] * 16 * 16
    assert int(pixels.max()) <= 128 * 128 and int(pixels.min()) >= 32 * 32
    assert batch["input_ids"].shape[0] == 2
    assert batch["attention_mask"][1, 0] == 0 or batch["attention_mask"][0, 0] == 0  # left padded
    image_tokens = (batch["input_ids"] == processor.image_token_id).sum(dim=1)
    per_image = batch["image_grid_thw"].prod(dim=1) // 4
    assert image_tokens.tolist() == [int(per_image[:3].sum()), int(per_image[3:].sum())]


@pytest.fixture(scope="module")
def stock_processor():
    from modeling_miescore.testing import build_tiny_processor

    return build_tiny_processor()  # a stock Qwen3VLProcessor: 16-px patches, 2x2 merge


@pytest.mark.parametrize("budget", [(64 * 32 * 32, 1024 * 32 * 32), (32 * 32, 128 * 128), (16_384, 65_536)])
def test_num_image_tokens_equals_the_processors_image_pads(stock_processor, budget):
    min_pixels, max_pixels = budget
    image_pad = stock_processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for width, height in [(40, 40), (640, 480), (200, 90), (1000, 37), (333, 517), (96, 300), (2048, 1536)]:
        image = Image.new("RGB", (width, height), (120, 60, 30))
        batch = stock_processor(text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[image],
                                return_tensors="pt", size={"shortest_edge": min_pixels, "longest_edge": max_pixels})
        pads = int((batch["input_ids"] == image_pad).sum())
        tokens = num_image_tokens(width, height, min_pixels=min_pixels, max_pixels=max_pixels)
        assert tokens == pads, (width, height, budget)
        _, grid_h, grid_w = batch["image_grid_thw"][0].tolist()  # 16-px patches
        resized = resized_image_size(width, height, min_pixels=min_pixels, max_pixels=max_pixels)
        assert resized == (grid_h * 16, grid_w * 16)


def test_estimate_num_tokens_counts_image_tokens_exactly(config):
    small = Image.new("RGB", (64, 64))
    large = Image.new("RGB", (1600, 1200))
    sample = as_edit_sample({"sources": [small, large], "edited": large, "instruction": "abc" * 10}).load()
    image_tokens = sum(num_image_tokens(*image.size, min_pixels=config.min_pixels, max_pixels=config.max_pixels)
                       for image in (small, large, large))
    assert estimate_num_tokens(sample, config) == 10 + len(config.skill) // 4 + image_tokens
    # 64x64 is upscaled to the 65,536-pixel minimum (64 tokens); 1600x1200 is cut to the 1,048,576 budget
    assert num_image_tokens(64, 64, min_pixels=config.min_pixels, max_pixels=config.max_pixels) == 64
    assert num_image_tokens(1600, 1200, min_pixels=config.min_pixels, max_pixels=config.max_pixels) <= 1024


def test_instructions_must_be_text_within_the_token_budget():
    from modeling_miescore.hub.processing_miescore import MAX_INSTRUCTION_CHARS

    assert MAX_INSTRUCTION_CHARS == 4096
    sample = {"sources": ["a.png"], "edited": "e.png"}
    for value, message in [(42, "instruction of type int; pass the editing instruction as a string"),
                           (["make", "it"], "instruction of type list"), ("  ", "empty instruction"),
                           ("x" * (MAX_INSTRUCTION_CHARS + 1), "instruction of 4,097 characters, above the limit of "
                                                                "4,096")]:
        with pytest.raises(MIEScoreInputError, match=message):
            as_edit_sample({**sample, "instruction": value}, where="sample 3")
    assert as_edit_sample({**sample, "instruction": " " + "x" * MAX_INSTRUCTION_CHARS}).instruction == "x" * 4096


def test_the_per_sample_pixel_budget_is_checked_from_headers_before_decoding(tmp_path, monkeypatch):
    from PIL import ImageFile

    from modeling_miescore.hub.processing_miescore import EditSample, load_samples

    for name, size in (("a.png", (3000, 2000)), ("b.png", (3000, 2000)), ("e.png", (2000, 2000))):
        Image.new("RGB", size).save(tmp_path / name)
    sample = EditSample(sources=[tmp_path / "a.png", tmp_path / "b.png"], edited=tmp_path / "e.png", instruction="x")
    decodes = []
    original_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decodes.append(id(self)) or original_load(self))
    with pytest.raises(MIEScoreInputError, match=r"^sample 5: its 3 images decode to 16 Mpx together, above the "
                                                 r"per-sample budget of 15 Mpx; downscale the images or raise"):
        load_samples([sample, sample], max_sample_pixels=15_000_000, first_index=5)
    assert decodes == []  # refused before any pixel was decoded
    loaded = sample.load(max_sample_pixels=16_000_000)
    assert [image.size for image in loaded.sources] == [(3000, 2000), (3000, 2000)]
    assert len(set(decodes)) == 3  # each image decoded (PNG's getexif calls load again, a no-op)
