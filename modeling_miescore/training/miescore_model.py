"""The model side of MIEScore fine-tuning: the scorer to train (from a MIEScore checkpoint or a plain VLM one: Qwen3-VL
as in the paper, Qwen2.5-VL, InternVL3.5 ``-HF``, ...), the paper's LoRA (supplement "Details of Training
Configuration": r = 64, alpha = 32, dropout 0, on the language model's attention and MLP projections; the regression
head trained in full) and the other ways of tuning the backbone that the ablation compares (Table 5)."""

from __future__ import annotations

import os
import re
from typing import Sequence

from ..hub.backbone_families import is_vlm_model_type
from ..hub.errors import MIEScoreInputError
from ..scoring.loading import read_checkpoint_config
from ..hub.processing_miescore import load_stock_processor

__all__ = ["BACKBONE_TUNING", "LORA_PROJECTIONS", "apply_lora", "language_model_lora_targets", "language_model_name",
           "load_base_model", "make_lora_config", "set_backbone_tuning"]

# Supplement "Details of Training Configuration": LoRA on the attention and MLP projections of the language
# model only; the vision tower stays frozen.
LORA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# lora: the paper; frozen: only the head trains (Table 5 row 2, "w/o LoRA"); full: every weight trains.
BACKBONE_TUNING = ("lora", "frozen", "full")


def language_model_name(model) -> str:
    """Module path of the backbone's language model inside ``model`` (e.g. ``backbone.language_model`` for Qwen-VL
    and InternVL), found by identity with ``backbone.get_decoder()``, so it holds for any family."""
    decoder = model.backbone.get_decoder()
    if decoder is model.backbone:
        raise ValueError(f"cannot tell the language model of {type(model.backbone).__name__} apart from its vision "
                         "tower; pass lora_target_modules explicitly")
    for name, module in model.named_modules():
        if module is decoder:
            return name
    raise ValueError("the backbone's language model is not a submodule of the scorer")


def language_model_lora_targets(model) -> str:
    """PEFT ``target_modules`` regex (matched with ``re.fullmatch`` against module names) of the paper's LoRA: the
    q/k/v/o/gate/up/down projections of the backbone's language model, never its vision tower."""
    return rf".*{re.escape(language_model_name(model))}\..*\.({'|'.join(LORA_PROJECTIONS)})"


def load_base_model(name_or_path: str, dtype=None, attn_implementation: str | None = None, **config_kwargs):
    """``(MIEScoreModel, processor)`` from a MIEScore checkpoint, or a fresh scorer from a plain VLM one;
    ``dtype``: a ``torch.dtype``, its name or ``"auto"`` (None: transformers' default).

    ``config_kwargs`` (``max_pixels``, ``min_pixels``, ``head_hidden_size``, ...) override/define config fields.
    The package's own class is used, so ``save_pretrained`` copies the Hub files (``auto_map``) into exports.
    """
    import torch  # deferred: the recipes read this module's LoRA settings without loading torch

    from ..hub.modeling_miescore import MIEScoreModel  # deferred: loads transformers

    if isinstance(dtype, str):
        dtype = None if dtype == "auto" else getattr(torch, dtype)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model_type = read_checkpoint_config(os.fspath(name_or_path)).get("model_type")
    if model_type == "miescore":
        model = MIEScoreModel.from_pretrained(name_or_path, **kwargs)
        head = config_kwargs.pop("score_head", model.config.score_head)
        if head != model.config.score_head:
            raise MIEScoreInputError(f"'{name_or_path}' is a MIEScore checkpoint with score_head="
                                     f"{model.config.score_head!r}; start a {head!r} scorer from its plain backbone")
        for key, value in config_kwargs.items():
            setattr(model.config, key, value)
        model.config.validate_scoring_fields()
        processor = load_stock_processor(name_or_path)  # never runs code from the checkpoint, never prompts
    elif is_vlm_model_type(model_type):
        processor = load_stock_processor(name_or_path)
        model = MIEScoreModel.from_backbone(name_or_path, processor=processor, dtype=dtype, **config_kwargs)
        if attn_implementation:
            model.set_attn_implementation(attn_implementation)
    else:
        raise MIEScoreInputError(
            f"'{name_or_path}' has model_type={model_type!r}; pass a MIEScore checkpoint or a transformers-native "
            "image-text-to-text checkpoint (e.g. Qwen/Qwen3-VL-8B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct, "
            "OpenGVLab/InternVL3_5-8B-HF)"
        )
    model.processor = processor
    return model, processor


def make_lora_config(r: int = 64, alpha: int = 32, dropout: float = 0.0, target_modules: str | None = None,
                     modules_to_save: Sequence[str] = ("head",)):
    """PEFT ``LoraConfig`` of the paper (supplement: r = 64, alpha = 32, dropout 0, LM projections only).

    ``target_modules`` None: the backbone's language-model projections (:func:`language_model_lora_targets`),
    filled in by :func:`apply_lora`. The regression head is in ``modules_to_save``: trained in full and stored in
    the adapter.
    """
    from peft import LoraConfig

    return LoraConfig(r=int(r), lora_alpha=int(alpha), lora_dropout=float(dropout), target_modules=target_modules,
                      modules_to_save=list(modules_to_save), bias="none")


def apply_lora(model, lora_config):
    """Wrap ``model`` with PEFT; returns the ``PeftModel``. Checks that only the intended modules train."""
    from peft import get_peft_model

    if lora_config.target_modules is None:
        lora_config.target_modules = language_model_lora_targets(model)
    peft_model = get_peft_model(model, lora_config)
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    if not any("lora_" in n for n in names):
        raise ValueError(f"LoRA matched no module with target_modules={lora_config.target_modules!r}")
    return peft_model


def set_backbone_tuning(model, tuning: str, lora_config=None):
    """Make the scorer trainable as ``tuning`` says; returns the model to train (a ``PeftModel`` for ``lora``).

    ``lora``: the paper's LoRA (``lora_config``, default :func:`make_lora_config`); ``frozen``: only the head
    trains (Table 5 row 2, "w/o LoRA": supervised fine-tuning of the head on a frozen backbone); ``full``: every
    weight trains.
    """
    if tuning not in BACKBONE_TUNING:
        raise MIEScoreInputError(f"backbone_tuning must be one of {BACKBONE_TUNING}, got {tuning!r}")
    if tuning == "lora":
        return apply_lora(model, lora_config or make_lora_config())
    for name, param in model.named_parameters():
        param.requires_grad_(tuning == "full" or name.startswith("head."))
    if not any(p.requires_grad for p in model.parameters()):
        raise MIEScoreInputError(f"backbone_tuning={tuning!r} leaves nothing to train (a scorer without head has no "
                                 "head to train on a frozen backbone)")
    return model
