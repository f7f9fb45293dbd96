"""Tiny rewards for the editor-RL tests and the CPU recipe (``--reward modeling_miescore.testing.editor_rewards:
mean_redness``): plain ``fn(images, instructions, sources) -> list[float]`` callables, one float per edited image.

``MIESCORE_TEST_REWARD_DELAY`` (seconds) slows every call, so a test can kill a run in the middle.
"""

from __future__ import annotations

import os
import time

import numpy as np

__all__ = ["mean_redness", "nan_reward", "wrong_length_reward", "failing_reward", "half_nan_reward", "text_reward",
           "bool_reward", "huge_reward", "out_of_range_reward", "constant_reward", "exiting_reward",
           "os_exit_reward", "interrupting_reward", "failing_then_busy_reward", "failing_on_rank_1_reward",
           "value_error_reward", "disk_full_on_rank_1_reward", "low_redness", "fidelity_to_source", "red_share",
           "env_delay"]


def env_delay(variable: str = "MIESCORE_TEST_REWARD_DELAY") -> None:
    """Sleep for the seconds that environment variable ``variable`` holds (unset or 0: no pause)."""
    delay = float(os.environ.get(variable, "0") or 0)
    if delay > 0:
        time.sleep(delay)


def redness(image) -> float:
    """Mean of R - (G + B) / 2 over the pixels, on [-1, 1] (1: pure red everywhere)."""
    rgb = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
    return float((rgb[..., 0] - (rgb[..., 1] + rgb[..., 2]) / 2).mean())


def mean_redness(images, instructions, sources) -> list:
    """Each edited image's :func:`redness`: a reward a colour-passing tiny editor can reach."""
    env_delay()
    return [redness(image) for image in images]


mean_redness.reward_range = (-1.0, 1.0)  # declared: a value outside it is a failed sample, not a reward


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


def value_error_reward(images, instructions, sources) -> list:
    """Raises ``ValueError`` (a reward's own bug, e.g. an image size it cannot handle)."""
    raise ValueError("cannot score an image of 64x64 pixels")


def text_reward(images, instructions, sources) -> list:
    """Redness as strings (``"0.12"``): not numbers, never a training signal."""
    return [str(redness(image)) for image in images]


def bool_reward(images, instructions, sources) -> list:
    """``True`` / ``False`` (redder than grey or not): flags, not numbers."""
    return [redness(image) > 0 for image in images]


def huge_reward(images, instructions, sources) -> list:
    """Redness mapped onto [1.4e308, 1.7e308]: finite rewards whose sums and squares overflow a float."""
    return [1.55e308 + 0.15e308 * max(-1.0, min(1.0, 5 * redness(image))) for image in images]


def out_of_range_reward(images, instructions, sources) -> list:
    """Declares [0, 1], answers 2.0 for every second edit (those are failed samples)."""
    return [2.0 if i % 2 else max(0.0, redness(image)) for i, image in enumerate(images)]


out_of_range_reward.reward_range = (0.0, 1.0)


def constant_reward(images, instructions, sources) -> list:
    """0.5 for every edit: every group has zero std (nothing to learn; with drop_zero_std_groups no update)."""
    return [0.5] * len(images)


def exiting_reward(images, instructions, sources) -> list:
    """``sys.exit(0)`` inside the reward (a library that exits)."""
    raise SystemExit(0)


def os_exit_reward(images, instructions, sources) -> list:
    """``os._exit(0)`` inside the reward: ends the process at once, without cleanup."""
    os._exit(0)


def interrupting_reward(images, instructions, sources) -> list:
    """``KeyboardInterrupt`` raised by the reward itself (not a Ctrl-C of the user)."""
    raise KeyboardInterrupt


_calls = {"failing_then_busy": 0}


def failing_then_busy_reward(images, instructions, sources) -> list:
    """The first call raises after a second (a reward model's fault); later calls keep torch busy for
    ``MIESCORE_TEST_BUSY_SECONDS`` (default 3) first: the next batch is still being scored when the run stops."""
    _calls["failing_then_busy"] += 1
    if _calls["failing_then_busy"] == 1:  # fails once the next batch is queued: the worker starts it at once
        time.sleep(1.0)
        raise RuntimeError("the reward model gave non-finite scores (a NaN head)")
    import torch

    end = time.monotonic() + float(os.environ.get("MIESCORE_TEST_BUSY_SECONDS", "3"))
    a = torch.randn(256, 256)
    while time.monotonic() < end:
        a = torch.tanh(a @ a)
    return [redness(image) for image in images]


def failing_on_rank_1_reward(images, instructions, sources) -> list:
    """Raises on the process of rank 1 only (``RANK`` of ``accelerate launch``); redness elsewhere."""
    if os.environ.get("RANK") == "1":
        raise ConnectionError("the reward replica of process 1 went away")
    return mean_redness(images, instructions, sources)


def disk_full_on_rank_1_reward(images, instructions, sources) -> list:
    """Redness; on the process of rank 1 it also makes every later ``safetensors`` file write fail with ``OSError``
    ENOSPC (a full disk under that process's checkpoint files only)."""
    if os.environ.get("RANK") == "1":
        import errno

        import safetensors.torch

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        safetensors.torch.save_file = full
    return mean_redness(images, instructions, sources)


# Gold rewards for the hacking-alarm tests (``eval_rewards``): the redness proxy is the training reward.


def low_redness(images, instructions, sources) -> list:
    """Minus :func:`redness`: a gold that prefers exactly the opposite of the proxy (the alarm is certain)."""
    return [-redness(image) for image in images]


low_redness.reward_range = (-1.0, 1.0)


def fidelity_to_source(images, instructions, sources) -> list:
    """Minus the mean absolute pixel difference (on [0, 1]) between the edit and its first source resized to the
    edit's size: an edit reward's "keep what the instruction does not touch", which repainting everything red
    breaks."""
    out = []
    for image, group in zip(images, sources):
        edit = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
        source = np.asarray(group[0].convert("RGB").resize(image.size), dtype=np.float64) / 255.0
        out.append(-float(np.abs(edit - source).mean()))
    return out


fidelity_to_source.reward_range = (-1.0, 0.0)


def red_share(images, instructions, sources) -> list:
    """The red channel's share of the light, R / (R + G + B) on average: another measure of redness (a gold that
    agrees with the proxy; the control of the alarm tests)."""
    out = []
    for image in images:
        rgb = np.asarray(image.convert("RGB"), dtype=np.float64) + 1.0
        out.append(float((rgb[..., 0] / rgb.sum(axis=-1)).mean()))
    return out


red_share.reward_range = (0.0, 1.0)
