"""Qwen3-VL at the released widths with few layers: random weights, the real vocabulary, for CPU benchmarks.

What decides which of two code paths is faster is what each layer costs, not how many layers there are: these
checkpoints have the released Qwen3-VL-8B / -2B layer widths but only ``text_layers`` / ``vision_layers`` layers.

The shapes are the ``text_config`` / ``vision_config`` of the released ``config.json`` files:
https://huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/config.json and
https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct/blob/main/config.json (8B: untied embeddings; 2B: tied).
The layer counts are replaced; the deepstack taps (after vision blocks 8/16/24 of 27, or 5/11/17 of 24, each
added to the hidden states after language layers 0, 1, 2) are scaled into the shorter tower and kept at most
one per language layer, so 1 + 1 layers keep one tap (:func:`scaled_deepstack_indexes`).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from .qwen_vocab import QWEN3_VL_VOCAB_SIZE, build_processor
from .tiny_models import qwen_vl_token_ids, tiny_qwen3vl_config, widen_random_head

# Fields the two released configs share (text: grouped-query attention with 128-wide heads and interleaved
# M-RoPE; vision: 16-pixel patches merged 2x2).
_TEXT = dict(num_key_value_heads=8, head_dim=128, max_position_embeddings=262144, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                              "mrope_interleaved": True})
_VISION = dict(num_heads=16, patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304)

QWEN3_VL_8B = {
    "text": dict(_TEXT, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32),
    "vision": dict(_VISION, depth=27, hidden_size=1152, intermediate_size=4304, out_hidden_size=4096,
                   deepstack_visual_indexes=[8, 16, 24]),
    "tie_word_embeddings": False,
}
QWEN3_VL_2B = {
    "text": dict(_TEXT, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16),
    "vision": dict(_VISION, depth=24, hidden_size=1024, intermediate_size=4096, out_hidden_size=2048,
                   deepstack_visual_indexes=[5, 11, 17]),
    "tie_word_embeddings": True,
}
RELEASED_SHAPES = {"8b": QWEN3_VL_8B, "2b": QWEN3_VL_2B}


def scaled_deepstack_indexes(indexes, depth: int, vision_layers: int, text_layers: int) -> list[int]:
    """The released deepstack taps moved into a tower of ``vision_layers`` blocks: index ``i`` of ``depth``
    becomes ``i * vision_layers // depth``; duplicates merge, and at most ``text_layers`` remain (tap k is
    added after language layer k)."""
    scaled = sorted({int(i) * vision_layers // depth for i in indexes})
    return scaled[:text_layers]


def shaped_qwen3vl_config(tokenizer, shape: str, text_layers: int = 1, vision_layers: int = 1,
                          vocab_size: int | None = None):
    """A ``Qwen3VLConfig`` with the widths of ``RELEASED_SHAPES[shape]`` and the given layer counts.

    ``vocab_size`` (embedding rows) defaults to ``len(tokenizer)``; the special-token ids come from the tokenizer.
    """
    from transformers import Qwen3VLConfig

    if shape not in RELEASED_SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {', '.join(RELEASED_SHAPES)}")
    if text_layers < 1 or vision_layers < 1:
        raise ValueError(f"need at least one layer on each side, got text {text_layers}, vision {vision_layers}")
    released = copy.deepcopy(RELEASED_SHAPES[shape])  # Qwen3VLConfig may normalise nested dicts in place
    vision = dict(released["vision"], depth=vision_layers)
    vision["deepstack_visual_indexes"] = scaled_deepstack_indexes(
        released["vision"]["deepstack_visual_indexes"], released["vision"]["depth"], vision_layers, text_layers)
    text = dict(released["text"], num_hidden_layers=text_layers, vocab_size=vocab_size or len(tokenizer),
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    return Qwen3VLConfig(text_config=text, vision_config=vision,
                         tie_word_embeddings=released["tie_word_embeddings"], **qwen_vl_token_ids(tokenizer))


def build_shaped_miescore(path, shape: str, text_layers: int = 1, vision_layers: int = 1, vocab: str = "qwen",
                          seed: int = 0, cache_dir: str | os.PathLike | None = None, processor=None) -> Path:
    """Write a random MIEScore checkpoint with a ``shape`` backbone (see :func:`shaped_qwen3vl_config`) to
    ``path``; ``shape="tiny"`` is the 64-wide test backbone of ``tiny_models`` instead.

    The backbone is built in memory (a ``Qwen3VLModel``, no language-model head), so an 8B-wide checkpoint
    needs its weights in memory once (about 3.4 GB in float32 with one layer on each side). The regression
    head is drawn wider than the default initialisation, as in :func:`~.tiny_miescore.build_tiny_miescore`, so
    that scores depend on the input. Returns ``path``.
    """
    import torch
    from transformers import Qwen3VLModel

    from ..hub.modeling_miescore import MIEScoreModel  # deferred: loads torch, transformers

    processor = processor if processor is not None else build_processor(vocab, cache_dir)
    vocab_size = QWEN3_VL_VOCAB_SIZE if vocab == "qwen" else None
    if shape == "tiny":
        config = tiny_qwen3vl_config(processor.tokenizer, num_layers=text_layers, vocab_size=vocab_size)
    else:
        config = shaped_qwen3vl_config(processor.tokenizer, shape, text_layers, vision_layers, vocab_size)
    torch.manual_seed(seed)
    backbone = Qwen3VLModel(config).eval()
    torch.manual_seed(seed + 1)
    model = MIEScoreModel.from_backbone(backbone, processor=processor)
    widen_random_head(model)
    model.save_pretrained(path)
    return Path(path)


__all__ = ["QWEN3_VL_2B", "QWEN3_VL_8B", "RELEASED_SHAPES", "build_shaped_miescore", "scaled_deepstack_indexes",
           "shaped_qwen3vl_config"]
