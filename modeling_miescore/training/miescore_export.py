"""Exporting a trained MIEScore: a merged Hub-native checkpoint (weights, config with ``auto_map``, the Hub code,
processor) and, for LoRA runs, the PEFT adapter with what its card's recipe needs (``card_inputs``), each with a
model card (README.md, rendered by the Hub file ``model_card``)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import torch

from ..hub.model_card import ModelCardInfo, hub_repo_id
from .card_inputs import local_folder, write_adapter_card, write_card
from .miescore_model import load_base_model
from ..scoring.loading import read_checkpoint_config

__all__ = ["export_model"]


def export_model(base_model: str, adapter_dir: str | os.PathLike | None, output_dir: str | os.PathLike, *,
                 card: ModelCardInfo | None = None, dtype: torch.dtype | str | None = None,
                 base_config_overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Write ``output_dir/merged`` (a Hub-native MIEScore checkpoint: weights, config with ``auto_map``, code,
    processor, README.md) and, for LoRA runs, ``output_dir/adapter`` (the PEFT adapter, its processor, the run's
    ``base_config_overrides`` as ``base_config_overrides.json``, the model code and README.md: the card's recipe
    loads the base with these overrides, so base + adapter scores as ``merged`` does; without a Hub id for the
    base, the recipe names this adapter folder and the local base, so it runs as written on this machine).

    ``adapter_dir`` is a folder written by ``PeftModel.save_pretrained`` / ``trainer.save_model`` (LoRA run) or
    a full MIEScore checkpoint (full fine-tuning; then no adapter folder is written). The base is re-loaded on
    CPU from ``base_model`` so that the merge is the same on one GPU or under DeepSpeed ZeRO-3, where the
    in-memory weights are partitioned. Returns ``{"merged": path, "adapter": path or None}``.
    """
    from peft import PeftModel

    from ..hub.modeling_miescore import MIEScoreModel  # deferred: loads transformers

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged_dir, adapter_out = out / "merged", out / "adapter"
    card = card or ModelCardInfo(base_model=hub_repo_id(os.fspath(base_model)))
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
        plain_base = read_checkpoint_config(os.fspath(base_model)).get("model_type") != "miescore"
        # no Hub id for the base: the card's code loads the folders of this run (and says to replace them)
        write_adapter_card(adapter_out, "miescore", card, MIEScoreModel, overrides, repo_id=None,
                           base_is_backbone=plain_base, base_path=card.base_path or local_folder(os.fspath(base_model)))
    else:
        source = adapter_dir if adapter_dir is not None else base_model
        with _outside_zero3_init():
            model, processor = load_base_model(os.fspath(source), dtype=dtype, **overrides)
    model.processor = processor
    if merged_dir.exists():
        shutil.rmtree(merged_dir)
    model.save_pretrained(merged_dir)
    write_card(merged_dir, "miescore", card)
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

