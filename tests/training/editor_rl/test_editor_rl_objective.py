"""GRPO advantages and the clipped Flow-GRPO objective on hand-made examples."""

from __future__ import annotations

import math

import pytest
import torch

from modeling_miescore.training.editor_rl.objective import group_advantages
from modeling_miescore.training.editor_rl.objective import step_loss, step_weights, tempflow_weights
from modeling_miescore.training.editor_rl.rollout import SampledStep
from modeling_miescore.training.editor_rl.rollout import StepStats

S = math.sqrt(2 / 3)  # population std of 1, 2, 3


def test_group_advantages_with_a_failed_sample_a_zero_std_and_a_skipped_group():
    groups = [("a", [1.0, 2.0, 3.0, None]), ("b", [0.5, 0.5, 0.5, 0.5]), ("c", [None, None, None, 4.0])]
    result = group_advantages(groups)
    assert result.advantages[0] == pytest.approx([-1 / S, 0.0, 1 / S, None])
    assert result.advantages[0][3] is None
    assert result.advantages[1] == [0.0] * 4 and result.advantages[2] == [None] * 4
    assert (result.failures, result.zero_std_groups, result.skipped_groups) == (4, 1, 1)
    valid = [1, 2, 3, 0.5, 0.5, 0.5, 0.5, 4.0]
    assert result.reward_mean == pytest.approx(sum(valid) / 8)
    dropped = group_advantages(groups, drop_zero_std=True)
    assert dropped.advantages[1] == [None] * 4 and dropped.advantages[0] == result.advantages[0]


def test_batch_std_and_shared_keys_and_the_clip():
    groups = [("a", [1.0, 3.0]), ("b", [10.0, 30.0]), ("a", [2.0, None])]
    batch = group_advantages(groups, std_level="batch")
    every = [1, 3, 10, 30, 2]
    mean = sum(every) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in every) / 5)
    # key "a" spans two rollouts (two processes): mean of 1, 3, 2 = 2
    assert batch.advantages[0] == pytest.approx([-1 / std, 1 / std])
    assert batch.advantages[2] == pytest.approx([0.0, None])
    assert batch.advantages[1] == pytest.approx([-10 / std, 10 / std])
    spike = group_advantages([("x", [0.0] * 39 + [1.0])])
    assert spike.advantages[0][-1] == 5.0 and spike.advantages[0][0] == pytest.approx(-0.025 / math.sqrt(0.025 * 0.975))
    with pytest.raises(ValueError, match="std_level"):
        group_advantages(groups, std_level="global")


def _stats(log_prob, mean=None):
    log_prob = torch.tensor(log_prob, requires_grad=True)
    mean = torch.zeros(len(log_prob), 3) if mean is None else mean
    return StepStats(mean, torch.tensor(0.1), torch.tensor(0.5), mean, log_prob)


def test_clipped_objective_on_a_hand_example():
    old = torch.zeros(3)
    policy = _stats([math.log(1.2), math.log(0.7), math.log(1.0001)])
    adv = torch.tensor([1.0, 1.0, -2.0])
    mask = torch.tensor([1.0, 1.0, 1.0])
    result = step_loss(policy, old, adv, mask, clip_range=(0.1, 0.1))
    # max(-A r, -A clip(r)): 1.2 -> -1.1 (clipped), 0.7 -> -0.7 (unclipped, pessimistic), 1.0001 -> 2.0002
    assert result.loss.item() == pytest.approx((-1.1 - 0.7 + 2.0002) / 3, abs=1e-6)
    assert result.stats["clipped"] == 2.0 and result.stats["count"] == 3.0
    assert result.stats["approx_kl_sum"] == pytest.approx(0.5 * (math.log(1.2) ** 2 + math.log(0.7) ** 2 +
                                                                 math.log(1.0001) ** 2))
    result.loss.backward()
    grad = policy.log_prob.grad
    assert grad[0] == 0 and grad[1] == pytest.approx(-0.7 / 3) and grad[2] == pytest.approx(2 * 1.0001 / 3)
    masked = step_loss(_stats([0.0, 0.0, 0.0]), old, adv, torch.tensor([1.0, 0.0, 0.0]), clip_range=(0.1, 0.1))
    assert masked.loss.item() == pytest.approx(-1.0) and masked.stats["count"] == 1.0


def test_kl_term_and_asymmetric_clip():
    old = torch.zeros(2)
    mean = torch.ones(2, 3, requires_grad=True)
    policy = _stats([math.log(1 + 3e-4), math.log(1 - 3e-4)], mean=mean)
    reference = _stats([0.0, 0.0], mean=torch.zeros(2, 3))
    result = step_loss(policy, old, torch.tensor([1.0, -1.0]), torch.ones(2), clip_range=(1e-4, 5e-4), beta=0.04,
                       reference=reference)
    assert result.stats["clipped"] == 1.0  # 1 - 3e-4 is below 1 - 1e-4; 1 + 3e-4 is inside [.., 1 + 5e-4]
    kl = 1.0 / (2 * 0.5 ** 2)
    assert result.stats["kl_sum"] == pytest.approx(2 * kl)
    with pytest.raises(ValueError, match="reference"):
        step_loss(policy, old, torch.ones(2), torch.ones(2), clip_range=(1e-4, 1e-4), beta=0.1)


def test_tempflow_weights_are_omnigen2_rl_policy_loss_reweighting():
    """OmniGen2-RL train.py @6e0f1b9 l. 749-763, 900-901, in its own time convention (t = 1 - sigma, t 0 = noise):
    get_sigma_t(t, t_next if i == 0 else None) = coef sqrt((1 - t) / t') with t' = t_next at step 0 (its
    scheduler), std = sigma_t sqrt(dt), weight = sample_steps * std / mean(std); numpy, independent of the
    package."""
    import numpy as np

    sigmas = [1.0, 0.8, 0.5, 0.4, 0.2, 0.1]  # a 5-step schedule; the package's second sigma is 0.8
    trained = [0, 2, 4]
    coef = 0.7
    ts = 1 - np.array(sigmas)
    std = []
    for i in trained:
        t, t_next = ts[i], ts[i + 1]
        sigma_t = coef * np.sqrt((1 - t) / (t_next if i == 0 else t))
        std.append(sigma_t * np.sqrt(t_next - t))
    std = np.array(std)
    reference = len(trained) * std / std.mean()
    steps = [SampledStep(i, sigmas[i], sigmas[i + 1], sigmas[1], None, None, None) for i in trained]
    weights = tempflow_weights(steps, [coef] * 5)
    assert weights == pytest.approx(reference.tolist(), rel=1e-6)
    assert sum(weights) / 3 == pytest.approx(3.0) and weights[0] > weights[1] > weights[2]
    assert step_weights(steps, [coef] * 5, "tempflow") == weights
    assert step_weights(steps, [coef] * 5, "tempflow_mean_one") == pytest.approx((reference / 3).tolist(), rel=1e-6)
    assert step_weights(steps, [coef] * 5, "none") == [1.0, 1.0, 1.0]
