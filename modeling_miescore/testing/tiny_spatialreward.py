"""A tiny random SpatialReward checkpoint built offline (tests, CLI demo, CPU benchmarks)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .qwen_vocab import build_processor, build_qwen3vl
from .tiny_models import redraw_matrices

# Small budgets keep CPU tests fast: 128 x 128 .. 256 x 256 pixels per image = 16 .. 64 visual tokens.
TINY_DEFAULTS = {"max_new_tokens": 40, "min_pixels": 16_384, "max_pixels": 65_536}


def sharpen(model, std: float = 0.2, seed: int = 0) -> None:
    """Redraw every 2-D weight with ``std`` so that greedy generations depend on the image.

    With the std-0.02 initialisation a tiny random model emits one constant token whatever the input, which
    would let "batched equals unbatched" or "reloaded equals original" tests pass trivially
    (docs/prefix_reuse.md, "How exact").
    """
    redraw_matrices(sorted(model.named_parameters()), std, seed)


def build_tiny_spatialreward(path, seed: int = 0, vocab: str = "tiny", vocab_cache_dir=None, hidden_size: int = 64,
                             geometry: str = "tiny", sharpened: bool = True, **config_kwargs) -> Path:
    """Write a tiny random ``SpatialRewardModel`` checkpoint (config with ``auto_map``, code, weights, processor).

    Built from :func:`qwen_vocab.build_qwen3vl` with ``vocab`` (``"tiny"`` or the real ``"qwen"`` vocabulary,
    cached in ``vocab_cache_dir``; in a temporary sibling folder) loaded as a SpatialRewardModel, with
    sharpened weights (``sharpened=False`` keeps the initialisation, a better start for training).
    ``hidden_size`` / ``geometry``: the language model's width and attention geometry (``"vllm"``: head_dim 64,
    servable by vLLM's CPU attention; ``tiny_models.ATTENTION_GEOMETRIES``). ``config_kwargs`` override
    :class:`SpatialRewardConfig` fields (defaults: ``TINY_DEFAULTS``). Deterministic for a seed; no network.
    Returns ``path``.
    """
    from ..hub.modeling_spatialreward import SpatialRewardModel  # deferred: loads torch, transformers

    path = Path(path)
    settings = {**TINY_DEFAULTS, **config_kwargs}
    processor = build_processor(vocab, vocab_cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        plain = build_qwen3vl(Path(tmp) / "qwen3vl", vocab=vocab, seed=seed, processor=processor,
                              hidden_size=hidden_size, geometry=geometry)
        model = SpatialRewardModel.from_pretrained(plain, **settings)
        model.processor = processor
    if sharpened:
        sharpen(model, seed=seed)
    model.save_pretrained(path)
    return path


__all__ = ["build_tiny_spatialreward", "sharpen", "TINY_DEFAULTS"]
