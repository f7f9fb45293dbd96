"""What an editor-RL run writes besides checkpoints: ``metrics.jsonl``, the sample grids and the adapter's card.

- ``metrics.jsonl``: one JSON object per step (``step``, ``reward_mean``, ``reward_std``, ``reward_components``
  (each component's mean over the step's valid samples: MIEScore's ``visual_quality`` / ``instruction_following``
  / ``attribute_preservation``, SpatialReward's ``sc`` / ``pq`` / sub-scores, each term of a weighted sum),
  ``kl``, ``ratio_mean``, ``clipfrac``, ``approx_kl``, ``zero_std_groups``, ``skipped_groups``,
  ``reward_failures``, ``loss``, ``grad_norm``, ``lr`` and ``seconds_rollout`` / ``seconds_reward`` (the
  reward's own compute) / ``seconds_reward_wait`` (time the trainer waited for it) / ``seconds_update`` /
  ``seconds_step``), flushed per line; also sent to the accelerate trackers under grouped tags
  (``reward/...``, ``train/...``, ``time/...``: :mod:`.run_reporting`).
- ``samples/step-<N>.png``: one row per fixed request, headed by the step, the request and its instruction: its
  sources (tiled in one cell), then its edits with each edit's reward under it (ODE sampling with a fixed seed,
  so rows of different steps differ only by training): a person sees reward hacking coming. Also logged as an
  image to TensorBoard / W&B.
- ``README.md``: the adapter's model card (:mod:`.adapter_card`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ...utils.atomic_files import atomic_write

__all__ = ["GridRow", "MetricsLog", "check_output_dir", "finite_or_null", "prepare_output_dir", "run_inputs",
           "save_sample_grid"]


def run_inputs(config, rows) -> dict:
    """``{label: path}`` of what a run reads from disk: the dataset, the editor's model folder, in-process reward
    checkpoints and the requests' source image files."""
    import os

    from ...rewards.specs import reward_model_folders

    inputs = {"dataset": config.dataset if os.path.exists(os.path.expanduser(config.dataset)) else None,
              "model_name_or_path (the editor)": config.model_name_or_path
              if os.path.exists(os.path.expanduser(config.model_name_or_path)) else None,
              **reward_model_folders(config.reward)}
    for row in rows:
        for k, source in enumerate(row.sources):
            if isinstance(source, (str, os.PathLike)):
                inputs[f"source {k + 1} of request {row.id!r}"] = source
    return inputs


def check_output_dir(config, rows) -> None:
    """``config.output_dir`` is never one of the run's inputs, inside one or holding one
    (:mod:`~modeling_miescore.utils.output_paths`; a run replaces its ``README.md``, ``transformer/`` and
    checkpoints, and ``--overwrite_output_dir`` removes them); nothing is created (the trainer checks this before
    it loads anything). Raises :class:`~modeling_miescore.utils.output_paths.OutputPathError`."""
    from ...utils.output_paths import check_folder_apart

    check_folder_apart(config.output_dir, run_inputs(config, rows), out_label="output_dir")


def prepare_output_dir(config, rows) -> Path:
    """``config.output_dir`` as a folder this run may write into: :func:`check_output_dir`, created when missing,
    writable. Raises :class:`~modeling_miescore.utils.output_paths.OutputPathError` (exit 2 from the recipe)."""
    import os

    from ...utils.output_paths import OutputPathError, ensure_folder

    check_output_dir(config, rows)
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
            from .run_reporting import tracker_values

            self.accelerator.log(tracker_values(record), step=int(record["step"]))

    def read(self) -> list:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class GridRow:
    """One row of a sample grid: a fixed request's label (its id and instruction), its sources, the edits made
    at this step and each edit's reward (None where the reward failed; ``failures`` the reasons)."""

    label: str
    sources: Sequence
    edits: Sequence
    rewards: Sequence[Optional[float]] = ()
    failures: Sequence[Optional[str]] = ()


def _fitted(image, width: int, height: int):
    from PIL import Image

    image = image.convert("RGB")
    scale = min(width / image.width, height / image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.NEAREST if scale > 1 else Image.LANCZOS)


def _paste_fitted(canvas, image, box) -> None:
    x, y, width, height = box
    thumb = _fitted(image, width, height)
    canvas.paste(thumb, (x + (width - thumb.width) // 2, y + (height - thumb.height) // 2))


def _source_boxes(count: int, x: int, y: int, cell: int) -> list:
    """``count`` sources tiled into one ``cell`` square (1: whole; 2: side by side; 3-4: 2 x 2; ...), so a
    one-source row has no empty cell and every row's edits start in the same column."""
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    width, height = cell // columns, cell // rows
    return [(x + (k % columns) * width, y + (k // columns) * height, width - 1, height - 1) for k in range(count)]


def _clipped(draw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def save_sample_grid(path, rows: Sequence[GridRow], *, step: int, cell: int = 128) -> Path:
    """A PNG a person can read: per row a header (``step N``, the request, its instruction), the sources tiled in
    one cell, a divider, then the edits with a gap between them and each edit's reward under it."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=max(10, cell // 10))
    pad, gap, divider = 6, 8, 24
    text_h = font.size + 6
    edits = max(len(r.edits) for r in rows)
    width = pad + cell + divider + edits * cell + (edits - 1) * gap + pad
    row_h = text_h + cell + text_h + gap
    canvas = Image.new("RGB", (width, pad + len(rows) * row_h), "white")
    draw = ImageDraw.Draw(canvas)
    for r, row in enumerate(rows):
        top = pad + r * row_h
        draw.text((pad, top), _clipped(draw, f"step {step} | {row.label}", font, width - 2 * pad), fill="black",
                  font=font)
        image_top = top + text_h
        for box, source in zip(_source_boxes(len(row.sources), pad, image_top, cell), row.sources):
            _paste_fitted(canvas, source, box)
        draw.text((pad, image_top + cell + 2), f"{len(row.sources)} source(s)", fill="dimgray", font=font)
        line_x = pad + cell + divider // 2
        draw.line([(line_x, image_top), (line_x, image_top + cell)], fill="gray", width=2)
        for k, edit in enumerate(row.edits):
            x = pad + cell + divider + k * (cell + gap)
            _paste_fitted(canvas, edit, (x, image_top, cell, cell))
            reward = row.rewards[k] if k < len(row.rewards) else None
            failure = row.failures[k] if k < len(row.failures) else None
            caption = (f"reward {reward:.4f}" if reward is not None
                       else f"reward failed ({failure})" if failure else "")
            draw.text((x, image_top + cell + 2), _clipped(draw, caption, font, cell), fill="black", font=font)
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        canvas.save(handle, format="PNG")
    return path
