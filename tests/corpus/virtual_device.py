"""A second device on a CPU-only machine, as strict as CUDA: the device contract test's tool (issue 32.1).

On a machine with one device every tensor, every ``device=`` and every generator is on the CPU, so the mistakes
only an accelerator exposes (a CPU generator drawing on the model's device, a tensor made without ``device=``
meeting the model's tensors, ``.numpy()`` on a model tensor) stay silent. :class:`VirtualDevice` is a
``torch.overrides.TorchFunctionMode`` that gives tensors a **virtual device** — ``maia:0``, a device type torch
knows, that no library here special-cases, whose autocast works on CPU — while their data stays on the CPU:

- a tensor is on the virtual device when it was made there (``device=maia:0``, ``.to(maia:0)``, a module moved
  there) or computed from one that is; its ``.device`` then reads ``maia:0``, so code that takes ``device=`` from
  its neighbours follows it, as on CUDA. ``.cpu()`` / ``.to("cpu")`` copy back to the host.
- what CUDA refuses raises the error torch raises there: a random draw whose ``generator`` is on another device
  type than the draw (``Expected a 'maia' device type for generator but found 'cpu'``, ``ATen/core/Generator.h``);
  an op mixing virtual tensors with host tensors that are not 0-d (``Expected all tensors to be on the same
  device``; 0-d host tensors are CUDA's "CPU scalars" and pass, as do ``copy_``, indexing and ``.to``);
  ``.numpy()`` of a virtual tensor; ``pin_memory()`` of one.
- host syncs of virtual tensors (``.item()``, ``float()``, ``bool()``, ``.tolist()``, copies to the host) are
  counted per call site in :attr:`VirtualDevice.host_syncs` (``"file.py:line"`` of the innermost package frame).

Why a mode and not the ``meta`` device: meta tensors have no values, so no image, score or text comes out and the
package's real paths (pipelines, generation, the trainer) cannot run on them. The mode is thread-local: work done
in another thread (the trainer's reward worker) runs as plain CPU.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

import modeling_miescore

__all__ = ["RANDOM_DRAWS", "VIRTUAL_DEVICE_TYPE", "VirtualDevice", "accelerator_on"]

VIRTUAL_DEVICE_TYPE = "maia"

Tensor = torch.Tensor
# every draw that takes a generator (torch's factories and in-place samplers)
RANDOM_DRAWS = frozenset({
    torch.randn, torch.rand, torch.randint, torch.randn_like, torch.rand_like, torch.randint_like, torch.normal,
    torch.randperm, torch.multinomial, torch.bernoulli, torch.poisson, Tensor.normal_, Tensor.uniform_,
    Tensor.random_, Tensor.bernoulli_, Tensor.bernoulli, Tensor.exponential_, Tensor.geometric_, Tensor.log_normal_,
    Tensor.cauchy_, Tensor.multinomial})
# ops CUDA allows across devices (the result stays where ``self`` is)
_CROSS_DEVICE = frozenset({Tensor.copy_, Tensor.__getitem__, Tensor.__setitem__, Tensor.new_tensor, Tensor.expand_as,
                           Tensor.view_as, Tensor.reshape_as, torch._has_compatible_shallow_copy_type, Tensor.set_})
_TEXT = frozenset({Tensor.__repr__, Tensor.__str__, Tensor.__format__})
_SYNCS = frozenset({Tensor.item, Tensor.tolist, Tensor.__float__, Tensor.__int__, Tensor.__bool__, Tensor.__index__,
                    Tensor.__complex__})
# factories that copy Python data to their device (on CUDA a blocking copy: the host waits for the stream)
_HOST_DATA = frozenset({torch.tensor, torch.as_tensor})
_PACKAGE = str(Path(modeling_miescore.__file__).resolve().parent)


def _descriptor(func):
    """The property a ``__get__`` / ``__set__`` call belongs to (``Tensor.device``...), else ``None``."""
    name = getattr(func, "__name__", "")
    return getattr(func, "__self__", None) if name in ("__get__", "__set__") else None


class VirtualDevice(TorchFunctionMode):
    """The virtual device (module docstring). ``with VirtualDevice() as virtual:`` then move models with
    ``.to(virtual.device)`` (or pass ``virtual.device`` where the package takes a device)."""

    def __init__(self):
        super().__init__()
        self.device = torch.device(VIRTUAL_DEVICE_TYPE, 0)
        self._on = WeakIdKeyDictionary()
        self.host_syncs: collections.Counter = collections.Counter()

    # ------------------------------------------------------------------ where tensors are
    def is_virtual(self, tensor) -> bool:
        return isinstance(tensor, Tensor) and tensor in self._on

    def _mark(self, value, on: bool):
        for leaf in tree_leaves(value):
            if isinstance(leaf, Tensor):
                if on:
                    self._on[leaf] = True
                else:
                    self._on.pop(leaf, None)
        return value

    def _is_virtual_device(self, device) -> bool:
        if device is None or isinstance(device, int):
            return False
        try:
            return torch.device(device).type == VIRTUAL_DEVICE_TYPE
        except (RuntimeError, TypeError, ValueError):
            return False

    def _host(self, device):
        return "cpu" if self._is_virtual_device(device) else device

    def _device_of(self, tensor) -> torch.device:
        return self.device if self.is_virtual(tensor) else tensor.device

    def _count_sync(self, what: str) -> None:
        frame = sys._getframe(2)
        while frame is not None and (not frame.f_code.co_filename.startswith(_PACKAGE)
                                     or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        where = "outside the package" if frame is None else (
            f"{Path(frame.f_code.co_filename).relative_to(_PACKAGE)}:{frame.f_lineno}")
        self.host_syncs[f"{where} {what}"] += 1

    # ------------------------------------------------------------------ checks CUDA makes
    def _check_generator(self, func, args, kwargs) -> None:
        generator = kwargs.get("generator")
        if generator is None:
            generator = next((a for a in args if isinstance(a, torch.Generator)), None)
        if generator is None:
            return
        tensor = next((a for a in args if isinstance(a, Tensor)), None)
        if kwargs.get("device") is not None:
            target = torch.device(kwargs["device"]) if not isinstance(kwargs["device"], int) else torch.device("cpu")
            target = self.device if self._is_virtual_device(target) else target
        elif tensor is not None:
            target = self._device_of(tensor)
        else:
            target = torch.device("cpu")
        if target.type != generator.device.type:
            raise RuntimeError(f"Expected a '{target.type}' device type for generator but found "
                               f"'{generator.device.type}' ({getattr(func, '__name__', func)} on the virtual "
                               f"device {self.device}, which stands for CUDA here)")

    def _check_same_device(self, func, tensors) -> None:
        virtual = [t for t in tensors if self.is_virtual(t)]
        host = [t for t in tensors if not self.is_virtual(t) and t.dim() > 0 and t.device.type != "meta"]
        if virtual and host:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{self.device} and cpu! ({getattr(func, '__name__', func)}: a host tensor of shape "
                               f"{tuple(host[0].shape)} met a tensor on the virtual device, which stands for CUDA)")

    # ------------------------------------------------------------------ the mode
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        prop = _descriptor(func)
        if prop is not None:
            return self._property(func, prop, args)
        if func is Tensor.to:
            return self._to(func, args, kwargs)
        if func is Tensor.cpu:
            return self._to_host(args[0], func(*args, **kwargs))
        if func in (Tensor.numpy, Tensor.__array__) and self.is_virtual(args[0]):
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if func is Tensor.pin_memory and self.is_virtual(args[0]):
            raise RuntimeError(f"cannot pin '{self.device}' memory: only dense CPU tensors can be pinned")
        if func is Tensor.get_device and self.is_virtual(args[0]):
            return 0
        if func in RANDOM_DRAWS:
            self._check_generator(func, args, kwargs)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        if func in _TEXT or func is torch._C._nn._parse_to:  # text; Module.to's argument parser (keeps maia)
            return func(*args, **kwargs)
        if func in _SYNCS and any(self.is_virtual(t) for t in tensors[:1]):
            self._count_sync(func.__name__)
        if func not in _CROSS_DEVICE:
            self._check_same_device(func, tensors)
        explicit = kwargs.get("device")
        if explicit is not None:
            kwargs["device"] = self._host(explicit)
            if func in _HOST_DATA and self._is_virtual_device(explicit) and not isinstance(args[0], Tensor):
                self._count_sync("host data to the device")  # a blocking copy from pageable memory on CUDA
        out = func(*args, **kwargs)
        if func is Tensor.__iter__:
            rows = list(out)
            return iter(self._mark(rows, True) if self.is_virtual(args[0]) else rows)
        if func in _CROSS_DEVICE:
            on = self.is_virtual(args[0])
        elif explicit is not None:
            on = self._is_virtual_device(explicit)
        else:
            on = any(self.is_virtual(t) for t in tensors)
        return self._mark(out, True) if on else out

    def _property(self, func, prop, args):
        tensor = args[0]
        if prop is Tensor.device and func.__name__ == "__get__":
            return self._device_of(tensor)
        if prop is Tensor.is_cpu and func.__name__ == "__get__":
            return not self.is_virtual(tensor) and func(*args)
        out = func(*args)
        if func.__name__ == "__set__":
            if prop is Tensor.data:
                self._mark(tensor, self.is_virtual(args[1]))
            return out
        return self._mark(out, True) if self.is_virtual(tensor) and isinstance(out, Tensor) else out

    def _to(self, func, args, kwargs):
        """``Tensor.to``: a virtual target runs on the host and marks the result; crossing devices copies."""
        tensor, rest = args[0], list(args[1:])
        target, has_target = None, False
        for k, value in enumerate(rest):
            if isinstance(value, (str, torch.device)):
                target, has_target, rest[k] = value, True, self._host(value)
            elif isinstance(value, Tensor):
                target, has_target = self._device_of(value), True
        if kwargs.get("device") is not None:
            target, has_target = kwargs["device"], True
            kwargs["device"] = self._host(target)
        source_virtual = self.is_virtual(tensor)
        out = func(tensor, *rest, **kwargs)
        if not has_target:
            return self._mark(out, True) if source_virtual else out
        to_virtual = self._is_virtual_device(target)
        if to_virtual == source_virtual:
            return self._mark(out, True) if to_virtual else out
        if out is tensor:  # torch returns ``self`` when nothing changes on the host: a device move copies
            out = out.clone()
        if source_virtual:
            self._count_sync("to(cpu)")
            return out
        return self._mark(out, True)

    def _to_host(self, tensor, out):
        if not self.is_virtual(tensor):
            return out
        self._count_sync("cpu()")
        return out.clone() if out is tensor else out

    # ------------------------------------------------------------------ helpers for tests
    def syncs_in(self, path_fragment: str) -> int:
        """Host syncs counted at call sites whose file path contains ``path_fragment``."""
        return sum(n for where, n in self.host_syncs.items() if path_fragment in where.split(":")[0])


def accelerator_on(virtual: VirtualDevice, **options):
    """An ``accelerate.Accelerator`` (one CPU process) whose ``device`` is ``virtual``'s: what the editor-RL
    trainer moves its editor, reward and tensors to."""
    from accelerate import Accelerator

    class VirtualDeviceAccelerator(Accelerator):
        @property
        def device(self):
            return virtual.device

    return VirtualDeviceAccelerator(cpu=True, **options)
