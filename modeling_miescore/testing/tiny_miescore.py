"""Tiny random MIEScore checkpoints on any tiny backbone (:mod:`.tiny_models`, :mod:`.qwen_vocab`,
:mod:`.tiny_backbones`), for tests, the demo and CPU benchmarks."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .qwen_vocab import build_processor, build_qwen3vl
from .tiny_backbones import TINY_SCORER_DEFAULTS, build_tiny_backbone
from .tiny_models import widen_random_head

__all__ = ["build_tiny_miescore"]


def build_tiny_miescore(path, seed: int = 0, head_hidden_size: int = 32, vocab: str = "tiny",
                        vocab_cache_dir=None, backbone: str = "qwen3_vl", geometry: str = "tiny",
                        **config_kwargs) -> Path:
    """Write a tiny random MIEScore checkpoint (config with ``auto_map``, code, weights, processor) to ``path``.

    The backbone is built in a sibling temporary folder: Qwen3-VL by default (:func:`qwen_vocab.build_qwen3vl`
    with ``vocab``: ``"tiny"`` or the real ``"qwen"`` vocabulary, cached in ``vocab_cache_dir``), or another
    family by its model_type ``backbone`` (``qwen2_5_vl``, ``internvl``, ``llava``: :mod:`.tiny_backbones`, tiny
    vocabulary; ``geometry``: ``ATTENTION_GEOMETRIES``, ``"vllm"`` for a backbone vLLM can serve).
    ``config_kwargs`` go to :class:`MIEScoreConfig` (e.g. ``max_pixels=...``, ``score_head="lm_digits"``). Returns
    the path.
    """
    import torch

    from ..hub.modeling_miescore import MIEScoreModel  # deferred: loads torch, transformers

    path = Path(path)
    config_kwargs = {**TINY_SCORER_DEFAULTS.get(backbone, {}), **config_kwargs}
    with tempfile.TemporaryDirectory() as tmp:
        if backbone == "qwen3_vl":
            processor = build_processor(vocab, vocab_cache_dir)
            backbone_path = build_qwen3vl(Path(tmp) / "qwen3vl", vocab=vocab, seed=seed, processor=processor,
                                          geometry=geometry)
        elif vocab == "tiny":
            processor = None  # loaded from the backbone folder
            backbone_path = build_tiny_backbone(backbone, Path(tmp) / backbone, seed=seed)
        else:
            raise ValueError(f"vocab={vocab!r} is for Qwen3-VL backbones only; other families use the tiny one")
        torch.manual_seed(seed + 1)
        model = MIEScoreModel.from_backbone(backbone_path, processor=processor, head_hidden_size=head_hidden_size,
                                            **config_kwargs)
        widen_random_head(model)
        model.save_pretrained(path)
    return path
