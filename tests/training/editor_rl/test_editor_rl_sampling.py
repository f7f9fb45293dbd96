"""Flow-GRPO sampling: the SDE / CPS step against its formula computed independently here, the a = 0 step
against diffusers' Euler step, step plans, and a recorded rollout of a stock pipeline."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from scipy.stats import norm

from modeling_miescore.training.editor_rl.rollout import LogProbScheduler
from modeling_miescore.training.editor_rl.rollout import gaussian_kl_on_means, sde_step
from modeling_miescore.training.editor_rl.schedule import StepPlan, make_step_plan

pytestmark = pytest.mark.usefixtures("single_thread")


def _reference_sde(x, v, sigma, sigma_next, a, sigma_max, x_next):
    """Flow-GRPO sec. 4.1 in float64 numpy: sigma_t, mean, std and the element-averaged Gaussian log-density."""
    sub = sigma_max if sigma == 1 else sigma
    sigma_t = a * math.sqrt(sigma / (1 - sub))
    dt = sigma_next - sigma
    mean = x * (1 + sigma_t ** 2 / (2 * sigma) * dt) + v * (1 + sigma_t ** 2 * (1 - sigma) / (2 * sigma)) * dt
    std = sigma_t * math.sqrt(-dt)
    logp = norm.logpdf(x_next, loc=mean, scale=std).reshape(len(x), -1).mean(axis=1)
    return sigma_t, mean, std, logp


@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.8), (0.6, 0.45)])
def test_sde_step_matches_the_formula(sigma, sigma_next):
    rng = np.random.default_rng(0)
    x, v = rng.normal(size=(3, 5, 4)), rng.normal(size=(3, 5, 4))
    x_next = rng.normal(size=(3, 5, 4)) * 0.3 + x
    stats = sde_step(torch.tensor(v, dtype=torch.float32), torch.tensor(x, dtype=torch.float32), sigma, sigma_next,
                     noise_level=0.7, sigma_max=0.9, next_sample=torch.tensor(x_next, dtype=torch.float32))
    sigma_t, mean, std, logp = _reference_sde(x, v, sigma, sigma_next, 0.7, 0.9, x_next)
    assert stats.mean.dtype == torch.float32 and stats.log_prob.shape == (3,)
    np.testing.assert_allclose(float(stats.sigma_t), sigma_t, rtol=1e-6)
    np.testing.assert_allclose(float(stats.std), std, rtol=1e-6)
    np.testing.assert_allclose(stats.mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.log_prob.numpy(), logp, rtol=1e-5)


def test_sde_sample_has_the_steps_mean_and_std():
    x, v = torch.zeros(1, 20000, 1), torch.ones(1, 20000, 1)
    stats = sde_step(v, x, 0.5, 0.4, noise_level=0.7, sigma_max=0.9, generator=torch.Generator().manual_seed(0))
    residual = stats.next_sample - stats.mean
    assert abs(float(residual.mean())) < 4 * float(stats.std) / math.sqrt(20000)
    assert float(residual.std()) == pytest.approx(float(stats.std), rel=0.03)


def test_cps_step_matches_the_formula():
    rng = np.random.default_rng(1)
    x, v, x_next = (rng.normal(size=(2, 6)) for _ in range(3))
    stats = sde_step(torch.tensor(v, dtype=torch.float32), torch.tensor(x, dtype=torch.float32), 0.7, 0.5,
                     noise_level=0.8, sigma_max=0.9, sde_type="cps", next_sample=torch.tensor(x_next, dtype=torch.float32))
    s = 0.5 * math.sin(0.8 * math.pi / 2)
    mean = (x - 0.7 * v) * 0.5 + (x + 0.3 * v) * math.sqrt(0.25 - s ** 2)
    np.testing.assert_allclose(stats.mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.log_prob.numpy(), (-(x_next - mean) ** 2).mean(axis=1), rtol=1e-5, atol=1e-6)


def test_kl_on_means_and_the_dt_choice():
    mean, ref = torch.ones(2, 4), torch.zeros(2, 4)
    sigma_t, std = torch.tensor(0.5), torch.tensor(0.5 * math.sqrt(0.1))
    assert gaussian_kl_on_means(mean, ref, sigma_t, std).tolist() == pytest.approx([2.0, 2.0])  # 1 / (2 * 0.25)
    assert gaussian_kl_on_means(mean, ref, sigma_t, std, keep_dt=True).tolist() == pytest.approx([20.0, 20.0])


def test_a_zero_step_is_diffusers_euler_step():
    from diffusers import FlowMatchEulerDiscreteScheduler

    stock = FlowMatchEulerDiscreteScheduler(shift=3.0)
    ours = LogProbScheduler.from_config(stock.config)
    latents = torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(0))
    plan = StepPlan((0.0,) * 5, (0, 1, 2, 3), (True,) * 5)
    ours.begin_rollout(plan, torch.Generator().manual_seed(1))
    a, b = latents.clone(), latents.clone()
    for scheduler in (stock, ours):
        scheduler.set_timesteps(5)
    for step, t in enumerate(stock.timesteps):
        velocity = torch.sin(a + step)
        a = stock.step(velocity, t, a, return_dict=False)[0]
        b = ours.step(velocity, t, b, return_dict=False)[0]
        assert torch.equal(a, b)
    recorded = ours.end_rollout()
    assert sorted(recorded) == [0, 1, 2, 3] and all(r.log_prob is None for r in recorded.values())


def test_step_plans_never_train_the_last_step():
    for seed in range(20):
        plan = make_step_plan(20, random.Random(seed), noise_level=0.7, train_fraction=0.6, cfg_fraction=0.6)
        assert len(plan.trained) == 12 and 19 not in plan.trained and list(plan.trained) == sorted(plan.trained)
        assert plan.noise_levels == (0.7,) * 20 and sum(plan.cfg) == 13  # i/T <= 0.6 (OmniGen2-RL, inclusive)
        window = make_step_plan(10, random.Random(seed), noise_level=1.0, train_steps="sde_window", window_size=3,
                                window_range=(0.0, 0.5))
        start = window.trained[0]
        assert window.trained == (start, start + 1, start + 2) and start + 3 <= 5
        assert [i for i, a in enumerate(window.noise_levels) if a > 0] == list(window.trained)
    assert make_step_plan(4, random.Random(0), noise_level=1.0, train_fraction=1.0).trained == (0, 1, 2)
    assert not any(make_step_plan(4, random.Random(0), noise_level=1.0, cfg_fraction=0.0).cfg)
    with pytest.raises(ValueError, match="window_range"):
        make_step_plan(10, random.Random(0), noise_level=1.0, train_steps="sde_window", window_size=4,
                       window_range=(0.9, 1.0))


def test_ode_rollout_reproduces_the_stock_pipeline(tiny_editor_path):
    """With every noise level 0 the recorded rollout is exactly the stock pipeline's output (nothing of its loop
    changes but the scheduler class), and unguided late steps give the pipeline's own one-branch result."""
    from PIL import Image

    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
    from modeling_miescore.training.editor_rl.editors import load_editor
    from modeling_miescore.training.editor_rl.rollout import sample_group

    editor = load_editor("flux2-klein", str(tiny_editor_path("flux2-klein")),
                         options=TINY_EDITOR_OPTIONS["flux2-klein"])
    source = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    stock = editor([source], "make it red", num_images=2, num_steps=3, generator=torch.Generator().manual_seed(5))
    plan = StepPlan((0.0, 0.0, 0.0), (0, 1), (True, True, True))
    rollout = sample_group(editor, key="k", sources=[source], source_ids=["s"], instruction="make it red",
                           num_images=2, plan=plan, seed=5)
    assert [np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(stock, rollout.images)] == [True, True]
    assert [len(s.calls) for s in rollout.steps] == [2, 2]  # conditional + unconditional, both recorded
    unguided = sample_group(editor, key="k", sources=[source], source_ids=["s"], instruction="make it red",
                            num_images=2, plan=StepPlan((0.0,) * 3, (0, 1), (False,) * 3), seed=5)
    plain = editor([source], "make it red", num_images=2, num_steps=3, generator=torch.Generator().manual_seed(5),
                   guided=False)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(plain, unguided.images))
    assert [len(s.calls) for s in unguided.steps] == [1, 1]
