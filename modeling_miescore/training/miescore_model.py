"""The model side of MIEScore fine-tuning: the scorer to train (from a MIEScore or a plain Qwen3-VL checkpoint) and
the paper's LoRA (supplement "Details of Training Configuration": r = 64, alpha = 32, dropout 0, on the language
model's attention and MLP projections; the regression head trained in full)."""

from __future__ import annotations

import os
from typing import Sequence

import torch

from ..image_io import MIEScoreInputError

__all__ = ["LM_LORA_TARGETS", "apply_lora", "load_base_model", "make_lora_config"]

# Supplement "Details of Training Configuration": LoRA on the attention and MLP projections of the language
# model only; the vision tower stays frozen. The regex is matched with re.fullmatch against module names such
# as "backbone.language_model.layers.3.self_attn.q_proj" (under PEFT, with a "base_model.model." prefix).
LM_LORA_TARGETS = r".*backbone\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


def load_base_model(name_or_path: str, dtype: torch.dtype | str | None = None, attn_implementation: str | None = None,
                    **config_kwargs):
    """``(MIEScoreModel, processor)`` from a MIEScore checkpoint, or a fresh scorer from a plain Qwen3-VL one.

    ``config_kwargs`` (``max_pixels``, ``min_pixels``, ``head_hidden_size``, ...) override/define config fields.
    The package's own class is used, so ``save_pretrained`` copies the Hub files (``auto_map``) into exports.
    """
    from ..scoring.loading import read_checkpoint_config
    from ..processing_miescore import load_stock_processor
    from ..modeling_miescore import MIEScoreModel

    if isinstance(dtype, str):
        dtype = None if dtype == "auto" else getattr(torch, dtype)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model_type = read_checkpoint_config(os.fspath(name_or_path)).get("model_type")
    if model_type == "miescore":
        model = MIEScoreModel.from_pretrained(name_or_path, **kwargs)
        for key, value in config_kwargs.items():
            setattr(model.config, key, value)
        model.config.validate_scoring_fields()
        processor = load_stock_processor(name_or_path)  # never runs code from the checkpoint, never prompts
    elif model_type in ("qwen3_vl", "qwen3_vl_moe"):
        processor = load_stock_processor(name_or_path)
        model = MIEScoreModel.from_backbone(name_or_path, processor=processor, dtype=dtype, **config_kwargs)
        if attn_implementation:
            model.set_attn_implementation(attn_implementation)
    else:
        raise MIEScoreInputError(
            f"'{name_or_path}' has model_type={model_type!r}; pass a MIEScore checkpoint or a Qwen3-VL checkpoint "
            "(e.g. Qwen/Qwen3-VL-8B-Instruct)"
        )
    model.processor = processor
    return model, processor


def make_lora_config(r: int = 64, alpha: int = 32, dropout: float = 0.0, target_modules: str = LM_LORA_TARGETS,
                     modules_to_save: Sequence[str] = ("head",)):
    """PEFT ``LoraConfig`` of the paper (supplement: r = 64, alpha = 32, dropout 0, LM projections only).

    The regression head is in ``modules_to_save``: trained in full and stored in the adapter.
    """
    from peft import LoraConfig

    return LoraConfig(r=int(r), lora_alpha=int(alpha), lora_dropout=float(dropout), target_modules=target_modules,
                      modules_to_save=list(modules_to_save), bias="none")


def apply_lora(model, lora_config):
    """Wrap ``model`` with PEFT; returns the ``PeftModel``. Checks that only the intended modules train."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config)
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    if not any("lora_" in n for n in names):
        raise ValueError(f"LoRA matched no module with target_modules={lora_config.target_modules!r}")
    return peft_model
