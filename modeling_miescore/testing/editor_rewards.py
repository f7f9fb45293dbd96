"""Tiny rewards for the editor-RL tests and the CPU recipe (``--reward modeling_miescore.testing.editor_rewards:
mean_redness``): plain ``fn(images, instructions, sources) -> list[float]`` callables, one float per edited image.

``MIESCORE_TEST_REWARD_DELAY`` (seconds) slows every call, so a test can kill a run in the middle.
"""

from __future__ import annotations

import os
import time

import numpy as np

__all__ = ["mean_redness", "nan_reward", "wrong_length_reward", "failing_reward", "half_nan_reward"]


def _pause() -> None:
    delay = float(os.environ.get("MIESCORE_TEST_REWARD_DELAY", "0") or 0)
    if delay > 0:
        time.sleep(delay)


def redness(image) -> float:
    """Mean of R - (G + B) / 2 over the pixels, on [-1, 1] (1: pure red everywhere)."""
    rgb = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
    return float((rgb[..., 0] - (rgb[..., 1] + rgb[..., 2]) / 2).mean())


def mean_redness(images, instructions, sources) -> list:
    """Each edited image's :func:`redness`: a reward a colour-passing tiny editor can reach."""
    _pause()
    return [redness(image) for image in images]


def nan_reward(images, instructions, sources) -> list:
    """NaN for every edit (a reward that is broken)."""
    return [float("nan")] * len(images)


def half_nan_reward(images, instructions, sources) -> list:
    """Redness, but NaN for every second edit (half the samples fail)."""
    return [float("nan") if i % 2 else redness(image) for i, image in enumerate(images)]


def wrong_length_reward(images, instructions, sources) -> list:
    """One reward too few (a caller bug the trainer must name)."""
    return [0.0] * (len(images) - 1)


def failing_reward(images, instructions, sources) -> list:
    """Raises like a reward server that is down after its retries."""
    raise ConnectionError("reward server at http://127.0.0.1:9 refused the connection (after 3 attempts)")
