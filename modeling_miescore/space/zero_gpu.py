"""ZeroGPU support for the Space: ``@spaces.GPU`` when the ``spaces`` package is there, a no-op otherwise.

On Hugging Face ZeroGPU hardware a GPU is attached to the process only while a function decorated with
``spaces.GPU`` runs; the platform sets ``SPACES_ZERO_GPU`` and CUDA is not available at start-up. The models
are therefore loaded at start-up and placed on ``"cuda"`` (the ``spaces`` package defers the move until a GPU
is attached), and every model call is decorated. On other hardware ``spaces.GPU`` has no effect, and without
the package (a local run) the functions are returned unchanged.
"""

from __future__ import annotations

import os
from typing import Any, Callable

# Seconds of GPU time a call may use (spaces.GPU's ``duration``). MIEScore is one forward pass; SpatialReward
# generates two judgements (SC and PQ), each up to a few hundred tokens, with an 8B model.
MIESCORE_GPU_SECONDS = 60
SPATIALREWARD_GPU_SECONDS = 120


def on_zero_gpu() -> bool:
    """True on ZeroGPU hardware (the platform sets ``SPACES_ZERO_GPU``)."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes")


def gpu_function(duration: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: ``spaces.GPU(duration=duration)`` when ``import spaces`` works, else the identity.

    The import happens when the decorator is made (when the Space builds its Blocks), not when this module is
    imported. A ``spaces`` without ``GPU`` (e.g. this repository's ``spaces/`` folder, importable as a namespace
    package from the checkout's root) counts as absent.
    """
    try:
        import spaces
    except ImportError:
        return _unchanged
    gpu = getattr(spaces, "GPU", None)
    return _unchanged if gpu is None else gpu(duration=duration)


def _unchanged(function: Callable[..., Any]) -> Callable[..., Any]:
    return function


__all__ = ["MIESCORE_GPU_SECONDS", "SPATIALREWARD_GPU_SECONDS", "gpu_function", "on_zero_gpu"]
