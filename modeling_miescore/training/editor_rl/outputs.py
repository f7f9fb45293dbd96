"""What an editor-RL run writes and reports besides checkpoints: the output folder, ``metrics.jsonl``, the sample
grids, the start summary and per-step line, the trackers' tags, the rollout records and ``run.json``'s
``"sampling"``.

- ``metrics.jsonl`` (:class:`MetricsLog`): one JSON object per step (``step``, ``reward_mean``, ``reward_std``,
  ``reward_components`` (each component's mean over the step's valid samples), ``kl``, ``ratio_mean``,
  ``clipfrac``, ``approx_kl``, ``zero_std_groups``, ``skipped_groups``, ``reward_failures``, ``loss``,
  ``grad_norm``, ``lr`` and ``seconds_rollout`` / ``seconds_reward`` (the reward's own compute) /
  ``seconds_reward_wait`` (time the trainer waited for it) / ``seconds_update`` / ``seconds_step``), flushed per
  line; also sent to the trackers as grouped tags (:func:`tracker_values`: ``reward/...``, ``train/...``,
  ``time/...``, so TensorBoard and W&B show three panels).
- ``samples/step-<N>.png`` (:func:`save_sample_grid`): one row per fixed request, headed by the step, the request
  and its instruction: its sources, then its edits with each edit's reward under it (ODE sampling with a fixed
  seed, so rows of different steps differ only by training): a person sees reward hacking coming. Also logged as
  an image to the trackers (:func:`log_grid_image`).
- :func:`training_summary`: diffusers' ``***** Running training *****`` block (``examples/dreambooth/
  train_dreambooth_lora_flux.py`` @ diffusers v0.42) in this trainer's terms: groups x G per step, rollout
  batches, optimizer updates per step, trained denoising steps per rollout, total images; :func:`step_line`: one
  log line per step (the progress bar's stand-in with ``--no_progress``).
- ``rollouts/`` (:class:`RolloutLog`, opt-in, ``save_rollouts_steps: N``): every N-th step,
  ``step-<N>/g<group>-e<k>.png`` (the G edits of each group, ``group`` its index over all processes),
  ``sources/<group key>-<k>.png`` (each group's sources as the reward saw them) and ``rollouts.jsonl``: one line per
  edit in the ``score-batch`` input format, paths relative to the file, ``{"id", "sources", "edited",
  "instruction"}``, plus ``step``, ``rank``, ``group``, ``sample``, ``key``, ``request``, ``reward`` (None where it
  failed), ``failure``, ``advantage`` (None where the sample takes no part in the loss) and ``components``. So
  ``miescore score-batch --input output_dir/rollouts/rollouts.jsonl`` re-scores a run's edits. On ``--resume`` the
  lines of steps after the checkpoint are dropped. With several machines, ``output_dir`` must be a shared folder.
- ``run.json``'s ``"sampling"`` (:data:`SAMPLING_FIELDS`, :func:`sampling_record`, :func:`read_sampling`): how the
  run samples, so ``miescore edit --lora RUN`` edits as it was trained without any option copied by hand: the
  editor and its base model, the editor options, the resolution, T, the resolved CFG scale and schedule
  (:class:`~.schedule.SamplingSchedule`), the dtype; each field with the ``miescore edit`` option that overrides it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ...hub.errors import MIEScoreInputError
from ...utils.atomic_files import atomic_write
from ...rewards.specs import reward_model_folders
from ...utils.output_paths import check_folder_apart, OutputPathError, ensure_folder
from ...scoring.loading import model_reference
from ...utils.credentials import redact
from .checkpoints import read_run_file, truncate_metrics

__all__ = ["GridRow", "MetricsLog", "check_output_dir", "finite_or_null", "prepare_output_dir", "run_inputs",
           "save_png", "save_sample_grid", "save_sources", "SAMPLING_FIELDS", "read_sampling", "sampling_record", "TRACKER_TAGS",
           "component_means", "component_totals", "log_grid_image", "step_line", "tracker_values", "training_summary",
           "RolloutLog"]


def run_inputs(config, rows) -> dict:
    """``{label: path}`` of what a run reads from disk: the dataset, the editor's model folder, in-process reward
    checkpoints and the requests' source image files."""
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
    check_folder_apart(config.output_dir, run_inputs(config, rows), out_label="output_dir")


def prepare_output_dir(config, rows) -> Path:
    """``config.output_dir`` as a folder this run may write into: :func:`check_output_dir`, created when missing,
    writable. Raises :class:`~modeling_miescore.utils.output_paths.OutputPathError` (exit 2 from the recipe)."""
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
            self.accelerator.log(tracker_values(record), step=int(record["step"]))

    def read(self) -> List[dict]:
        """Every record of the file, in order (none when there is no file yet)."""
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


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
    return save_png(path, canvas)


# field -> the `miescore edit` option that overrides it
SAMPLING_FIELDS = {
    "editor": "--pipeline",
    "model_name_or_path": "--model",
    "base_model_id": None,
    "editor_options": "--editor-options",
    "height": "--editor-options",
    "width": "--editor-options",
    "num_inference_steps": "--steps",
    "cfg_scale": "--cfg-scale",
    "cfg_fraction": "--cfg-fraction",
    "noise_level": None,  # the rollouts' SDE; `edit` samples ODE unless --noise-level is given
    "sde_type": "--sde-type",
    "last_step": "--last-step",
    "dtype": "--dtype",
    "finetuning": None,
}


def sampling_record(config, editor) -> dict:
    """``{"sampling": {...}}`` for ``run.json``: :data:`SAMPLING_FIELDS` of ``config`` (a
    :class:`~.config.FlowGRPOConfig`) and ``editor`` (the loaded :class:`~.editors.EditorAdapter`)."""
    shown = config.public_dict()  # run.json is shown and pushed: no credential in it
    record = {"editor": shown["editor"], "model_name_or_path": redact(model_reference(config.model_name_or_path)),
              "base_model_id": shown["base_model_id"], "editor_options": dict(shown["editor_options"] or {}),
              "height": getattr(editor, "height", None), "width": getattr(editor, "width", None),
              "num_inference_steps": config.num_inference_steps, "cfg_scale": float(editor.cfg_scale),
              "cfg_fraction": config.cfg_fraction, "noise_level": config.noise_level, "sde_type": config.sde_type,
              "last_step": config.last_step, "dtype": config.dtype, "finetuning": config.finetuning}
    return {"sampling": record}


def read_sampling(run_dir) -> Optional[dict]:
    """The ``"sampling"`` record of the run in ``run_dir``, or None when the folder holds no ``run.json`` with one
    (an adapter from elsewhere, or a run written before runs recorded it)."""
    stored = read_run_file(run_dir)
    sampling = (stored or {}).get("sampling")
    if sampling is None:
        return None
    if not isinstance(sampling, dict) or not sampling.get("editor") or not sampling.get("model_name_or_path"):
        raise MIEScoreInputError(f"'{Path(run_dir) / 'run.json'}': its sampling record names no editor or base "
                                 "model; pass --pipeline and --model")
    return sampling


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
    """``{component: [sum, count]}`` over the valid values of a process's :class:`~.rewards.groups.GroupScores`."""
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
        elif key.startswith("eval/"):  # the evals' rows (.evaluation): eval/<reward>[/ci_low ...]
            tag = key
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


def log_grid_image(accelerator, path, step: int, tag: str = "samples/grid") -> List[str]:
    """Send the PNG at ``path`` (a grid; the eval curves) to every tracker of ``accelerator`` that takes images
    (TensorBoard: one HWC image under ``tag``; W&B: a ``wandb.Image``); returns the trackers' names."""
    import numpy as np
    from PIL import Image

    image = Image.open(path).convert("RGB")
    sent = []
    for tracker in getattr(accelerator, "trackers", None) or []:
        name = getattr(tracker, "name", type(tracker).__name__)
        if name == "tensorboard":
            tracker.log_images({tag: np.asarray(image)[None]}, step=step, dataformats="NHWC")
        elif hasattr(tracker, "log_images"):
            tracker.log_images({tag: [image]}, step=step)
        else:
            continue
        sent.append(name)
    return sent


def save_png(path, image) -> Path:
    """``image`` (PIL) as a PNG at ``path``, written atomically."""
    with atomic_write(path, "wb") as handle:
        image.save(handle, format="PNG")
    return Path(path)


def save_sources(folder: Path, stem: str, images: Sequence) -> List[str]:
    """``sources/<stem>-<k>.png`` under ``folder`` for each of ``images`` (each written once); their names."""
    names = [f"sources/{stem}-{k}.png" for k in range(len(images))]
    for name, image in zip(names, images):
        if not (folder / name).is_file():
            save_png(folder / name, image)
    return names


class RolloutLog:
    """``output_dir/rollouts/`` (module docstring). :meth:`records` on every process (writes its images),
    :meth:`append` on the main process with every process's records."""

    def __init__(self, output_dir, every: int):
        self.folder = Path(output_dir) / "rollouts"
        self.path = self.folder / "rollouts.jsonl"
        self.every = int(every)

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def records(self, step: int, rank: int, rollouts: Sequence, scores: Sequence, advantages: Sequence,
                groups: Sequence[int], requests: Sequence[str]) -> List[dict]:
        """Write this process's edits of ``step`` and return their records (one per edit, in order).
        ``groups``: each rollout's run-wide group index; ``requests``: each rollout's request id."""
        out = []
        for rollout, score, advantage, group, request in zip(rollouts, scores, advantages, groups, requests):
            sources = save_sources(self.folder, rollout.key, rollout.sources)
            for k, image in enumerate(rollout.images):
                member = rollout.first_member + k  # a split group's piece starts at its first member
                edited = f"step-{step:06d}/g{group:05d}-e{member:02d}.png"
                save_png(self.folder / edited, image)
                out.append({"id": f"s{step:06d}-g{group:05d}-e{member:02d}", "sources": sources, "edited": edited,
                            "instruction": rollout.instruction, "step": step, "rank": rank, "group": group,
                            "sample": member, "key": rollout.key, "request": request, "reward": score.rewards[k],
                            "failure": score.failures[k], "advantage": advantage[k],
                            "components": {name: values[k] for name, values in score.components.items()}})
        return out

    def append(self, records: Sequence[dict]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, default=_plain) + "\n" for r in records))
            handle.flush()

    def truncate(self, last_step: int) -> None:
        """Drop the lines of steps after ``last_step`` (resume)."""
        truncate_metrics(self.path, last_step)

    read = MetricsLog.read  # the same JSONL reading


def _plain(value) -> Optional[float]:
    """Numbers JSON does not know (numpy / torch scalars) as floats."""
    return float(value)
