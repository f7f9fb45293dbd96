"""The trained policy: a LoRA on the editor's transformer (PEFT), its reference (the same network with the LoRA
disabled), and its weights on disk (safetensors, diffusers' ``pytorch_lora_weights.safetensors`` format).

Flow-GRPO's LoRA (``config/base.py``, SD3): rank 32, alpha 64, Gaussian init of A and zero B, so the policy equals
the reference at step 0; the SpatialReward paper (B.2.1) uses rank 32 / alpha 64 on OmniGen2.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Dict, Sequence

import torch

from ...image_io import MIEScoreInputError

__all__ = ["LORA_WEIGHTS_NAME", "add_lora", "check_lora_file", "lora_state_dict", "load_lora_safetensors",
           "non_finite_tensors", "reference_policy", "save_lora_safetensors", "set_lora_state_dict",
           "trainable_parameters"]

LORA_WEIGHTS_NAME = "pytorch_lora_weights.safetensors"


def _adaptable_modules(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    return {name: m for name, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))}


def missing_targets(model: torch.nn.Module, targets: Sequence[str]) -> list:
    """Target names (module-name suffixes, as PEFT matches them) that match no Linear/Conv2d module."""
    names = list(_adaptable_modules(model))
    return [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]


def add_lora(model: torch.nn.Module, *, rank: int, alpha: float, targets: Sequence[str], dropout: float = 0.0,
             init: str = "gaussian", editor: str = "editor") -> None:
    """Add a LoRA adapter ``default`` to ``model`` in place (fp32 LoRA weights, the base frozen). A target that
    matches no module raises :class:`MIEScoreInputError` naming it and some of the module names there are."""
    from peft import LoraConfig, inject_adapter_in_model

    missing = missing_targets(model, targets)
    if missing:
        leaves = sorted({n.rsplit(".", 1)[-1] if not n.endswith(".0") else n.rsplit(".", 2)[-2] + ".0"
                         for n in _adaptable_modules(model)})
        raise MIEScoreInputError(f"LoRA target module(s) {', '.join(missing)} not found in the {editor} transformer "
                                 f"({type(model).__name__}); its Linear/Conv layers end in: {', '.join(leaves[:30])}")
    widest = max(_layer_width(m) for n, m in _adaptable_modules(model).items()
                 if any(n == t or n.endswith("." + t) for t in targets))
    if rank > widest:  # a rank above a layer's width adds nothing to it; above every one it is a mistake
        raise MIEScoreInputError(f"lora_rank {rank} is above the width of every targeted layer of the {editor} "
                                 f"transformer (the widest: {widest}, min(inputs, outputs)); use lora_rank <= "
                                 f"{widest}")
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, init_lora_weights=init,
                        target_modules=list(targets))
    model.requires_grad_(False)
    if hasattr(model, "add_adapter") and hasattr(model, "disable_adapters"):
        model.add_adapter(config)  # diffusers ModelMixin: keeps its peft bookkeeping (load/save helpers)
    else:
        inject_adapter_in_model(config, model, adapter_name="default")
    for param in trainable_parameters(model):
        param.data = param.data.float()
    model.lora_config = config


def _layer_width(module: torch.nn.Module) -> int:
    """The largest rank a LoRA of ``module`` can have: min(inputs, outputs)."""
    if isinstance(module, torch.nn.Conv2d):
        return min(module.in_channels, module.out_channels)
    return min(module.in_features, module.out_features)


def trainable_parameters(model: torch.nn.Module) -> list:
    """The LoRA parameters (``lora_`` in their name) of ``model``, in a stable order."""
    return [p for n, p in model.named_parameters() if "lora_" in n]


@contextlib.contextmanager
def reference_policy(model: torch.nn.Module):
    """Within the block ``model`` is the reference policy: every LoRA layer disabled (OmniGen2-RL
    ``disabled_adapters``; flow_grpo ``disable_adapter()``)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def lora_state_dict(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """The LoRA weights of ``model`` (PEFT key names without the adapter name), detached on CPU."""
    from peft.utils import get_peft_model_state_dict

    return {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model).items()}


def set_lora_state_dict(model: torch.nn.Module, state: Dict[str, torch.Tensor]) -> None:
    from peft.utils import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if unexpected:
        raise MIEScoreInputError(f"LoRA weights do not fit this transformer: unexpected {unexpected[:5]}")


def save_lora_safetensors(directory, state_dict: Dict[str, torch.Tensor], metadata: dict) -> None:
    """``directory/pytorch_lora_weights.safetensors`` with keys prefixed ``transformer.`` (diffusers' layout)."""
    from safetensors.torch import save_file

    Path(directory).mkdir(parents=True, exist_ok=True)
    tensors = {f"transformer.{k}": v for k, v in state_dict.items()}
    save_file(tensors, str(Path(directory) / LORA_WEIGHTS_NAME),
              metadata={"transformer_lora_adapter_metadata": json.dumps(metadata, default=str)})


def check_lora_file(directory) -> tuple:
    """``(tensors, adapter metadata)`` of ``directory/pytorch_lora_weights.safetensors``, refused with one
    :class:`MIEScoreInputError` naming the file when it is missing, not a regular file, not readable safetensors
    (truncated, garbage, a pickle: nothing is unpickled), holds no LoRA tensor or a NaN / infinite value (such an
    adapter makes black or noisy images without a word)."""
    from safetensors import SafetensorError, safe_open

    from ...image_io import regular_file_problem

    path = Path(directory) / LORA_WEIGHTS_NAME
    problem = regular_file_problem(path, "LoRA file")
    if problem:
        raise MIEScoreInputError(f"{problem} (--lora takes the folder a training run wrote its adapter to)")
    try:
        with safe_open(str(path), "pt") as handle:
            meta = json.loads((handle.metadata() or {}).get("transformer_lora_adapter_metadata", "{}") or "{}")
            state = {k: handle.get_tensor(k) for k in handle.keys()}
    except (SafetensorError, OSError, ValueError, RecursionError) as error:
        raise MIEScoreInputError(f"LoRA file '{path}' is not a readable safetensors adapter ({str(error)[:160]}); "
                                 "train or download it again") from None
    if not isinstance(meta, dict) or not any("lora_" in k for k in state):
        raise MIEScoreInputError(f"LoRA file '{path}' holds no LoRA tensors (names with lora_A / lora_B)")
    bad = non_finite_tensors(state)
    if bad:
        raise MIEScoreInputError(f"LoRA file '{path}' holds non-finite values (NaN or inf) in {len(bad)} tensor(s), "
                                 f"e.g. {bad[0]}: a diverged or damaged adapter; use an earlier checkpoint")
    return state, meta


def non_finite_tensors(state: Dict[str, torch.Tensor]) -> list:
    """The names of the floating-point tensors of ``state`` holding a NaN or an infinite value, in order."""
    return [k for k, t in state.items() if t.is_floating_point() and not torch.isfinite(t).all()]


def load_lora_safetensors(model: torch.nn.Module, directory) -> None:
    """Load a LoRA written by :func:`save_lora_safetensors` (or diffusers) into ``model`` (adding it if needed),
    checked first (:func:`check_lora_file`)."""
    tensors, meta = check_lora_file(directory)
    state = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    if not trainable_parameters(model):
        targets = sorted({k.split(".lora_")[0].rsplit(".", 1)[-1] for k in state})
        add_lora(model, rank=int(meta.get("r", 4)), alpha=float(meta.get("lora_alpha", meta.get("r", 4))),
                 targets=meta.get("target_modules") or targets)
    set_lora_state_dict(model, state)


def lora_metadata(model: torch.nn.Module) -> dict:
    """The adapter's ``LoraConfig`` as a plain dict (what diffusers stores beside the weights)."""
    config = getattr(model, "lora_config", None)
    if config is None:
        return {}
    data = config.to_dict()
    data["target_modules"] = sorted(data.get("target_modules") or [])
    return {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool, list, type(None)))}

