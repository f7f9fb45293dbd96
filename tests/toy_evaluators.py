"""Trivial single-source evaluators for the tests of ``miescore baselines --evaluator``
(``--evaluator toy_evaluators:closeness``, ``tests/`` on ``sys.path``): deterministic functions of one source, the
edited image and the instruction, so a test can recompute the per-source average independently."""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["closeness", "failing_on", "scaled"]


def _mean_abs_difference(source: Image.Image, edited: Image.Image) -> float:
    a = np.asarray(source.convert("L").resize(edited.size), dtype=np.float64)
    b = np.asarray(edited.convert("L"), dtype=np.float64)
    return float(np.abs(a - b).mean())


def closeness(source: Image.Image, edited: Image.Image, instruction: str) -> dict:
    """``attribute_preservation`` = 100 - mean |source - edited| (luma, source resized to the edited size),
    ``visual_quality`` = the edited image's mean luma / 2.55, ``instruction_following`` = instruction length."""
    return {"attribute_preservation": 100.0 - _mean_abs_difference(source, edited),
            "visual_quality": float(np.asarray(edited.convert("L"), dtype=np.float64).mean()) / 2.55,
            "instruction_following": float(len(instruction))}


def scaled(factor: float = 1.0):
    """A factory (``--evaluator-option factor=2``): an evaluator returning one number, ``factor`` x the closeness."""

    def evaluate(source, edited, instruction) -> float:
        return factor * (100.0 - _mean_abs_difference(source, edited))

    return evaluate


def failing_on(word: str = "fail"):
    """A factory: the closeness evaluator, raising on instructions that contain ``word``."""

    def evaluate(source, edited, instruction):
        if word in instruction:
            raise RuntimeError(f"the model's answer for {instruction!r} could not be read")
        return closeness(source, edited, instruction)

    return evaluate
