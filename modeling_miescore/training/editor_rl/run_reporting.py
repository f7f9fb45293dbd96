"""What an editor-RL run tells a person while it runs: the start summary, the per-step line, the reward's
components per step, and the tags its trackers (TensorBoard, W&B) show.

- :func:`training_summary`: diffusers' ``***** Running training *****`` block (``examples/dreambooth/
  train_dreambooth_lora_flux.py`` @ diffusers v0.42: processes, batch sizes, accumulation, total steps), in this
  trainer's terms: groups x G per step, rollout batches, optimizer updates per step, trained denoising steps per
  rollout, total images.
- :func:`component_totals` / :func:`component_means`: each reward component's mean over a step's valid samples
  (MIEScore's VQ / IF / AP, SpatialReward's SC / PQ and sub-scores, each term of a weighted sum), summed per process
  and then over processes.
- :func:`tracker_values`: a ``metrics.jsonl`` record as grouped tracker tags, ``reward/...`` (the reward, its
  spread, its components, failures), ``train/...`` (loss, KL, ratio, clip fraction, gradient norm, LR) and
  ``time/...`` (the seconds of each phase), so TensorBoard and W&B show three panels.
- :func:`step_line`: one log line per step, the progress bar's stand-in with ``--no_progress`` (a log file gets
  lines, not carriage returns).
- :func:`log_grid_image`: the sample grid as an image to every tracker that takes images.
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Sequence

__all__ = ["TRACKER_TAGS", "component_means", "component_totals", "log_grid_image", "step_line", "tracker_values",
           "training_summary"]

# metrics.jsonl key -> tracker tag (the seconds_* keys become time/*, the reward's components reward/<name>)
TRACKER_TAGS = {
    "reward_mean": "reward/mean", "reward_std": "reward/std", "reward_failures": "reward/failures",
    "zero_std_groups": "reward/zero_std_groups", "skipped_groups": "reward/skipped_groups",
    "loss": "train/loss", "policy_loss": "train/policy_loss", "kl": "train/kl", "approx_kl": "train/approx_kl",
    "ratio_mean": "train/ratio_mean", "clipfrac": "train/clipfrac", "grad_norm": "train/grad_norm",
    "lr": "train/lr",
}


def training_summary(config, *, num_processes: int, num_requests: int, trained_steps: int, start_step: int = 0) -> str:
    """The start summary (module docstring); ``trained_steps``: a rollout's trained denoising steps (its step
    plan's); ``start_step``: the step a resumed run continues after."""
    g, per_batch, batches = config.num_generations, config.per_device_batch_size, config.rollout_batches_per_step
    images = per_batch * batches * num_processes  # whole groups (the config checks it)
    steps = config.max_steps - start_step
    lines = [
        "***** Running training *****",
        f"  Num processes = {num_processes}",
        f"  Num requests = {num_requests}",
        f"  Groups per step = {images // g} x G {g} = {images} images",
        f"  Rollout batches per step and process = {batches} (of {per_batch} images, per_device_batch_size)",
        f"  Optimizer updates per step = {config.updates_per_step}",
        f"  Trained denoising steps per rollout = {trained_steps} of "
        f"{config.num_inference_steps} ({config.train_steps})",
        f"  Total steps = {config.max_steps}" + (f" ({steps} to run after step {start_step})" if start_step else ""),
        f"  Total images = {steps * images}" + (" still to sample" if start_step else ""),
    ]
    return "\n".join(lines)


def component_totals(scores: Sequence) -> Dict[str, List[float]]:
    """``{component: [sum, count]}`` over the valid values of a process's :class:`~modeling_miescore.rewards.groups.GroupScores`."""
    totals: Dict[str, List[float]] = {}
    for group in scores:
        for name, values in group.components.items():
            entry = totals.setdefault(name, [0.0, 0])
            for value in values:
                if value is not None and math.isfinite(value):
                    entry[0] += float(value)
                    entry[1] += 1
    return totals


def component_means(per_process: Sequence[Dict[str, List[float]]]) -> Dict[str, Optional[float]]:
    """Each component's mean over every process's :func:`component_totals` (None where no value was valid)."""
    merged: Dict[str, List[float]] = {}
    for totals in per_process:
        for name, (total, count) in totals.items():
            entry = merged.setdefault(name, [0.0, 0])
            entry[0] += total
            entry[1] += count
    return {name: (total / count if count else None) for name, (total, count) in sorted(merged.items())}


def _tag(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_") or "component"


def tracker_values(record: dict) -> Dict[str, float]:
    """The record's numbers under grouped tags (module docstring); ``None`` values are left out."""
    values = {}
    for key, value in record.items():
        if key in TRACKER_TAGS:
            tag = TRACKER_TAGS[key]
        elif key.startswith("seconds_"):
            tag = f"time/{key[len('seconds_'):]}"
        else:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values[tag] = value
    for name, value in (record.get("reward_components") or {}).items():
        if value is not None:
            values[f"reward/{_tag(name)}"] = value
    return values


def step_line(record: dict, max_steps: int) -> str:
    """``step 3/30 reward 0.1234 (std 0.0051) kl 1.2e-04 loss ... | visual_quality 71.2 ... | 2.3 s``."""
    parts = [f"step {record['step']}/{max_steps}", f"reward {record['reward_mean']:.4f}",
             f"(std {record['reward_std']:.4f})"]
    for key in ("kl", "loss", "clipfrac"):
        if isinstance(record.get(key), (int, float)) and math.isfinite(record[key]):
            parts.append(f"{key} {record[key]:.3g}")
    if record.get("reward_failures"):
        parts.append(f"failed rewards {record['reward_failures']}")
    components = [f"{_tag(k)} {v:.4g}" for k, v in (record.get("reward_components") or {}).items() if v is not None]
    if components:
        parts.append("| " + " ".join(components))
    parts.append(f"| {record.get('seconds_step', float('nan')):.2f} s")
    return " ".join(parts)


def log_grid_image(accelerator, path, step: int) -> List[str]:
    """Send the grid PNG at ``path`` to every tracker of ``accelerator`` that takes images (TensorBoard: one HWC
    image under ``samples/grid``; W&B: a ``wandb.Image``); returns the trackers' names."""
    import numpy as np
    from PIL import Image

    image = Image.open(path).convert("RGB")
    sent = []
    for tracker in getattr(accelerator, "trackers", None) or []:
        name = getattr(tracker, "name", type(tracker).__name__)
        if name == "tensorboard":
            tracker.log_images({"samples/grid": np.asarray(image)[None]}, step=step, dataformats="NHWC")
        elif hasattr(tracker, "log_images"):
            tracker.log_images({"samples/grid": [image]}, step=step)
        else:
            continue
        sent.append(name)
    return sent
