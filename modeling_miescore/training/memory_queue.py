"""The cross-batch memory queue of MIEScore's rank and PLCC losses: a ring buffer of detached past predictions
and their labels (MIEScore paper, supplement "Supervised Fine-Tuning": queues of 4096 and 256 entries).

The module depends on torch only.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

__all__ = ["MemoryQueue", "state_int"]


def state_int(v: Any) -> int:
    """An int of a saved state: a plain int, or a one-element tensor (safetensors stores ints that way)."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError("expected a scalar")
        return int(v.item())
    return int(v)


class MemoryQueue:
    """Ring buffer of detached predictions and labels, each of shape (capacity, dim).

    * Storage is detached (`requires_grad=False`). Pushing never keeps the autograd graph.
    * Whether a slot is filled is tracked by an explicit write pointer `ptr` and count `count`,
      never by a sentinel value. A label of 0.0 is an ordinary label (unlike XBM's `is_full`,
      which tests `targets[-1] != 0`).
    * When more than `capacity` items have been pushed, the oldest are overwritten. If a
      single push is larger than the capacity, only its last `capacity` rows are kept.
    * `get()` returns the filled entries in chronological order, oldest first.
    * The buffers follow the device of the data pushed into them. The dtype is fixed at
      construction (float32 by default, so bf16 predictions lose nothing).
    * `capacity = 0` gives a queue that stays empty.
    """

    def __init__(self, capacity: int, dim: int = 3, *, device: torch.device | str | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        if int(capacity) != capacity or capacity < 0:
            raise ValueError("capacity must be a non-negative integer")
        if int(dim) != dim or dim < 1:
            raise ValueError("dim must be a positive integer")
        self.capacity = int(capacity)
        self.dim = int(dim)
        self.dtype = dtype
        device = torch.device(device) if device is not None else torch.device("cpu")
        self.preds = torch.zeros(self.capacity, self.dim, device=device, dtype=dtype)
        self.labels = torch.zeros(self.capacity, self.dim, device=device, dtype=dtype)
        self.ptr = 0  # next slot to write; once full, also the oldest entry
        self.count = 0  # number of filled slots, 0..capacity

    # -- basic properties
    @property
    def device(self) -> torch.device:
        return self.preds.device

    def __len__(self) -> int:
        return self.count

    @property
    def is_full(self) -> bool:
        return self.count == self.capacity

    def __repr__(self) -> str:
        return (f"MemoryQueue(capacity={self.capacity}, dim={self.dim}, count={self.count}, ptr={self.ptr}, "
                f"device={self.device}, dtype={self.dtype})")

    # -- mutation
    def to(self, device: torch.device | str) -> "MemoryQueue":
        self.preds = self.preds.to(device)
        self.labels = self.labels.to(device)
        return self

    def reset(self) -> None:
        """Forget all stored entries (buffers are zeroed; the fill state is what marks them empty)."""
        self.preds.zero_()
        self.labels.zero_()
        self.ptr = 0
        self.count = 0

    @torch.no_grad()
    def push(self, preds: torch.Tensor, labels: torch.Tensor) -> None:
        """Append rows of `preds` / `labels` (shape (n, dim) or (dim,)), detached."""
        preds = preds.detach()
        labels = torch.as_tensor(labels).detach()
        if preds.dim() == 1:
            preds = preds.unsqueeze(0)
        if labels.dim() == 1:
            labels = labels.unsqueeze(0)
        if preds.shape != labels.shape or preds.dim() != 2 or preds.shape[1] != self.dim:
            raise ValueError(f"expected preds and labels of shape (n, {self.dim}), "
                             f"got {tuple(preds.shape)} and {tuple(labels.shape)}")
        if self.capacity == 0 or preds.shape[0] == 0:
            return
        if preds.device != self.device:
            self.to(preds.device)
        preds = preds.to(self.dtype)
        labels = labels.to(device=self.device, dtype=self.dtype)
        n = preds.shape[0]
        if n >= self.capacity:
            self.preds.copy_(preds[-self.capacity :])
            self.labels.copy_(labels[-self.capacity :])
            self.ptr = 0
            self.count = self.capacity
            return
        idx = (self.ptr + torch.arange(n, device=self.device)) % self.capacity
        self.preds[idx] = preds
        self.labels[idx] = labels
        self.ptr = (self.ptr + n) % self.capacity
        self.count = min(self.count + n, self.capacity)

    # -- access
    def get(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Filled entries as (preds, labels), each (count, dim), oldest first; copies."""
        if self.count == 0:
            empty = self.preds[:0].clone()
            return empty, empty.clone()
        start = (self.ptr - self.count) % self.capacity
        idx = (start + torch.arange(self.count, device=self.device)) % self.capacity
        return self.preds[idx], self.labels[idx]

    # -- (de)serialisation
    def state_dict(self) -> dict[str, Any]:
        """Tensors (`preds`, `labels`) and plain ints (`ptr`, `count`, `capacity`).

        The ints may be stored in JSON, or wrapped with `torch.as_tensor` for safetensors.
        `load_state_dict` accepts either form.
        """
        return {"preds": self.preds.detach().clone().contiguous(), "labels": self.labels.detach().clone().contiguous(),
                "ptr": int(self.ptr), "count": int(self.count), "capacity": int(self.capacity)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        capacity = state_int(state.get("capacity", self.capacity))
        preds = torch.as_tensor(state["preds"])
        labels = torch.as_tensor(state["labels"])
        expected = (self.capacity, self.dim)
        if capacity != self.capacity or tuple(preds.shape) != expected or tuple(labels.shape) != expected:
            raise ValueError(f"queue state has capacity/shape {capacity}/{tuple(preds.shape)}, expected {expected}")
        ptr, count = state_int(state["ptr"]), state_int(state["count"])
        if not 0 <= count <= self.capacity or not 0 <= ptr < max(self.capacity, 1):
            raise ValueError(f"invalid queue state: ptr={ptr}, count={count}")
        if count < self.capacity and ptr != count:
            raise ValueError(f"invalid queue state: ptr={ptr} must equal count={count} before the queue is full")
        self.preds = preds.detach().to(device=self.device, dtype=self.dtype).clone()
        self.labels = labels.detach().to(device=self.device, dtype=self.dtype).clone()
        self.ptr = ptr
        self.count = count
