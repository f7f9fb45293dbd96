"""Full fine-tuning with the editor's transformer sharded over the processes by torch's FSDP2 (``fully_shard``):
``finetuning: full`` + ``fsdp: true`` (issue 23, part 5), for editors whose weights, gradients and Adam moments do
not fit one device.

- :func:`shard_transformer` applies ``fully_shard`` to each block of the transformer's block lists (every
  ``nn.ModuleList`` child, e.g. diffusers' ``transformer_blocks`` / ``single_transformer_blocks``), then to the
  root, on the process group ``accelerate launch`` started; the frozen KL reference is sharded the same way.
- Every FSDP2 forward and backward is a collective: every process must call the transformer the same number of
  times. The trainer keeps the counts equal (the same groups per process, one step plan per step shared by every
  group, padding units); see :mod:`.trainer`.
- Checkpoints and the exported model hold full tensors (``torch.distributed.checkpoint.state_dict`` full state
  dicts, gathered on the main process, which writes them), so a sharded run's files are those of an unsharded
  full fine-tuning run and load into either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import torch

__all__ = ["block_lists", "full_model_state", "full_optimizer_state", "load_full_model_state",
           "load_full_optimizer_state", "reshard", "save_full_transformer", "shard_transformer"]


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
