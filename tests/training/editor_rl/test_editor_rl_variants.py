"""Flow-GRPO options that follow one reference or another: flow_grpo's EMA counted in optimizer steps, the
detached unconditional branch, groups split across rollout batches / processes, and the deprecated spellings
(``gradient_accumulation_steps``, ``train_steps: window``) in a YAML and on the command line."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from editor_rl_runs import recipe_cli, toy_config, write_run_yaml
from modeling_miescore.training.editor_rl.policy import OptimizerStepEMA

pytestmark = pytest.mark.usefixtures("single_thread")


def test_ema_decays_as_flow_grpo_counts_optimizer_steps():
    """flow_grpo ema.py: after optimizer step n, when (n + 1) % 8 == 0, ema += (1 - min((1+n)/(10+n), 0.9)) *
    (p - ema); here the parameter takes the value n after step n, and the reference is recomputed by hand."""
    param = torch.nn.Parameter(torch.zeros(3))
    ema = OptimizerStepEMA([param], decay=0.9, update_interval=8)
    expected, updates = 0.0, []
    for n in range(1, 101):
        with torch.no_grad():
            param.fill_(float(n))
        updated = ema.optimizer_step([param])
        if (n + 1) % 8 == 0:
            expected += (1 - min((1 + n) / (10 + n), 0.9)) * (n - expected)
            updates.append(n)
        assert updated == ((n + 1) % 8 == 0)
    assert updates[:3] == [7, 15, 23] and ema.optimization_step == 100
    assert ema.shadow_params[0].tolist() == pytest.approx([expected] * 3, rel=1e-6)
    assert ema.decay_at(80) == pytest.approx(0.9) and ema.decay_at(79) < 0.9  # 0.9 after 81 optimizer steps


def test_the_trainer_counts_ema_in_optimizer_steps(toy_editor_path, editing_requests, tmp_path):
    """2 RL steps x 2 updates = 4 optimizer steps: the checkpointed EMA counter is 4 (it counted RL-step calls
    before, 2 with an interval of 1, 0 with 2) and, with interval 2, updates after steps 1 and 3."""
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    out = tmp_path / "ema"
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=2, save_steps=2,
                                     ema_decay=0.9, ema_update_interval=2)).train()
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["ema_step"] == 4


def test_a_detached_unconditional_branch_trains_only_the_conditional_prediction(toy_editor_path):
    """flow_grpo SD3: grad of combine(c, u.detach()) = w grad c; without detaching, w grad c + (1 - w) grad u."""
    from modeling_miescore.testing.toy_editor import load_toy_editor
    from modeling_miescore.training.editor_rl.rollout import TrainedStep
    from modeling_miescore.training.editor_rl.rollout import SampledStep
    from modeling_miescore.training.editor_rl.schedule import StepPlan
    from modeling_miescore.training.editor_rl.objective import recompute_step

    editor = load_toy_editor(str(toy_editor_path))
    model = editor.transformer
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 256, 3, generator=g)
    source = torch.randn(2, 256, 3, generator=g)
    text = torch.randn(2, 1, 32, generator=g)
    calls = [dict(hidden_states=torch.cat([x, source], 1), timestep=torch.full((2,), 0.5),
                  encoder_hidden_states=e, num_tokens=256) for e in (text, torch.zeros(2, 1, 32))]
    step = TrainedStep(SampledStep(0, 0.5, 0.4, 0.9, x, x + 0.01, torch.zeros(2)), calls)
    plan = StepPlan((0.7, 0.7), (0,), (True, True))

    def grad(fn):
        model.zero_grad()
        fn().sum().backward()
        return model.to_out.weight.grad.clone()

    w = editor.cfg_scale
    detached = grad(lambda: recompute_step(model, editor, step, plan, detach_uncond=True).mean)
    both = grad(lambda: recompute_step(model, editor, step, plan).mean)
    cond = grad(lambda: model(**calls[0])[0])
    uncond = grad(lambda: model(**calls[1])[0])
    dt = 0.4 - 0.5
    sigma_t = 0.7 * (0.5 / 0.5) ** 0.5  # the mean's velocity coefficient: (1 + sigma_t^2 (1 - sigma) / (2 sigma)) dt
    coefficient = (1 + sigma_t ** 2 * 0.5 / (2 * 0.5)) * dt
    assert torch.allclose(detached, coefficient * w * cond, atol=1e-5)
    assert torch.allclose(both, coefficient * (w * cond + (1 - w) * uncond), atol=1e-5)


def test_groups_split_across_rollout_batches_are_normalised_as_one_group(toy_editor_path, editing_requests, tmp_path):
    """6 images per rollout batch, G = 4, 2 batches: group 1 is sampled half in each batch (OmniGen2-RL spreads
    its groups the same way over GPUs); its four edits come back as one group with one set of advantages."""
    from modeling_miescore.training.editor_rl.objective import group_advantages
    from modeling_miescore.training.editor_rl.schedule import GroupSchedule, Piece
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    layout = GroupSchedule(4, 18, 1, 12, 32, 0)  # OmniGen2-RL's 4-machine layout
    assert layout.groups_per_step == 48 and layout.batches(1, 0) == [[Piece(0, 0, 12), Piece(1, 0, 6)]]
    assert layout.batches(1, 1) == [[Piece(1, 6, 6), Piece(2, 0, 12)]]
    out = tmp_path / "split"
    config = toy_config(toy_editor_path, editing_requests, out, per_device_batch_size=6, rollout_batches_per_step=2,
                        train_batch_size=2, updates_per_step=1, max_steps=1, save_steps=1, save_rollouts_steps=1)
    FlowGRPOEditorTrainer(config).train()
    records = [json.loads(x) for x in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    groups = {}
    for r in records:
        groups.setdefault(r["group"], []).append(r)
    assert sorted(groups) == [0, 1, 2] and all(sorted(r["sample"] for r in g) == [0, 1, 2, 3] for g in groups.values())
    ordered = [groups[k] for k in sorted(groups)]
    pairs = [(g[0]["key"], [r["reward"] for r in sorted(g, key=lambda r: r["sample"])]) for g in ordered]
    expected = [a for row in group_advantages(pairs).advantages for a in row]
    got = [r["advantage"] for g in ordered for r in sorted(g, key=lambda r: r["sample"])]
    assert got == pytest.approx(expected, abs=1e-9)
    assert len({r["edited"] for r in records}) == 12  # the two halves of group 1 are four different edits


def test_the_deprecated_spellings_still_run_with_a_warning(toy_editor_path, editing_requests, tmp_path):
    from trl import TrlParser

    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig

    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run")
    yaml_path = write_run_yaml(tmp_path / "old.yaml", config)
    text = open(yaml_path).read().replace("rollout_batches_per_step: 1\n", "gradient_accumulation_steps: 2\n")
    (tmp_path / "old.yaml").write_text(text.replace("train_steps: fraction\n", "train_steps: window\n"))
    with pytest.warns(FutureWarning) as caught:
        (parsed,) = TrlParser((FlowGRPOConfig,)).parse_args_and_config(["--config", str(tmp_path / "old.yaml")])
    messages = " ".join(str(w.message) for w in caught)
    assert "write rollout_batches_per_step" in messages and "write train_steps: 'sde_window'" in messages
    assert (parsed.rollout_batches_per_step, parsed.gradient_accumulation_steps, parsed.train_steps) == \
        (2, None, "sde_window")
    with pytest.warns(FutureWarning, match="rollout_batches_per_step"):
        (cli,) = TrlParser((FlowGRPOConfig,)).parse_args_and_config(
            ["--config", write_run_yaml(tmp_path / "new.yaml", config), "--gradient_accumulation_steps", "3"])
    assert cli.rollout_batches_per_step == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert recipe_cli("--config", yaml_path, "--gradient_accumulation_steps", "2",
                          "--rollout_batches_per_step", "3") == 2  # two values that disagree: exit 2
