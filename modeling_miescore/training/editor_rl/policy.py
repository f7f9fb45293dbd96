"""The trained policy: a LoRA on the editor's transformer (PEFT) or the full transformer sharded by FSDP2, its
reference, its weights on disk, and its EMA.

**LoRA**: the reference is the same network with the LoRA disabled; the weights are saved as safetensors in
diffusers' ``pytorch_lora_weights.safetensors`` format. Flow-GRPO's LoRA (``config/base.py``, SD3): rank 32,
alpha 64, Gaussian init of A and zero B, so the policy equals the reference at step 0; the SpatialReward paper
(B.2.1) uses rank 32 / alpha 64 on OmniGen2.

**Full fine-tuning with FSDP2** (``finetuning: full`` + ``fsdp: true``, for editors whose weights, gradients and
Adam moments do not fit one device):

- :func:`shard_transformer` applies ``fully_shard`` to each block of the transformer's block lists (every
  ``nn.ModuleList`` child, e.g. diffusers' ``transformer_blocks`` / ``single_transformer_blocks``), then to the
  root, on the process group ``accelerate launch`` started; the frozen KL reference is sharded the same way.
- Every FSDP2 forward and backward is a collective: every process must call the transformer the same number of
  times. The trainer keeps the counts equal (the same groups per process, one step plan per step shared by every
  group, padding units); see :mod:`.trainer`.
- Checkpoints and the exported model hold full tensors (``torch.distributed.checkpoint.state_dict`` full state
  dicts, gathered on the main process, which writes them), so a sharded run's files are those of an unsharded
  full fine-tuning run and load into either.

**EMA** (:class:`OptimizerStepEMA`), counted as flow_grpo counts it, in optimizer steps (``flow_grpo/ema.py``
``EMAModuleWrapper`` @ac4c86e with ``scripts/train_sd3.py``: ``decay=0.9, update_step_interval=8``): after
optimizer step ``n``, when ``(n + 1) % interval == 0``, ``ema <- ema + (1 - d_n) (param - ema)``,
``d_n = min((1 + n) / (10 + n), decay)``, so the decay reaches 0.9 after 81 optimizer steps. flow_grpo calls
``ema.step`` once per training micro-batch (with gradient accumulation ``A`` a due update is applied ``A`` times
with the same ``n``); here it is applied once per optimizer step. EMA weights are swapped in only for the
exported adapter (flow_grpo: eval and checkpoints).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

import torch

from ...hub.errors import MIEScoreInputError
from ...hub.image_io import regular_file_problem

__all__ = ["LORA_WEIGHTS_NAME", "add_lora", "check_lora_file", "lora_state_dict", "load_lora_safetensors",
           "non_finite_tensors", "reference_policy", "save_lora_safetensors", "set_lora_state_dict",
           "trainable_parameters", "block_lists", "full_model_state", "full_optimizer_state", "load_full_model_state",
           "load_full_optimizer_state", "reshard", "save_full_transformer", "shard_transformer", "OptimizerStepEMA"]


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


def block_lists(model: torch.nn.Module) -> Dict[str, torch.nn.ModuleList]:
    """The transformer's block lists: its direct ``nn.ModuleList`` children by name (diffusers' DiT transformers
    keep their blocks there: ``transformer_blocks``, ``single_transformer_blocks``, ...)."""
    return {name: child for name, child in model.named_children() if isinstance(child, torch.nn.ModuleList)}


def shard_transformer(model: torch.nn.Module, device_type: str) -> List[str]:
    """Shard ``model`` in place over every process of the default process group: ``fully_shard`` on each block,
    then on the root (which holds the embeddings, norms and projections outside the blocks). Returns the names of
    the sharded blocks (empty: only the root was sharded, one all-gather of the whole network per forward)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    sharded = []
    for name, blocks in block_lists(model).items():
        for index, block in enumerate(blocks):
            fully_shard(block, mesh=mesh)
            sharded.append(f"{name}.{index}")
    fully_shard(model, mesh=mesh)
    return sharded


def reshard(model: torch.nn.Module) -> None:
    """Free the gathered parameters of every FSDP2 module of ``model``. The root keeps its parameters gathered
    after a forward (FSDP2 expects the backward next), so after a no-grad forward (rollouts, the sample grid)
    ``named_parameters`` would name those instead of the shards the optimizer holds."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _options(**kwargs):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_model_state(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """The whole state dict of the sharded ``model`` on CPU on the main process, ``{}`` on the others (a
    collective: every process calls it)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    reshard(model)
    return get_model_state_dict(model, options=_options(cpu_offload=True))


def load_full_model_state(model: torch.nn.Module, state: Dict[str, torch.Tensor]) -> None:
    """Load full tensors (every process holds ``state``) into the sharded ``model``; parameters it lacks keep
    their values (a checkpoint holds the trained parameters only)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    reshard(model)
    set_model_state_dict(model, state, options=_options(strict=False))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """``optimizer``'s full state dict keyed by parameter name, on CPU on the main process (a collective)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    reshard(model)
    return get_optimizer_state_dict(model, optimizer, options=_options(cpu_offload=True))


def load_full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    reshard(model)
    set_optimizer_state_dict(model, optimizer, state, options=_options())


def save_full_transformer(model: torch.nn.Module, state: Dict[str, torch.Tensor], directory) -> Path:
    """``directory`` as a diffusers model folder (``config.json`` + ``diffusion_pytorch_model*.safetensors``,
    sharded with an index past 10 GB, as ``save_pretrained`` writes it) from the full ``state``; a module without
    a diffusers config gets ``directory.safetensors`` instead."""
    from huggingface_hub import save_torch_state_dict

    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    if not hasattr(model, "save_config"):
        from safetensors.torch import save_file

        path = Path(f"{directory}.safetensors")
        save_file(tensors, str(path))
        return path
    Path(directory).mkdir(parents=True, exist_ok=True)
    model.save_config(directory)
    save_torch_state_dict(tensors, directory, filename_pattern="diffusion_pytorch_model{suffix}.safetensors",
                          max_shard_size="10GB")
    return Path(directory)


class OptimizerStepEMA:
    """``shadow_params`` (the EMA), ``optimization_step`` (optimizer steps so far; both saved in checkpoints).
    Call :meth:`optimizer_step` after every optimizer step."""

    def __init__(self, parameters: Iterable[torch.nn.Parameter], *, decay: float, update_interval: int = 8):
        if update_interval < 1:
            raise ValueError(f"update_interval must be >= 1, got {update_interval}")
        self.shadow_params: List[torch.Tensor] = [p.detach().clone() for p in parameters]
        self.decay, self.update_interval = float(decay), int(update_interval)
        self.optimization_step = 0
        self._stored: List[torch.Tensor] = []

    def decay_at(self, step: int) -> float:
        return min((1 + step) / (10 + step), self.decay)

    @torch.no_grad()
    def optimizer_step(self, parameters: Iterable[torch.nn.Parameter]) -> bool:
        """Count one optimizer step; update the EMA when it is due. Whether it updated."""
        self.optimization_step += 1
        step = self.optimization_step
        if (step + 1) % self.update_interval:
            return False
        weight = 1 - self.decay_at(step)
        for shadow, param in zip(self.shadow_params, parameters, strict=True):
            shadow.add_(weight * (param.detach().to(shadow.device, shadow.dtype) - shadow))
        return True

    @torch.no_grad()
    def store(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        self._stored = [p.detach().clone() for p in parameters]

    @torch.no_grad()
    def copy_to(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        for shadow, param in zip(self.shadow_params, parameters, strict=True):
            param.copy_(shadow.to(param.device, param.dtype))

    @torch.no_grad()
    def restore(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        for stored, param in zip(self._stored, parameters, strict=True):
            param.copy_(stored)
        self._stored = []
