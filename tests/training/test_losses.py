"""Tests for modeling_miescore.training.losses (paper eqs. 9-13 and the supplement's SFT configuration)."""

import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr

from modeling_miescore.training.losses import (
    LossConfig,
    MIEScoreLoss,
    huber_loss,
    plcc_loss,
    rank_loss,
)
from modeling_miescore.training.memory_queue import MemoryQueue


def _rand(b, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, d, generator=g, dtype=torch.float32)


# ---------------------------------------------------------------- config
def test_config_paper_defaults():
    c = LossConfig()
    assert (c.lambda_huber, c.lambda_rank, c.lambda_plcc) == (4.0, 0.05, 0.05)
    assert c.final_stage_factor == 1.5
    assert (c.rank_queue_size, c.rank_label_margin, c.plcc_queue_size) == (4096, 0.03, 256)
    assert c.dim_names == ("vq", "if", "ap")
    assert LossConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ValueError):
        LossConfig(huber_delta=0)


# ---------------------------------------------------------------- huber
def test_huber_matches_definition():
    p = torch.tensor([[0.5, 0.0, 1.0], [0.2, 0.9, 0.3]])
    y = torch.tensor([[0.55, 0.5, 1.0], [0.2, 0.1, 0.0]])
    delta = 0.1
    e = (p - y).abs()
    ref = torch.where(e <= delta, 0.5 * e**2, delta * (e - 0.5 * delta)).mean(0)
    torch.testing.assert_close(huber_loss(p, y, delta=delta), ref)


# ---------------------------------------------------------------- rank
def test_rank_zero_when_order_right_by_more_than_margin_positive_when_reversed():
    y = torch.tensor([[0.1] * 3, [0.5] * 3, [0.9] * 3])
    p_good = torch.tensor([[0.2] * 3, [0.4] * 3, [0.7] * 3])  # same order, gaps >= 0.2 > 0.03
    assert torch.all(rank_loss(p_good, y) == 0)
    p_bad = p_good.flip(0)
    r = rank_loss(p_bad, y)
    assert torch.all(r > 0)
    # pairs (0,1),(0,2),(1,2): relu(0.03 + 0.3), relu(0.03 + 0.5), relu(0.03 + 0.2)
    torch.testing.assert_close(r, torch.full((3,), (0.33 + 0.53 + 0.23) / 3))
    # Correct order but by less than the hinge margin still costs a little.
    p_close = torch.tensor([[0.50] * 3, [0.51] * 3, [0.52] * 3])
    assert torch.all(rank_loss(p_close, y) > 0)


def test_rank_pairs_within_label_margin_ignored():
    # Labels differ by 0.02 < 0.03: the badly reversed predictions must not count.
    y = torch.tensor([[0.50, 0.50, 0.10], [0.52, 0.52, 0.90]])
    p = torch.tensor([[0.90, 0.90, 0.10], [0.10, 0.10, 0.90]], requires_grad=True)
    r = rank_loss(p, y)
    assert r[0].item() == 0 and r[1].item() == 0
    assert r[2].item() == 0  # valid pair, correct order
    r.sum().backward()  # no valid pair in dims 0/1 still gives a grad-connected zero
    assert torch.isfinite(p.grad).all() and torch.all(p.grad[:, :2] == 0)
    # Only the labels decide validity; a queue item inside the margin is ignored too.
    r_q = rank_loss(p.detach()[:1], y[:1], torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([[0.51, 0.49, 0.11]]))
    assert torch.all(r_q == 0)


def test_rank_uses_queue_and_label_zero_is_valid():
    p = torch.tensor([[0.2, 0.2, 0.2]])
    y = torch.tensor([[0.5, 0.5, 0.5]])
    # Queue item labelled 0.0 (a legitimate lowest score) predicted above the current item.
    mp = torch.tensor([[0.9, 0.0, 0.9]])
    my = torch.tensor([[0.0, 0.0, 0.0]])
    r = rank_loss(p, y, mp, my)
    torch.testing.assert_close(r, torch.tensor([0.03 + 0.7, 0.0, 0.03 + 0.7]))


# ---------------------------------------------------------------- plcc
def test_plcc_equals_one_minus_pearson_empty_queue():
    p, y = _rand(7, seed=1), _rand(7, seed=2)
    out = plcc_loss(p, y)
    for d in range(3):
        ref = 1 - pearsonr(p[:, d].double().numpy(), y[:, d].double().numpy())[0]
        assert out[d].item() == pytest.approx(ref, abs=1e-5)


def test_plcc_equals_one_minus_pearson_over_batch_and_queue():
    p, y = _rand(2, seed=3), _rand(2, seed=4)
    q = MemoryQueue(256, 3)
    qp, qy = _rand(50, seed=5), _rand(50, seed=6)
    q.push(qp, qy)
    mp, my = q.get()
    out = plcc_loss(p, y, mp, my)
    xp = torch.cat([p, qp]).double().numpy()
    xy = torch.cat([y, qy]).double().numpy()
    for d in range(3):
        assert out[d].item() == pytest.approx(1 - pearsonr(xp[:, d], xy[:, d])[0], abs=1e-5)
    # The combined loss uses the same queue contents.
    fn = MIEScoreLoss()
    fn.plcc_queue.push(qp, qy)
    _, logs = fn(p, y)
    assert logs["plcc"] == pytest.approx(out.sum().item(), abs=1e-6)


def test_zero_variance_batch_finite_loss_and_grad():
    fn = MIEScoreLoss()
    # All predictions and all labels equal.
    p = torch.full((4, 3), 0.5, requires_grad=True)
    y = torch.full((4, 3), 0.7)
    loss, logs = fn(p, y)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(p.grad).all()
    assert logs["plcc"] == 0.0 and logs["rank"] == 0.0
    # Constant predictions but varying labels: rho ~ 0, loss ~ 1, finite gradient.
    p2 = torch.full((4, 3), 0.5, requires_grad=True)
    y2 = torch.tensor([[0.1] * 3, [0.4] * 3, [0.6] * 3, [0.9] * 3])
    c = plcc_loss(p2, y2)
    c.sum().backward()
    assert torch.isfinite(c).all() and torch.allclose(c, torch.ones(3))
    assert torch.isfinite(p2.grad).all() and p2.grad.abs().sum() > 0
    # the gradient pushes predictions towards the label order (descent raises high-label items)
    assert torch.all(-p2.grad[3] > 0) and torch.all(-p2.grad[0] < 0)


def test_batch_of_one():
    fn = MIEScoreLoss()
    y_all = _rand(6, seed=7)
    for i in range(6):
        p = (y_all[i : i + 1] + 0.05).clone().requires_grad_(True)
        loss, logs = fn(p, y_all[i : i + 1])
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(p.grad).all()
        if i == 0:  # nothing to compare with yet
            assert logs["rank"] == 0.0 and logs["plcc"] == 0.0
            assert logs["loss"] == pytest.approx(4.0 * logs["huber"])
    # Afterwards the queue makes PLCC meaningful: predictions = labels + const -> rho = 1.
    assert len(fn.plcc_queue) == 6
    _, logs = fn(y_all[:1] + 0.05, y_all[:1], update_queues=False)
    assert logs["plcc"] == pytest.approx(0.0, abs=1e-5)


# ---------------------------------------------------------------- queue
def test_queue_wraparound_order_and_zero_labels():
    q = MemoryQueue(5, 3)
    assert len(q) == 0 and q.get()[0].shape == (0, 3)
    rows = torch.arange(8, dtype=torch.float32)[:, None].repeat(1, 3)
    q.push(rows[:3], torch.zeros(3, 3))  # labels of 0 are valid labels
    assert len(q) == 3 and not q.is_full
    mp, my = q.get()
    torch.testing.assert_close(mp, rows[:3])
    torch.testing.assert_close(my, torch.zeros(3, 3))
    q.push(rows[3:8], rows[3:8])  # total 8 > capacity 5: rows 0,1,2 dropped
    assert len(q) == 5 and q.is_full
    mp, my = q.get()
    torch.testing.assert_close(mp, rows[3:8])  # oldest first
    q.push(rows[:1], torch.zeros(1, 3))  # wraps: drops the oldest (3), zero label kept
    mp, my = q.get()
    torch.testing.assert_close(mp[:, 0], torch.tensor([4.0, 5, 6, 7, 0]))
    torch.testing.assert_close(my[-1], torch.zeros(3))
    assert len(q) == 5
    # A single push larger than the capacity keeps its last rows.
    q.push(rows, rows)
    torch.testing.assert_close(q.get()[0], rows[3:])
    q.reset()
    assert len(q) == 0 and q.ptr == 0 and q.get()[0].shape == (0, 3)


def test_queue_all_zero_labels_not_treated_as_empty():
    q = MemoryQueue(3, 3)
    q.push(torch.zeros(3, 3), torch.zeros(3, 3))
    assert q.is_full and len(q) == 3
    q.push(torch.ones(1, 3), torch.zeros(1, 3))
    assert len(q) == 3 and q.get()[0][-1].tolist() == [1.0, 1.0, 1.0]


def test_queue_detached_and_dtype():
    q = MemoryQueue(4, 3)
    p = torch.rand(2, 3, dtype=torch.bfloat16, requires_grad=True)
    q.push(p * 2, torch.rand(2, 3, dtype=torch.float64))
    mp, my = q.get()
    assert not mp.requires_grad and not my.requires_grad and not q.preds.requires_grad
    assert mp.dtype == torch.float32 and my.dtype == torch.float32
    with pytest.raises(ValueError):
        q.push(torch.rand(2, 4), torch.rand(2, 4))


def test_queue_state_dict_roundtrip_json_and_tensors():
    q = MemoryQueue(4, 3)
    q.push(_rand(6, seed=8), _rand(6, seed=9))
    sd = q.state_dict()
    json.dumps({k: v for k, v in sd.items() if not isinstance(v, torch.Tensor)})
    q2 = MemoryQueue(4, 3)
    q2.load_state_dict({k: torch.as_tensor(v) for k, v in sd.items()})  # safetensors-style
    for a, b in zip(q.get(), q2.get()):
        torch.testing.assert_close(a, b)
    assert (q2.ptr, q2.count) == (q.ptr, q.count)
    with pytest.raises(ValueError):
        MemoryQueue(8, 3).load_state_dict(sd)


# ---------------------------------------------------------------- combined loss
def test_no_self_pairs():
    """Queue must not contain the current batch when its loss is computed."""
    cfg = LossConfig(lambda_huber=0.0, lambda_plcc=0.0, lambda_rank=1.0)
    fn = MIEScoreLoss(cfg)
    fn.rank_queue.push(torch.full((1, 3), 0.5), torch.full((1, 3), 0.5))
    p = torch.tensor([[0.2] * 3, [0.8] * 3])
    y = torch.tensor([[0.9] * 3, [0.1] * 3])  # reversed pair
    loss, logs = fn(p, y)
    # valid pairs: (0,1) 0.63, (0,q) 0.33, (1,q) 0.33 -> mean 0.43 per dim.
    # Counting the batch's own copies would add (0,copy1) and (1,copy0), 0.63 each -> 0.51.
    assert logs["rank_vq"] == pytest.approx((0.63 + 0.33 + 0.33) / 3, abs=1e-6)
    assert loss.item() == pytest.approx(3 * 0.43, abs=1e-5)
    # enqueued afterwards
    assert len(fn.rank_queue) == 3 and len(fn.plcc_queue) == 2
    torch.testing.assert_close(fn.rank_queue.get()[0][1:], p)


def test_total_weights_and_final_stage():
    fn = MIEScoreLoss()
    fn.rank_queue.push(_rand(40, seed=10), _rand(40, seed=11))
    fn.plcc_queue.push(_rand(40, seed=12), _rand(40, seed=13))
    p, y = _rand(4, seed=14), _rand(4, seed=15)
    loss, logs = fn(p, y, update_queues=False)
    assert logs["rank"] > 0 and logs["plcc"] > 0
    expected = 4.0 * logs["huber"] + 0.05 * logs["rank"] + 0.05 * logs["plcc"]
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert logs["lambda_rank"] == 0.05 and logs["final_stage"] == 0.0
    assert logs["huber"] == pytest.approx(sum(logs[f"huber_{d}"] for d in ("vq", "if", "ap")))
    # Stage switch via progress (default boundary 0.8 = last of 5 epochs): queues reset.
    assert fn.update(0.5) is False and not fn.final_stage
    assert fn.update(4 / 5) is True and fn.final_stage
    assert len(fn.rank_queue) == 0 and len(fn.plcc_queue) == 0
    fn.rank_queue.push(_rand(40, seed=10), _rand(40, seed=11))
    fn.plcc_queue.push(_rand(40, seed=12), _rand(40, seed=13))
    loss2, logs2 = fn(p, y, update_queues=False)
    for k in ("huber", "rank", "plcc"):
        assert logs2[k] == pytest.approx(logs[k], rel=1e-6)
    expected2 = 4.0 * logs["huber"] + 0.075 * logs["rank"] + 0.075 * logs["plcc"]
    assert loss2.item() == pytest.approx(expected2, rel=1e-6)
    assert logs2["lambda_plcc"] == pytest.approx(0.075) and logs2["final_stage"] == 1.0
    # Re-entering the same stage does not reset; leaving it does.
    assert fn.set_stage(True) is False and len(fn.rank_queue) == 40
    assert fn.set_stage(False) is True and len(fn.rank_queue) == 0
    # Disabled automatic switching.
    fn3 = MIEScoreLoss(LossConfig(final_stage_start=None))
    assert fn3.update(1.0) is False and not fn3.final_stage


def test_state_dict_roundtrip_reproduces_losses(tmp_path):
    fn = MIEScoreLoss(LossConfig(rank_queue_size=16, plcc_queue_size=8))
    for i in range(5):
        fn(_rand(3, seed=20 + i), _rand(3, seed=40 + i))
    fn.set_stage(True)
    for i in range(3):
        fn(_rand(2, seed=60 + i), _rand(2, seed=70 + i))
    sd = fn.state_dict()

    # Save through safetensors (tensors) to exercise the resume path.
    from safetensors.torch import load_file, save_file

    path = tmp_path / "loss_state.safetensors"
    save_file({k: torch.as_tensor(v) for k, v in sd.items()}, str(path))
    fn2 = MIEScoreLoss(LossConfig(rank_queue_size=16, plcc_queue_size=8))
    fn2.load_state_dict(load_file(str(path)))
    assert fn2.final_stage
    for i in range(6):  # identical subsequent losses, including wrap-around
        p, y = _rand(3, seed=80 + i), _rand(3, seed=90 + i)
        l1, g1 = fn(p, y)
        l2, g2 = fn2(p, y)
        assert l1.item() == l2.item()
        assert g1 == g2
    with pytest.raises(KeyError):
        fn2.load_state_dict({"final_stage": 1})


def test_gradient_flows_only_through_current_predictions():
    fn = MIEScoreLoss()
    for i in range(3):
        p = _rand(2, seed=100 + i).requires_grad_(True)
        loss, _ = fn(p, _rand(2, seed=110 + i))
        loss.backward()
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    for q in (fn.rank_queue, fn.plcc_queue):
        assert not q.preds.requires_grad and not q.labels.requires_grad
        assert all(not t.requires_grad for t in q.get())
    # Gradient matches a manual computation where queue entries are constants.
    p = _rand(2, seed=120).requires_grad_(True)
    y = _rand(2, seed=121)
    mp, my = fn.plcc_queue.get()
    loss, _ = fn(p, y, update_queues=False)
    (g,) = torch.autograd.grad(loss, p)
    p_ref = p.detach().clone().requires_grad_(True)
    cfg = fn.config
    ref = (
        cfg.lambda_huber * huber_loss(p_ref, y, cfg.huber_delta).sum()
        + cfg.lambda_rank * rank_loss(p_ref, y, *fn.rank_queue.get()).sum()
        + cfg.lambda_plcc * plcc_loss(p_ref, y, mp, my).sum()
    )
    (g_ref,) = torch.autograd.grad(ref, p_ref)
    torch.testing.assert_close(g, g_ref)


def test_bf16_predictions():
    fn = MIEScoreLoss()
    fn.plcc_queue.push(_rand(10, seed=130), _rand(10, seed=131))
    p = _rand(2, seed=132).to(torch.bfloat16).requires_grad_(True)
    loss, logs = fn(p, _rand(2, seed=133))
    loss.backward()
    assert loss.dtype == torch.float32 and p.grad.dtype == torch.bfloat16
    assert math.isfinite(logs["loss"]) and torch.isfinite(p.grad.float()).all()
    assert fn.rank_queue.preds.dtype == torch.float32


def test_shape_errors():
    fn = MIEScoreLoss()
    with pytest.raises(ValueError):
        fn(torch.rand(2, 2), torch.rand(2, 2))
    with pytest.raises(ValueError):
        fn(torch.rand(2, 3), torch.rand(3, 3))
    assert np.isfinite(fn(torch.rand(2, 3), torch.rand(2, 3))[1]["loss"])
