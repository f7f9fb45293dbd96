"""Tiny random-weight Qwen2.5-VL, InternVL and LLaVA checkpoints (processor + model), built offline, for the
backbone ablations of MIEScore (paper Table 5: Qwen2.5-VL and InternVL3.5 rows; LLaVA stands for the "generic"
family: any other image-text-to-text model, no pixel budget, no prefix reuse).

Like :mod:`.tiny_models` (Qwen3-VL) they use the stock transformers classes with each family's real geometry and
chat template; only the sizes are small and the weights random:

* Qwen2.5-VL: 14-px patches merged 2x2 (28 px per token), M-RoPE, window attention in the vision tower; the chat
  template is the stock one that TRL ships (``trl/chat_templates/qwen2_5_vl.jinja``).
* InternVL (InternVL3.5 layout: InternViT, pixel-shuffle projector, Qwen3 LM): 64-px tiles of 16-px patches, 4
  tokens per tile; the chat template of transformers' ``convert_internvl_weights_to_hf.py`` (``<IMG_CONTEXT>`` per
  image, expanded by the processor into ``<img>``, the tile tokens and ``</img>``).
* LLaVA: a CLIP vision tower (32-px images of 16-px patches, 4 tokens each) and a Qwen2 language model; ChatML
  template with one ``<image>`` per image.
"""

from __future__ import annotations

from pathlib import Path

from .tiny_models import (build_tiny_qwen3vl, qwen_vl_token_ids, save_random_checkpoint, train_tiny_tokenizer,
                          trl_chat_template)

__all__ = ["INTERNVL_CHAT_TEMPLATE", "TINY_BACKBONE_BUILDERS", "build_tiny_backbone", "build_tiny_internvl",
           "build_tiny_internvl_processor", "build_tiny_llava", "build_tiny_qwen25vl", "build_tiny_qwen25vl_processor"]

INTERNVL_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>",
                           "<video>"]
INTERNVL_NAMED_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>",
                         "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}


def _chatml_template(image: str, video: str | None = None) -> str:
    """ChatML (``<|im_start|>role\\n ... <|im_end|>\\n``) with ``image`` written for each image entry."""
    video_part = f"{{% elif part['type'] == 'video' %}}{{{{ '{video}' }}}}" if video else ""
    return (
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' }}"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        f"{{% if part['type'] == 'image' %}}{{{{ '{image}' }}}}{video_part}"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        "{{ '<|im_end|>\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )


INTERNVL_CHAT_TEMPLATE = _chatml_template("<IMG_CONTEXT>\\n", "<video>\\n")
LLAVA_CHAT_TEMPLATE = _chatml_template("<image>")
# InternVL tiles: 64-px tiles of 16-px patches, pixel-shuffled by 0.5 -> (64 / 16)^2 / 4 = 4 tokens per tile
_TILE, _PATCH, _TOKENS_PER_TILE = 64, 16, 4
_MEAN_STD = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


def build_tiny_qwen25vl_processor(vocab_size: int = 1000):
    """A stock ``Qwen2_5_VLProcessor`` (14-px patches, 2x2 merge) with the tiny trained BPE tokenizer."""
    from transformers import Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    template = trl_chat_template("qwen2_5_vl", "Qwen2.5-VL")
    tokenizer = train_tiny_tokenizer(vocab_size)
    tokenizer.chat_template = template
    geometry = dict(patch_size=14, temporal_patch_size=2, merge_size=2, **_MEAN_STD)
    image_processor = Qwen2VLImageProcessor(size={"shortest_edge": 64 * 28 * 28, "longest_edge": 1024 * 28 * 28},
                                            **geometry)
    return Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                               video_processor=Qwen2VLVideoProcessor(**geometry), chat_template=template)


def tiny_qwen25vl_config(tokenizer, hidden_size: int = 64, num_layers: int = 2):
    """A small ``Qwen2_5_VLConfig``: sum(mrope_section) == head_dim / 2; out_hidden_size == text hidden size; the
    second vision block uses full attention, the first window attention (as the real tower alternates them)."""
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                           out_hidden_size=hidden_size),
        tie_word_embeddings=True,
        **qwen_vl_token_ids(tokenizer),
    )


def build_tiny_internvl_processor(vocab_size: int = 1000):
    """A stock ``InternVLProcessor`` (64-px tiles, 4 tokens per tile, up to 12 tiles + thumbnail by default)."""
    from transformers import GotOcr2ImageProcessor, InternVLProcessor
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    tokenizer = train_tiny_tokenizer(vocab_size, INTERNVL_SPECIAL_TOKENS, INTERNVL_NAMED_TOKENS)
    tokenizer.chat_template = INTERNVL_CHAT_TEMPLATE
    tile = {"height": _TILE, "width": _TILE}
    image_processor = GotOcr2ImageProcessor(size=tile, crop_to_patches=True, max_patches=12, **_MEAN_STD)
    return InternVLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                             video_processor=InternVLVideoProcessor(size=tile, **_MEAN_STD),
                             image_seq_length=_TOKENS_PER_TILE, chat_template=INTERNVL_CHAT_TEMPLATE)


def tiny_internvl_config(tokenizer, hidden_size: int = 64, num_layers: int = 2):
    """A small ``InternVLConfig`` with a Qwen3 language model (InternVL3.5's): image_seq_length equals
    (tile / patch)^2 x downsample_ratio^2."""
    from transformers import InternVLConfig

    return InternVLConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=[_TILE, _TILE], patch_size=[_PATCH, _PATCH]),
        text_config=dict(model_type="qwen3", vocab_size=len(tokenizer), hidden_size=hidden_size,
                         intermediate_size=2 * hidden_size, num_hidden_layers=num_layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, max_position_embeddings=8192,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         tie_word_embeddings=True),
        image_token_id=tokenizer.context_image_token_id,
        image_seq_length=_TOKENS_PER_TILE,
        downsample_ratio=0.5,
        tie_word_embeddings=True,
    )


def build_tiny_qwen25vl(path, seed: int = 0) -> Path:
    """Write a tiny random ``Qwen2_5_VLForConditionalGeneration`` checkpoint with its processor; returns the path."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    processor = build_tiny_qwen25vl_processor()
    return save_random_checkpoint(path, Qwen2_5_VLForConditionalGeneration, tiny_qwen25vl_config(processor.tokenizer),
                                  processor, seed=seed)


def build_tiny_internvl(path, seed: int = 0) -> Path:
    """Write a tiny random ``InternVLForConditionalGeneration`` checkpoint with its processor; returns the path."""
    from transformers import InternVLForConditionalGeneration

    processor = build_tiny_internvl_processor()
    return save_random_checkpoint(path, InternVLForConditionalGeneration, tiny_internvl_config(processor.tokenizer),
                                  processor, seed=seed)


def build_tiny_llava(path, seed: int = 0) -> Path:
    """Write a tiny random ``LlavaForConditionalGeneration`` checkpoint (CLIP tower, Qwen2 LM) with its processor."""
    from transformers import CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    tokenizer = train_tiny_tokenizer(1000, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>"],
                                     {"image_token": "<image>"})
    tokenizer.chat_template = LLAVA_CHAT_TEMPLATE
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                         **_MEAN_STD)
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=16,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=LLAVA_CHAT_TEMPLATE)
    config = LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=16),
        text_config=dict(model_type="qwen2", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
        vision_feature_select_strategy="default", tie_word_embeddings=True,
    )
    return save_random_checkpoint(path, LlavaForConditionalGeneration, config, processor, seed=seed)


# backbone model_type -> builder, and the MIEScore config fields a tiny scorer of that family needs
TINY_BACKBONE_BUILDERS = {"qwen3_vl": build_tiny_qwen3vl, "qwen2_5_vl": build_tiny_qwen25vl,
                          "internvl": build_tiny_internvl, "llava": build_tiny_llava}
# InternVL's budget is in tiles: 6 tiles of 64 px (plus the thumbnail), at least one. Qwen2.5-VL: small images
# are upscaled to 16 tokens (not Qwen's 65,536 px = 84 tokens at 28 px per token), which keeps the tests quick.
TINY_SCORER_DEFAULTS = {"internvl": {"max_pixels": 6 * _TILE * _TILE, "min_pixels": _TILE * _TILE},
                        "qwen2_5_vl": {"min_pixels": 16 * 28 * 28}}


def build_tiny_backbone(model_type: str, path, seed: int = 0) -> Path:
    """The tiny checkpoint of one family: ``model_type`` is ``qwen3_vl``, ``qwen2_5_vl``, ``internvl`` or ``llava``."""
    if model_type not in TINY_BACKBONE_BUILDERS:
        raise ValueError(f"no tiny builder for model_type={model_type!r}; choose one of {sorted(TINY_BACKBONE_BUILDERS)}")
    return TINY_BACKBONE_BUILDERS[model_type](path, seed=seed)
