"""Training losses for MIEScore's multi-dimensional supervised fine-tuning.

Paper: "Multi-Dimensional Supervised Fine-Tuning", eqs. 9-12, and the supplement
"Details of Training Configuration" / "Supervised Fine-Tuning" (eq. 13):

    L = lambda_h * sum_d Huber(y_hat^d, y^d)
      + lambda_r * sum_d L_rank^d
      + lambda_p * sum_d (1 - rho(y_hat^d, y^d)),        d in {VQ, IF, AP}

Predictions and labels are scores normalised to [0, 1], shape (B, 3). The paper trains with
batch size 1 and 16-step gradient accumulation, so the rank and PLCC terms are computed
against cross-batch memory queues of *detached* past predictions and their labels. The
current batch is enqueued only after its loss has been computed, so it is never compared
with its own stored copy.

Choices where the paper is silent are marked "not in the paper" below.

The queues are :class:`~modeling_miescore.training.memory_queue.MemoryQueue`. Like it, this module depends on
torch (and pydantic, which checks the settings' declared bounds). ``LossConfig`` doubles as the loss section of
``trainers/train_miescore.py``'s arguments (the recipe hands it to ``TrlParser``), so every field can be set in the
YAML or on the command line.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Mapping

import torch
import torch.nn.functional as F
from pydantic import Field

from ..utils.declared_settings import check_fields
from .memory_queue import MemoryQueue, state_int

__all__ = ["LossConfig", "MIEScoreLoss", "huber_loss", "rank_loss", "plcc_loss"]

_STATE_FORMAT_VERSION = 1
NON_NEGATIVE, POSITIVE = Field(ge=0), Field(gt=0)


# ---------------------------------------------------------------------------------------------- configuration
@dataclass
class LossConfig:
    """Every constant used by `MIEScoreLoss`. Defaults follow the paper wherever it gives a value."""

    # Supplement "Supervised Fine-Tuning": lambda_h = 4.0, lambda_r = 0.05, lambda_p = 0.05.
    lambda_huber: Annotated[float, NON_NEGATIVE] = 4.0
    lambda_rank: Annotated[float, NON_NEGATIVE] = 0.05
    lambda_plcc: Annotated[float, NON_NEGATIVE] = 0.05
    # Same section: "During the final training stage, the weights of ranking and PLCC losses
    # are increased by a factor of 1.5".
    final_stage_factor: Annotated[float, NON_NEGATIVE] = 1.5
    # Not in the paper: where the "final training stage" starts, as a fraction of training
    # progress (step / total_steps or epoch / num_epochs). 0.8 is the start of the last of the
    # paper's 5 epochs. None disables automatic switching; `set_stage` still works.
    final_stage_start: Annotated[float | None, Field(ge=0, le=1)] = 0.8
    # Not in the paper: predictions stored under the earlier stage's weights are dropped when
    # the stage changes (as CrossBatchMemory's reset_queue).
    reset_queues_on_stage_change: bool = True
    # Not in the paper: no delta is given. On [0, 1] scores the torch default delta = 1.0 would
    # make the loss plain 0.5 * MSE, because |error| <= 1 always. With 0.1, errors up to
    # 10 MOS points (of 100) are penalised quadratically and larger ones (label noise, outliers)
    # only linearly.
    huber_delta: Annotated[float, POSITIVE] = 0.1
    # Supplement "Supervised Fine-Tuning": "The ranking queue size is set to 4096 with a label
    # margin of 0.03".
    rank_queue_size: Annotated[int, NON_NEGATIVE] = 4096
    rank_label_margin: Annotated[float, NON_NEGATIVE] = 0.03
    # Not in the paper: the margin of the hinge on predicted differences. The label margin is
    # reused, so a pair costs nothing once its prediction order is right by at least 0.03.
    rank_hinge_margin: Annotated[float, NON_NEGATIVE] = 0.03
    # Supplement "Supervised Fine-Tuning": "the PLCC queue size is set to 256".
    plcc_queue_size: Annotated[int, NON_NEGATIVE] = 256
    # Not in the paper: variance floor (on the [0, 1] scale, i.e. a std floor of 1e-3) used by
    # the PLCC loss. See `plcc_loss`.
    plcc_var_eps: Annotated[float, POSITIVE] = 1e-6
    # Eq. 10-12: three dimensions, VQ / IF / AP, in this column order. Declared as a list so that TrlParser can
    # read it from the command line (--dim_names vq if ap); stored as a tuple.
    dim_names: list[str] = field(default_factory=lambda: ["vq", "if", "ap"])

    def __post_init__(self) -> None:
        self.dim_names = list(self.dim_names)
        check_fields(self)
        if not self.dim_names:
            raise ValueError("dim_names must not be empty")
        self.dim_names = tuple(self.dim_names)

    @property
    def num_dims(self) -> int:
        return len(self.dim_names)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dim_names"] = list(self.dim_names)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LossConfig":
        return cls(**dict(d))


# ---------------------------------------------------------------------------------------------- functional losses
# Each returns a per-dimension vector of shape (D,).
def _check_pair(pred: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if pred.dim() != 2:
        raise ValueError(f"pred must have shape (B, D), got {tuple(pred.shape)}")
    target = torch.as_tensor(target)
    if tuple(target.shape) != tuple(pred.shape):
        raise ValueError(f"target shape {tuple(target.shape)} != pred shape {tuple(pred.shape)}")
    # Losses are computed in float32 (bf16 predictions are cast; gradients flow through the cast).
    p = pred if pred.dtype in (torch.float32, torch.float64) else pred.float()
    return p, target.detach().to(device=p.device, dtype=p.dtype)


def _memory(p: torch.Tensor, memory_pred: torch.Tensor | None,
            memory_target: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Memory entries on p's device/dtype, detached; empty (0, D) when absent."""
    if memory_pred is None or memory_target is None:
        if (memory_pred is None) != (memory_target is None):
            raise ValueError("memory_pred and memory_target must be given together")
        empty = p.detach()[:0]
        return empty, empty
    mp = memory_pred.detach().to(device=p.device, dtype=p.dtype)
    mt = memory_target.detach().to(device=p.device, dtype=p.dtype)
    if mp.shape != mt.shape or mp.dim() != 2 or mp.shape[1] != p.shape[1]:
        raise ValueError("memory tensors must both have shape (M, D) matching pred's D")
    return mp, mt


def _zero_like_grad(p: torch.Tensor) -> torch.Tensor:
    """(D,) zeros that are still connected to p's graph (backward works, gradient is 0)."""
    return p.sum(dim=0) * 0.0


def huber_loss(pred: torch.Tensor, target: torch.Tensor, delta: float = 0.1) -> torch.Tensor:
    """Eq. 10, per dimension: mean over the batch of Huber(pred - target), shape (D,).

    Huber(e) = 0.5 e^2 if |e| <= delta, else delta (|e| - 0.5 delta) (torch.nn.HuberLoss).
    The paper gives no delta; see `LossConfig.huber_delta`.
    """
    p, y = _check_pair(pred, target)
    if p.shape[0] == 0:
        return _zero_like_grad(p)
    return F.huber_loss(p, y, reduction="none", delta=delta).mean(dim=0)


def rank_loss(pred: torch.Tensor, target: torch.Tensor, memory_pred: torch.Tensor | None = None,
              memory_target: torch.Tensor | None = None, *, label_margin: float = 0.03,
              hinge_margin: float = 0.03) -> torch.Tensor:
    """Eq. 11, per dimension: pairwise hinge ranking loss, shape (D,).

    Pairs are every unordered pair of distinct current-batch items, plus every
    (current item, memory item) pair. Memory items are detached, so the gradient reaches only
    the current prediction. A pair counts only when its labels differ by more than
    `label_margin` (0.03, supplement "Supervised Fine-Tuning"). Its cost is

        relu(hinge_margin - sign(y_i - y_j) * (p_i - p_j))

    This is a margin-ranking hinge in the label order (the hinge form is not in the paper).
    It is zero once the predicted order agrees with the label order by at least
    `hinge_margin`. Per dimension the cost is averaged over that dimension's valid pairs. With
    no valid pair the result is 0, and it stays connected to the graph.

    Pass a memory that does *not* yet contain the current batch. Pairing an item with its
    own stored copy would count its within-batch pairs twice.
    """
    p, y = _check_pair(pred, target)
    mp, my = _memory(p, memory_pred, memory_target)
    b, d = p.shape
    iu = torch.triu_indices(b, b, offset=1, device=p.device)
    dp = [p[iu[0]] - p[iu[1]]]
    dy = [y[iu[0]] - y[iu[1]]]
    if mp.shape[0] > 0:
        dp.append((p[:, None, :] - mp[None, :, :]).reshape(-1, d))
        dy.append((y[:, None, :] - my[None, :, :]).reshape(-1, d))
    dp_all = torch.cat(dp, dim=0)
    dy_all = torch.cat(dy, dim=0)
    valid = dy_all.abs() > label_margin
    cost = torch.relu(hinge_margin - torch.sign(dy_all) * dp_all)
    cost = torch.where(valid, cost, torch.zeros_like(cost))
    n_valid = valid.sum(dim=0).clamp_min(1).to(p.dtype)
    return cost.sum(dim=0) / n_valid + _zero_like_grad(p)


def plcc_loss(pred: torch.Tensor, target: torch.Tensor, memory_pred: torch.Tensor | None = None,
              memory_target: torch.Tensor | None = None, *, var_eps: float = 1e-6) -> torch.Tensor:
    """Eq. 12, per dimension: 1 - Pearson(pred, target) over batch ∪ memory, shape (D,).

    Memory entries are detached, so the gradient flows only through the current batch.

    Zero-variance handling (not in the paper):
      * Each variance (population, over the n = B + M points) is floored at `var_eps`
        inside the square root: rho = cov / sqrt(max(var_p, eps) * max(var_y, eps)). For any
        normal spread (std >= 1e-3 on [0, 1]) this is the exact Pearson correlation. If the
        predictions collapse to a constant, rho is about 0 (loss about 1), and the gradient
        stays finite and still pushes the predictions towards the label order. |rho| <= 1 always.
      * If the labels have (near) zero variance (var_y <= var_eps: all labels equal, or a
        single point such as batch size 1 with an empty memory), the correlation is undefined.
        That dimension then contributes 0, with zero gradient, still connected to the graph.
    """
    p, y = _check_pair(pred, target)
    mp, my = _memory(p, memory_pred, memory_target)
    x = torch.cat([p, mp], dim=0)
    t = torch.cat([y, my], dim=0)
    if x.shape[0] < 2:
        return _zero_like_grad(p)
    xc = x - x.mean(dim=0, keepdim=True)
    tc = t - t.mean(dim=0, keepdim=True)
    cov = (xc * tc).mean(dim=0)
    var_x = (xc * xc).mean(dim=0)
    var_t = (tc * tc).mean(dim=0)
    rho = cov / torch.sqrt(var_x.clamp_min(var_eps) * var_t.clamp_min(var_eps))
    valid = var_t > var_eps
    return torch.where(valid, 1.0 - rho, _zero_like_grad(p))


# ---------------------------------------------------------------------------------------------- combined loss
class MIEScoreLoss:
    """Eq. 9 / 13: lambda_h * Huber + s * (lambda_r * Rank + lambda_p * PLCC), each summed over VQ/IF/AP.

    s = `final_stage_factor` (1.5) in the final stage, otherwise 1.

    Usage (one call per micro-batch; the queues carry information across micro-batches)::

        loss_fn = MIEScoreLoss()
        loss_fn.update(progress=epoch / num_epochs)   # or loss_fn.set_stage(final=True)
        loss, logs = loss_fn(pred, labels)            # pred, labels: (B, 3) in [0, 1]
        (loss / grad_accum_steps).backward()

    The current batch is enqueued after its loss is computed, so it is never paired with
    itself. Pass `update_queues=False` (e.g. for validation) to leave the queues unchanged.
    Queues are per process. Under DDP each rank keeps its own.
    """

    def __init__(self, config: LossConfig | None = None, *, device: torch.device | str | None = None) -> None:
        self.config = config if config is not None else LossConfig()
        d = self.config.num_dims
        self.rank_queue = MemoryQueue(self.config.rank_queue_size, d, device=device)
        self.plcc_queue = MemoryQueue(self.config.plcc_queue_size, d, device=device)
        self.final_stage = False

    # -- stage handling
    @property
    def stage_factor(self) -> float:
        return self.config.final_stage_factor if self.final_stage else 1.0

    @property
    def lambda_rank(self) -> float:
        return self.config.lambda_rank * self.stage_factor

    @property
    def lambda_plcc(self) -> float:
        return self.config.lambda_plcc * self.stage_factor

    def set_stage(self, final: bool) -> bool:
        """Enter (final=True) or leave the final stage. Returns True if the stage changed.

        On a change the queues are reset (if `config.reset_queues_on_stage_change`).
        """
        final = bool(final)
        if final == self.final_stage:
            return False
        self.final_stage = final
        if self.config.reset_queues_on_stage_change:
            self.reset_queues()
        return True

    def update(self, progress: float) -> bool:
        """Set the stage from training progress in [0, 1] (step/total_steps or epoch/num_epochs).

        The final stage starts at `config.final_stage_start`. If that is None this does nothing.
        Returns True if the stage changed.
        """
        if self.config.final_stage_start is None:
            return False
        return self.set_stage(float(progress) >= self.config.final_stage_start)

    def reset_queues(self) -> None:
        self.rank_queue.reset()
        self.plcc_queue.reset()

    def to(self, device: torch.device | str) -> "MIEScoreLoss":
        self.rank_queue.to(device)
        self.plcc_queue.to(device)
        return self

    # -- loss
    def __call__(self, pred: torch.Tensor, labels: torch.Tensor, *,
                 update_queues: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
        """Total loss (0-dim float32 tensor) and a dict of float components for logging.

        `pred` and `labels` have shape (B, D) with D = len(config.dim_names), both on the
        [0, 1] scale. Components: `loss`, unweighted `huber`/`rank`/`plcc` (summed over
        dimensions), the same per dimension (`huber_vq`, ...), the effective `lambda_rank` /
        `lambda_plcc`, `final_stage` (0/1) and the queue fill levels before this batch.
        """
        cfg = self.config
        p, y = _check_pair(pred, labels)
        if p.shape[1] != cfg.num_dims:
            raise ValueError(f"expected {cfg.num_dims} dimensions {cfg.dim_names}, got {p.shape[1]}")
        if p.shape[0] == 0:
            raise ValueError("empty batch")

        rank_mp, rank_my = self.rank_queue.get()
        plcc_mp, plcc_my = self.plcc_queue.get()
        n_rank, n_plcc = len(self.rank_queue), len(self.plcc_queue)

        h = huber_loss(p, y, delta=cfg.huber_delta)
        r = rank_loss(p, y, rank_mp, rank_my, label_margin=cfg.rank_label_margin, hinge_margin=cfg.rank_hinge_margin)
        c = plcc_loss(p, y, plcc_mp, plcc_my, var_eps=cfg.plcc_var_eps)

        total = cfg.lambda_huber * h.sum() + self.lambda_rank * r.sum() + self.lambda_plcc * c.sum()

        # Enqueue only after the loss is computed (no self-pairs).
        if update_queues:
            self.rank_queue.push(p, y)
            self.plcc_queue.push(p, y)

        # One device->host transfer for all logged values.
        vals = torch.cat([total.detach().reshape(1), h.detach(), r.detach(), c.detach()]).cpu().tolist()
        nd = cfg.num_dims
        hv, rv, cv = vals[1 : 1 + nd], vals[1 + nd : 1 + 2 * nd], vals[1 + 2 * nd :]
        logs: dict[str, float] = {"loss": vals[0], "huber": math.fsum(hv), "rank": math.fsum(rv),
                                  "plcc": math.fsum(cv)}
        for i, name in enumerate(cfg.dim_names):
            logs[f"huber_{name}"] = hv[i]
            logs[f"rank_{name}"] = rv[i]
            logs[f"plcc_{name}"] = cv[i]
        logs["lambda_rank"] = float(self.lambda_rank)
        logs["lambda_plcc"] = float(self.lambda_plcc)
        logs["final_stage"] = float(self.final_stage)
        logs["rank_queue_len"] = float(n_rank)
        logs["plcc_queue_len"] = float(n_plcc)
        return total, logs

    forward = __call__

    # -- (de)serialisation for training resume
    def state_dict(self) -> dict[str, Any]:
        """Flat dict: queue tensors plus plain ints, for resuming training.

        Keys: `format_version`, `final_stage` (0/1), and `rank_queue.{preds,labels,ptr,count,
        capacity}` and `plcc_queue.{...}`. The ints are JSON-serialisable. For safetensors, use
        `{k: torch.as_tensor(v) for k, v in sd.items()}`; `load_state_dict` accepts 0-dim
        tensors for the ints.
        """
        sd: dict[str, Any] = {"format_version": _STATE_FORMAT_VERSION, "final_stage": int(self.final_stage)}
        for qname in ("rank_queue", "plcc_queue"):
            for k, v in getattr(self, qname).state_dict().items():
                sd[f"{qname}.{k}"] = v
        return sd

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Restore queues and stage. Does not reset the queues when the stage differs."""
        expected = set(self.state_dict().keys())
        got = set(state.keys())
        if strict and got != expected:
            raise KeyError(f"state keys mismatch: missing {sorted(expected - got)}, unexpected {sorted(got - expected)}")
        version = state_int(state.get("format_version", _STATE_FORMAT_VERSION))
        if version != _STATE_FORMAT_VERSION:
            raise ValueError(f"unsupported loss state format_version {version}")
        for qname in ("rank_queue", "plcc_queue"):
            sub = {k[len(qname) + 1 :]: v for k, v in state.items() if k.startswith(qname + ".")}
            if sub:
                getattr(self, qname).load_state_dict(sub)
        if "final_stage" in state:
            self.final_stage = bool(state_int(state["final_stage"]))

