"""Offline test helpers: tiny random checkpoints, example edits and raw benchmark fixtures from real photos.

Nothing here downloads anything; the photos ship with scikit-image (the `dev` extra).
"""

from .examples import compose, example_edits, tint
from .tiny_models import build_tiny_miescore, build_tiny_processor, build_tiny_qwen3vl

__all__ = ["build_tiny_miescore", "build_tiny_processor", "build_tiny_qwen3vl", "compose", "example_edits", "tint"]

try:  # written alongside; re-exported once present
    from .raw_benchmarks import make_raw_mer_bench, make_raw_mie_bench  # noqa: F401

    __all__ += ["make_raw_mer_bench", "make_raw_mie_bench"]
except ImportError:  # pragma: no cover
    pass
