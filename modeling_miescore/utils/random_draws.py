"""Random draws with a ``torch.Generator`` that work whatever device the generator and the tensors are on.

A generator belongs to one device: on CUDA, ``torch.randn(..., generator=cpu_g, device="cuda")`` raises, and a
CPU-only machine never shows the mistake. :func:`randn_tensor` draws on the generator's own device and moves the
draw where it is used (diffusers' ``randn_tensor`` semantics, without importing diffusers), so a seeded CPU
generator gives the same numbers on every device. Every draw in the package that takes a generator goes through
here (``tests/test_device_contract.py``).
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
