"""What an editor-RL run writes besides checkpoints: ``metrics.jsonl``, the sample grids and the adapter's card.

- ``metrics.jsonl``: one JSON object per step (``step``, ``reward_mean``, ``reward_std``, ``kl``, ``ratio_mean``,
  ``clipfrac``, ``approx_kl``, ``zero_std_groups``, ``skipped_groups``, ``reward_failures``, ``loss``,
  ``grad_norm``, ``lr`` and ``seconds_rollout`` / ``seconds_reward`` (the reward's own compute) /
  ``seconds_reward_wait`` (time the trainer waited for it) / ``seconds_update`` / ``seconds_step``), flushed per
  line; also sent to the accelerate trackers.
- ``samples/step-<N>.png``: one row per fixed group, its sources then its edits (ODE sampling with a fixed seed,
  so rows of different steps differ only by training): a person sees reward hacking coming.
- ``README.md``: the adapter's model card (base editor, reward, settings, the run's first/last rewards).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional, Sequence

from ...utils.atomic_files import atomic_write, write_text_atomic
from ...utils.markdown_table import markdown_table

__all__ = ["MetricsLog", "prepare_output_dir", "save_sample_grid", "write_adapter_card"]


def run_inputs(config, rows) -> dict:
    """``{label: path}`` of what a run reads from disk: the dataset, the editor's model folder, in-process reward
    checkpoints and the requests' source image files."""
    import os

    from .reward_specs import reward_model_folders

    inputs = {"dataset": config.dataset if os.path.exists(os.path.expanduser(config.dataset)) else None,
              "model_name_or_path (the editor)": config.model_name_or_path
              if os.path.exists(os.path.expanduser(config.model_name_or_path)) else None,
              **reward_model_folders(config.reward)}
    for row in rows:
        for k, source in enumerate(row.sources):
            if isinstance(source, (str, os.PathLike)):
                inputs[f"source {k + 1} of request {row.id!r}"] = source
    return inputs


def prepare_output_dir(config, rows) -> Path:
    """``config.output_dir`` as a folder this run may write into: never one of its inputs, inside one or holding
    one (:mod:`~modeling_miescore.utils.output_paths`; a run replaces its ``README.md``, ``transformer/`` and
    checkpoints, and ``--overwrite_output_dir`` removes them), created when missing, writable. Raises
    :class:`~modeling_miescore.utils.output_paths.OutputPathError` (exit 2 from the recipe)."""
    import os

    from ...utils.output_paths import OutputPathError, check_folder_apart, ensure_folder

    check_folder_apart(config.output_dir, run_inputs(config, rows), out_label="output_dir")
    folder = ensure_folder(config.output_dir, "output_dir", named=True)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"output_dir '{config.output_dir}' is not writable; pass a folder you can write to")
    return folder


def finite_or_null(value):
    """``value``, or None when it is a float that is NaN or infinite."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class MetricsLog:
    """Append-only ``metrics.jsonl`` (main process) plus the accelerate trackers."""

    def __init__(self, path, accelerator=None):
        self.path = Path(path)
        self.accelerator = accelerator

    def write(self, record: dict) -> None:
        """Append ``record``; a value that is not a finite number (NaN: nothing to average) is written as
        ``null`` and not sent to the trackers, so the file stays strict JSON."""
        record = {k: finite_or_null(v) for k, v in record.items()}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, allow_nan=False) + "\n")
            handle.flush()
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"},
                                 step=int(record["step"]))

    def read(self) -> list:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def _fitted(image, cell: int):
    from PIL import Image

    image = image.convert("RGB")
    scale = cell / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.NEAREST if scale > 1 else Image.LANCZOS)


def save_sample_grid(path, rows: Sequence[tuple], cell: int = 96) -> Path:
    """A PNG of ``rows`` = ``(sources, edits)`` (PIL images), each image fitted into a ``cell`` square; every
    row's edits start in the same column, after a gap."""
    from PIL import Image

    gap = cell // 4
    width = max(len(s) for s, _ in rows)
    columns = width + max(len(e) for _, e in rows)
    canvas = Image.new("RGB", (columns * cell + gap, len(rows) * cell), "white")
    for r, (sources, edits) in enumerate(rows):
        cells = [(k * cell, image) for k, image in enumerate(sources)]
        cells += [(width * cell + gap + k * cell, image) for k, image in enumerate(edits)]
        for x, image in cells:
            thumb = _fitted(image, cell)
            canvas.paste(thumb, (x + (cell - thumb.width) // 2, r * cell + (cell - thumb.height) // 2))
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        canvas.save(handle, format="PNG")
    return path


_CARD = """---
{front}
---

# {title}

A LoRA adapter for `{base}` ({pipeline}) trained with online RL (Flow-GRPO; Liu et al. 2025, arXiv 2505.05470) by
`trainers/flow_grpo_editor.py` of the `miescore` package, rewarded by `{reward}`, following the SpatialReward
paper's setting (arXiv 2602.07458, sec. 5.3, appendix B.2).

## Use

```python
import torch
from diffusers import {pipeline}

pipe = {pipeline}.from_pretrained("{base}", torch_dtype=torch.bfloat16)
pipe.load_lora_weights("path/to/this/folder")
```

or `miescore edit --pipeline {editor} --model {base} --lora path/to/this/folder --input rows.jsonl --out DIR`.

## Training

{settings}

## Run

{metrics}
"""


def write_adapter_card(directory, *, config, pipeline_class: str, metrics: Sequence[dict],
                       lora: Optional[dict] = None) -> Path:
    """``directory/README.md`` for the adapter trained by ``config`` (a :class:`~.config.FlowGRPOConfig`); a card
    is meant to be pushed to the Hub, so every value is shown without credentials (:meth:`~.config.FlowGRPOConfig.
    public_dict`)."""
    import yaml

    shown_config = config.public_dict()
    reward = shown_config["reward"]
    base = config.base_model_id or config.model_name_or_path
    front = {"base_model": base if config.base_model_id else None, "library_name": "diffusers",
             "tags": ["lora", "image-editing", "flow-grpo", "reinforcement-learning", "miescore"],
             "pipeline_tag": "image-to-image"}
    keys = ("editor", "reward", "num_generations", "num_inference_steps", "noise_level", "sde_type", "train_steps",
            "train_fraction", "cfg_scale", "cfg_fraction", "clip_range_low", "clip_range_high", "advantage_clip",
            "std_level", "beta", "kl_keep_dt", "learning_rate", "lora_rank", "lora_alpha", "per_device_batch_size",
            "rollout_batches_per_step", "updates_per_step", "step_weighting", "max_steps", "ema_decay", "seed")
    settings = [[f"`{k}`", f"`{shown_config[k]}`"] for k in keys]
    if lora:
        settings.append(["LoRA targets", f"`{', '.join(lora.get('target_modules', []))}`"])
    if metrics:
        first, last = metrics[0], metrics[-1]
        shown = lambda value: "none" if value is None else f"{value:.4f}"  # noqa: E731 - null: no valid reward
        text = (f"{len(metrics)} steps logged (`metrics.jsonl`). Mean reward at step {first['step']}: "
                f"{shown(first['reward_mean'])}; at step {last['step']}: {shown(last['reward_mean'])}.")
        if last["reward_mean"] is not None:
            front["model-index"] = [{"name": Path(directory).name or "adapter", "results": [{
                "task": {"type": "image-to-image", "name": "image editing"},
                "metrics": [{"type": "reward_mean", "name": f"mean reward ({reward})",
                             "value": round(float(last["reward_mean"]), 6)}]}]}]
    else:
        text = "No steps logged."
    front = {k: v for k, v in front.items() if v is not None}
    card = _CARD.format(front=yaml.safe_dump(front, sort_keys=False).strip(), title=f"Flow-GRPO LoRA for {base}",
                        base=base, pipeline=pipeline_class or config.editor, editor=config.editor,
                        reward=reward, settings=markdown_table(["setting", "value"], settings), metrics=text)
    return write_text_atomic(Path(directory) / "README.md", card)
