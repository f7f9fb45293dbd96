"""Tiny random-weight checkpoints built offline, for tests, the demo and CPU benchmarks.

They use the stock Qwen3-VL classes (tokenizer, image/video processors, processor, model) with the real
patch geometry (16-px patches, 2x2 merge, so 32 px per LLM token), so every code path is the one a user
with real weights runs; only the sizes are small and the weights random. Other backbone families (Qwen2.5-VL,
InternVL, LLaVA): :mod:`.tiny_backbones`.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..hub.control_tokens import QWEN_SPECIAL_TOKENS
from ..hub.skill_miescore import DEFAULT_SKILL

SPECIAL_TOKENS = list(QWEN_SPECIAL_TOKENS)
QWEN_VL_NAMED_TOKENS = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                        "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"}
# GPT-2/Qwen2 style pre-tokenisation pattern (contractions, letters, single digits, punctuation, spaces).
_PRETOKENIZE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_EXTRA_CORPUS = """Source image 1: Source image 2: Source image 3: Edited image: Editing instruction:
Put the cat from the second image on the table of the first image. Replace the cup with the rocket.
Apply the style of the second image to the first. Compose the astronaut in front of the rocket launch.
{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [120, 340, 560, 900]}], "reasoning": "<|bbox_0|> The
cat is placed on the table. <|global|> Overall the edit follows the instruction.", "score": [18, 21]}
{"reasoning": "The image looks natural with minor artifacts.", "score": [20, 17]}
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 visual quality instruction following
attribute preservation naturalness artifacts consistency overall score good medium poor"""


def trl_chat_template(name: str = "qwen3_vl", family: str = "Qwen3-VL") -> str:
    """The stock chat template ``trl/chat_templates/<name>.jinja`` (TRL ships byte-identical copies that it
    recognises)."""
    try:
        return resources.files("trl").joinpath(f"chat_templates/{name}.jinja").read_text()
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise RuntimeError(
            f"building a tiny {family} checkpoint needs the {family} chat template shipped with TRL; "
            "install it with: pip install 'miescore[train]'"
        ) from err


def qwen_vl_token_ids(tokenizer) -> dict:
    """The image / video / vision start and end token ids of a Qwen-VL config, read from ``tokenizer``."""
    return {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}


def train_tiny_tokenizer(vocab_size: int, special_tokens=SPECIAL_TOKENS, extra_special_tokens: dict | None = None):
    """A byte-level BPE ``Qwen2Tokenizer`` trained on the default skill and a few prompt lines (deterministic).

    ``special_tokens`` are added as special tokens (ids from 0); ``extra_special_tokens`` names some of them for
    the processor (``image_token``, ``start_image_token``, ...). The default is Qwen-VL's set.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               byte_fallback=False))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    corpus = (DEFAULT_SKILL + "\n" + _EXTRA_CORPUS).splitlines()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(corpus, trainer)
    model = json.loads(bpe.to_str())["model"]
    tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"], merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]],
        unk_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens=extra_special_tokens or QWEN_VL_NAMED_TOKENS,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    return tokenizer


def build_tiny_processor(vocab_size: int = 1000):
    """A stock ``Qwen3VLProcessor`` with a freshly trained byte-level BPE tokenizer (deterministic)."""
    return qwen3vl_processor(train_tiny_tokenizer(vocab_size),
                             {"shortest_edge": 64 * 32 * 32, "longest_edge": 1024 * 32 * 32})


def qwen3vl_processor(tokenizer, image_size: dict, video_size: dict | None = None):
    """A stock ``Qwen3VLProcessor`` around ``tokenizer`` with the stock chat template and Qwen3-VL's geometry:
    16-px patches merged 2x2 -> 32 px per token, normalised as the released model."""
    from transformers import Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    template = trl_chat_template()
    tokenizer.chat_template = template
    geometry = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    video = Qwen3VLVideoProcessor(**geometry, **({"size": video_size} if video_size else {}))
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(size=image_size, **geometry), tokenizer=tokenizer,
                            video_processor=video, chat_template=template)


# Attention geometries of the tiny language model: head_dim 16 is the smallest (fast CPU tests); vLLM's CPU
# attention kernels refuse it ("Unsupported CPU attention configuration: head_dim=16") and take 64, so checkpoints
# served by a real vLLM use "vllm" (2 heads / 1 KV head of 64, a vision tower of width 64). mrope_section splits the
# head_dim / 2 rotary frequencies between time, height and width; Qwen3-VL interleaves them (T H W T H W ..., then
# T), which needs 3 * max(H, W) <= head_dim / 2: "vllm" takes the released [24, 20, 20] of head_dim 128, halved.
# "tiny"'s [2, 3, 3] breaks that rule (transformers truncates the interleave; vLLM lays it out otherwise, and its
# generations then drift from the in-process ones), which only an in-process model can afford.
ATTENTION_GEOMETRIES = {
    "tiny": {"head_dim": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "vision_hidden_size": 32,
             "mrope_section": [2, 3, 3]},
    "vllm": {"head_dim": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "vision_hidden_size": 64,
             "mrope_section": [12, 10, 10]},
}


def tiny_qwen3vl_config(tokenizer, hidden_size: int = 64, num_layers: int = 2, vocab_size: int | None = None,
                        geometry: str = "tiny"):
    """A small ``Qwen3VLConfig``. Constraints: sum(mrope_section) == head_dim / 2; vision
    num_position_embeddings is a perfect square; deepstack indexes < vision depth; out_hidden_size equals
    the text hidden size. ``vocab_size`` (embedding rows) defaults to ``len(tokenizer)``; ``geometry`` names an
    entry of :data:`ATTENTION_GEOMETRIES`."""
    from transformers import Qwen3VLConfig

    if geometry not in ATTENTION_GEOMETRIES:
        raise ValueError(f"geometry must be one of {sorted(ATTENTION_GEOMETRIES)}, got {geometry!r}")
    shape = ATTENTION_GEOMETRIES[geometry]
    head_dim = shape["head_dim"]
    return Qwen3VLConfig(
        text_config=dict(
            vocab_size=vocab_size or len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers, num_attention_heads=shape["num_attention_heads"],
            num_key_value_heads=shape["num_key_value_heads"], head_dim=head_dim, max_position_embeddings=8192,
            rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": list(shape["mrope_section"]),
                             "mrope_interleaved": True},
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            bos_token_id=None,
        ),
        vision_config=dict(depth=2, hidden_size=shape["vision_hidden_size"],
                           intermediate_size=2 * shape["vision_hidden_size"], num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden_size,
                           num_position_embeddings=256, deepstack_visual_indexes=[0, 1]),
        tie_word_embeddings=True,
        **qwen_vl_token_ids(tokenizer),
    )


def write_qwen3vl_checkpoint(path, processor, vocab_size: int | None = None, hidden_size: int = 64,
                             num_layers: int = 2, seed: int = 0, geometry: str = "tiny") -> Path:
    """Write a random ``Qwen3VLForConditionalGeneration`` (see :func:`tiny_qwen3vl_config`) and ``processor``
    to ``path``. Deterministic for a given seed. Returns the path."""
    from transformers import Qwen3VLForConditionalGeneration

    config = tiny_qwen3vl_config(processor.tokenizer, hidden_size=hidden_size, num_layers=num_layers,
                                 vocab_size=vocab_size, geometry=geometry)
    return save_random_checkpoint(path, Qwen3VLForConditionalGeneration, config, processor, seed=seed)


def save_random_checkpoint(path, model_class, config, processor, seed: int = 0) -> Path:
    """Write ``model_class(config)`` with random weights (seeded) and ``processor`` to ``path``; returns it."""
    import torch

    path = Path(path)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def build_tiny_qwen3vl(path, seed: int = 0) -> Path:
    """Write a tiny random ``Qwen3VLForConditionalGeneration`` checkpoint with its processor to ``path``.

    Deterministic for a given seed, no network, about a second. Returns the path. (The real Qwen vocabulary:
    ``qwen_vocab.build_qwen3vl(path, vocab="qwen")``.)
    """
    return write_qwen3vl_checkpoint(path, build_tiny_processor(), seed=seed)


def widen_random_head(model) -> None:
    """Redraw a new scorer's random head weights with std 1/sqrt(fan-in), in place (a head read from the backbone,
    ``new_weights`` False, is left alone). Random heads initialised with std 0.02 put every score at ~50; a wider
    head makes scores depend on the input, so that tests comparing paths (batched vs single, reloaded vs original)
    can fail."""
    import torch

    if not model.head.new_weights:
        return
    with torch.no_grad():
        for module in model.head.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 1.0 / module.in_features**0.5)


def sharpen_language_model(model, seed: int = 0, std: float = 0.1):
    """Give a tiny scorer's language model larger random weights (std ``std``, embeddings kept), in place.

    With std-0.02 weights almost any input gives the same scores; sharpened, a wrong position or a missing image
    changes them by whole points, so tests comparing two paths (prefix reuse vs full forward) can fail.
    """
    redraw_matrices(model.backbone.get_decoder().named_parameters(), std, seed, keep="embed")
    return model


def redraw_matrices(named_parameters, std: float, seed: int, keep: str | None = None) -> None:
    """Redraw every 2-D parameter whose name does not contain ``keep`` from N(0, std^2), seeded, in place."""
    import torch

    from ..utils.random_draws import randn_tensor  # deferred: loads torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in named_parameters:
            if param.ndim == 2 and not (keep and keep in name):
                param.copy_(randn_tensor(param.shape, generator=generator, device=param.device) * std)
