"""Random draws with a ``torch.Generator`` that work whatever device the generator and the tensors are on.

A generator belongs to one device. On CUDA, ``torch.randn(shape, generator=g, device="cuda")`` with a CPU ``g``
raises ("Expected a 'cuda' device type for generator but found 'cpu'", ``ATen/core/Generator.h``); on a CPU-only
machine nothing shows the mistake. diffusers avoids it with ``diffusers.utils.torch_utils.randn_tensor``: draw on
the generator's own device, then move the draw to where it is used. :func:`randn_tensor` here has the same
semantics without importing diffusers (scoring and serving do not depend on it), so a seeded CPU generator gives
the same numbers on every device — what a reproducible rollout needs.

Every draw in the package that takes a generator goes through this module (``tests/test_device_contract.py``
runs the package's hot paths with torch's draws made as strict on CPU as CUDA is).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

__all__ = ["randn_tensor", "generator_device"]

Generators = Union[torch.Generator, Sequence[torch.Generator], None]


def generator_device(generator: Generators) -> Optional[torch.device]:
    """The device a generator (or the first of a list) draws on; ``None`` without one."""
    if generator is None:
        return None
    if isinstance(generator, (list, tuple)):
        if not generator:
            return None
        generator = generator[0]
    return torch.device(generator.device)


def randn_tensor(shape, *, generator: Generators = None, device=None, dtype: Optional[torch.dtype] = None
                 ) -> torch.Tensor:
    """Standard normal noise of ``shape`` on ``device`` in ``dtype``, drawn on ``generator``'s device.

    ``generator`` may be one generator or one per leading row (``len == shape[0]``; each row drawn from its own,
    as diffusers does). Without a generator the draw is made on ``device`` directly."""
    shape = tuple(shape)
    device = torch.device(device) if device is not None else torch.device("cpu")
    draw_device = generator_device(generator) or device
    if isinstance(generator, (list, tuple)):
        if len(generator) != shape[0]:
            raise ValueError(f"{len(generator)} generators for a batch of {shape[0]} rows")
        rows = [torch.randn((1,) + shape[1:], generator=g, device=torch.device(g.device), dtype=dtype)
                for g in generator]
        return torch.cat([row.to(device) for row in rows], dim=0)
    return torch.randn(shape, generator=generator, device=draw_device, dtype=dtype).to(device)
