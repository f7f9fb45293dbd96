"""Exporting a trained MIEScore: a merged Hub-native checkpoint (weights, config with ``auto_map``, the Hub code,
processor) and, for LoRA runs, the PEFT adapter, each with a generated model card (README.md)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from ..data.schema import DIMENSIONS
from ..utils.atomic_files import write_text_atomic
from .miescore_model import load_base_model
from .miescore_trainer import DIM_NAMES

__all__ = ["ModelCardInfo", "export_model", "render_model_card"]

# (dimension abbreviation, label) in the head order
_DIMENSION_LABELS = tuple(zip(DIM_NAMES, (d.replace("_", " ") for d in DIMENSIONS)))


@dataclass
class ModelCardInfo:
    """What the generated model card states. ``metrics`` holds eval metrics (``eval_srcc_vq``, ...)."""

    model_name: str = "MIEScore"
    base_model: str | None = None
    dataset: str | None = None
    dataset_split_sizes: dict[str, int] = field(default_factory=dict)
    eval_split: str = "validation"
    metrics: dict[str, float] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    license: str = "apache-2.0"
    tags: list[str] = field(default_factory=lambda: ["miescore", "image-editing", "image-quality-assessment",
                                                     "reward-model", "multi-image"])
    notes: str = ""


def _card_metadata(info: ModelCardInfo, adapter: bool):
    from huggingface_hub import EvalResult, ModelCardData

    results = []
    for dim, label in _DIMENSION_LABELS:
        for metric in ("srcc", "plcc"):
            value = info.metrics.get(f"eval_{metric}_{dim}", info.metrics.get(f"{metric}_{dim}"))
            if value is None or not math.isfinite(float(value)):
                continue
            results.append(EvalResult(
                task_type="image-text-to-text", task_name="Multi-source image edit assessment",
                dataset_type=info.dataset or "mie-bench", dataset_name="MIE-Bench", dataset_split=info.eval_split,
                metric_type=metric, metric_value=round(float(value), 4), metric_name=f"{metric.upper()} ({label})",
            ))
    tags = list(info.tags) + (["lora", "peft"] if adapter else [])
    if adapter and info.base_model:
        tags.append(f"base_model:adapter:{info.base_model}")
    return ModelCardData(
        license=info.license,
        library_name="peft" if adapter else "transformers",
        # No Hub task means "scores an image-text input"; image-text-to-text is the closest input modality.
        pipeline_tag="image-text-to-text",
        base_model=info.base_model,
        datasets=[info.dataset] if info.dataset else None,
        tags=tags,
        metrics=["spearmanr", "pearsonr"],
        model_name=info.model_name,
        eval_results=results or None,
    )


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list, tuple)):
        return "`" + json.dumps(v) + "`"
    return f"`{v}`" if isinstance(v, str) else str(v)


def _usage_lines(info: ModelCardInfo, adapter: bool) -> list[str]:
    if adapter:
        base = info.hyperparameters.get("base_checkpoint") or info.base_model
        return [
            "This folder is a PEFT LoRA adapter (the regression head is stored in full). Load the base scorer with",
            "`trust_remote_code=True`, then the adapter (`AutoPeftModel` cannot resolve the remote class):",
            "",
            "```python",
            "from peft import PeftModel",
            "from transformers import AutoModel",
            f"base = AutoModel.from_pretrained({base!r}, trust_remote_code=True)",
            "model = PeftModel.from_pretrained(base, 'path/to/this/adapter').merge_and_unload()",
            "```",
        ]
    return [
        "```python",
        "from transformers import AutoModel",
        "model = AutoModel.from_pretrained('path/or/repo', trust_remote_code=True)",
        "print(model.score(['source1.jpg', 'source2.jpg'], 'edited.jpg', 'Put the cat from image 2 on the sofa'))",
        "# {'visual_quality': ..., 'instruction_following': ..., 'attribute_preservation': ..., 'overall': ...}",
        "```",
        "",
        "Or with the `miescore` package: `miescore score --model path/or/repo --source s1.jpg --source s2.jpg "
        "--edited e.jpg --instruction '...'`.",
    ]


def _training_lines(info: ModelCardInfo) -> list[str]:
    lines = ["", "## Training data", ""]
    if info.dataset:
        lines.append(f"Fine-tuned on `{info.dataset}` (MIE-Bench format: MOS per dimension from 15 raters, "
                     "BT.500-screened; labels are MOS / 100).")
    if info.dataset_split_sizes:
        lines += ["", "| split | rows |", "|---|---|"]
        lines += [f"| {split} | {n} |" for split, n in info.dataset_split_sizes.items()]
    lines += ["", "## Training procedure", ""]
    lines.append(
        "Multi-dimensional supervised fine-tuning (MIEScore paper, section \"Multi-Dimensional Supervised "
        "Fine-Tuning\"): L = lambda_h * Huber + lambda_r * rank + lambda_p * (1 - PLCC) per dimension, the rank and "
        "PLCC terms computed against cross-batch memory queues; the rank/PLCC weights are raised in the final stage."
    )
    if info.hyperparameters:
        lines += ["", "### Hyper-parameters", "", "| parameter | value |", "|---|---|"]
        lines += [f"| {key} | {_fmt_value(value)} |" for key, value in info.hyperparameters.items()]
    return lines


def _evaluation_lines(info: ModelCardInfo) -> list[str]:
    lines = ["", f"## Evaluation ({info.eval_split} split)", ""]
    shown = {k: v for k, v in info.metrics.items() if isinstance(v, (int, float))}
    if not shown:
        return lines + ["No evaluation metrics were recorded."]
    lines += ["| dimension | SRCC | PLCC |", "|---|---|---|"]
    for dim, label in _DIMENSION_LABELS:
        s = shown.get(f"eval_srcc_{dim}", shown.get(f"srcc_{dim}"))
        p = shown.get(f"eval_plcc_{dim}", shown.get(f"plcc_{dim}"))
        lines.append(f"| {label} | {_fmt_value(float(s)) if s is not None else '-'} | "
                     f"{_fmt_value(float(p)) if p is not None else '-'} |")
    others = {k: v for k, v in shown.items() if "srcc_" not in k and "plcc_" not in k}
    if others:
        lines += ["", "Other metrics: " + ", ".join(f"{k} = {_fmt_value(float(v))}" for k, v in others.items())]
    return lines


def render_model_card(info: ModelCardInfo, adapter: bool = False) -> str:
    """Model card (README.md) text: YAML metadata (license, library, pipeline tag, base model, datasets, tags,
    model-index) followed by usage, training data, hyper-parameters and validation metrics."""
    from huggingface_hub import ModelCard

    lines = [f"# {info.model_name}", "",
             "A MIEScore evaluator for multi-source image editing: a Qwen3-VL backbone with a 3-output regression "
             "head predicting visual quality (VQ), instruction following (IF) and attribute preservation (AP) on the "
             "0-100 MOS scale, plus the overall score VQ^0.3 * IF^0.4 * AP^0.3 (MIEScore paper, eq. 2).",
             "", "## Usage", ""]
    lines += _usage_lines(info, adapter) + _training_lines(info) + _evaluation_lines(info)
    if info.notes:
        lines += ["", "## Notes", "", info.notes]
    lines += ["", "## Citation", "", "MIEScore / MIE-Bench (multi-source image editing evaluation).", ""]
    card = ModelCard.from_template(_card_metadata(info, adapter),
                                   template_str="---\n{{ card_data }}\n---\n\n{{ body }}\n", body="\n".join(lines))
    return str(card)


def export_model(base_model: str, adapter_dir: str | os.PathLike | None, output_dir: str | os.PathLike, *,
                 card: ModelCardInfo | None = None, dtype: torch.dtype | str | None = None,
                 base_config_overrides: Mapping[str, Any] | None = None, merged_name: str = "merged",
                 adapter_name: str = "adapter") -> dict[str, str]:
    """Write ``output_dir/merged`` (a Hub-native MIEScore checkpoint: weights, config with ``auto_map``, code,
    processor, README.md) and, for LoRA runs, ``output_dir/adapter`` (the PEFT adapter + README.md).

    ``adapter_dir`` is a folder written by ``PeftModel.save_pretrained`` / ``trainer.save_model`` (LoRA run) or
    a full MIEScore checkpoint (full fine-tuning; then no adapter folder is written). The base is re-loaded on
    CPU from ``base_model`` so that the merge is the same on one GPU or under DeepSpeed ZeRO-3, where the
    in-memory weights are partitioned. Returns ``{"merged": path, "adapter": path or None}``.
    """
    from peft import PeftModel

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged_dir, adapter_out = out / merged_name, out / adapter_name
    card = card or ModelCardInfo(base_model=base_model)
    adapter_dir = Path(adapter_dir) if adapter_dir is not None else None
    is_adapter = adapter_dir is not None and (adapter_dir / "adapter_config.json").is_file()
    overrides = dict(base_config_overrides or {})
    if is_adapter:
        with _outside_zero3_init():
            model, processor = load_base_model(base_model, dtype=dtype, **overrides)
            model = PeftModel.from_pretrained(model, os.fspath(adapter_dir)).merge_and_unload()
        if adapter_out.exists():
            shutil.rmtree(adapter_out)
        shutil.copytree(adapter_dir, adapter_out, ignore=shutil.ignore_patterns(
            "optimizer.pt", "scheduler.pt", "rng_state*", "trainer_state.json", "training_args.bin", "loss_state*"))
        write_text_atomic(adapter_out / "README.md", render_model_card(card, adapter=True))
    else:
        source = adapter_dir if adapter_dir is not None else base_model
        with _outside_zero3_init():
            model, processor = load_base_model(os.fspath(source), dtype=dtype, **overrides)
    model.processor = processor
    if merged_dir.exists():
        shutil.rmtree(merged_dir)
    model.save_pretrained(merged_dir)
    write_text_atomic(merged_dir / "README.md", render_model_card(card, adapter=False))
    return {"merged": str(merged_dir), "adapter": str(adapter_out) if is_adapter else None}


@contextlib.contextmanager
def _outside_zero3_init():
    """Load whole (unpartitioned) weights on this process even while a ZeRO-3 run is active.

    Under ZeRO-3 the training arguments register their DeepSpeed config globally, and ``from_pretrained`` then
    builds every model inside ``deepspeed.zero.Init``, which leaves each process only its shard (empty tensors on
    the others). The export re-loads the base from disk, so it hides that registration while it loads.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    registered = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = registered

