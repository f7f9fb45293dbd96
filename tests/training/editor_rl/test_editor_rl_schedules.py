"""Sampling schedules outside training (``miescore edit``, the sample grid) and the step plans of the Flow-GRPO
variants: CFG only on the first cfg_fraction of steps, the last-step mode, Flow-GRPO-Fast's one shared prefix per
group, shared initial noise, MixGRPO's sliding window and the deprecated ``window`` spelling."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from modeling_miescore.cli.main import main
from modeling_miescore.training.editor_rl.rollout import sample_with_schedule
from modeling_miescore.training.editor_rl.schedule import (PIPELINE_SCHEDULE, SamplingSchedule, make_step_plan,
                                                           mixgrpo_window)

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def _toy(toy_editor_path):
    from modeling_miescore.testing.toy_editor import load_toy_editor

    return load_toy_editor(str(toy_editor_path))


def _count_rows(transformer):
    """A forward pre-hook on the toy transformer's first layer: the forwards it really computes and their batch
    rows (a call the rollout answers without the network never reaches it)."""
    counts = {"calls": 0, "rows": 0}

    def hook(module, args):
        counts["calls"] += 1
        counts["rows"] += args[0].shape[0]

    return counts, transformer.to_in.register_forward_pre_hook(hook)


def test_a_cfg_fraction_guides_only_the_first_steps_and_says_so(toy_editor_path):
    editor = _toy(toy_editor_path)
    source = [np.full((16, 16, 3), 200, dtype=np.uint8)]
    from PIL import Image

    sources = [Image.fromarray(source[0])]
    counts, handle = _count_rows(editor.transformer)
    stock = sample_with_schedule(editor, sources, "make it red", num_images=2, num_steps=4, seed=3)
    full_calls = counts["calls"]
    trained = SamplingSchedule(cfg_fraction=0.25)
    partial = sample_with_schedule(editor, sources, "make it red", num_images=2, num_steps=4, seed=3, schedule=trained)
    handle.remove()
    assert full_calls == 8 and counts["calls"] - full_calls == 2 * 2 + 2  # steps 0, 1 guided (i/T <= 0.25), 2, 3 not
    assert not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(stock, partial))
    # the ODE schedule with CFG everywhere is the stock pipeline, image for image
    every = sample_with_schedule(editor, sources, "make it red", num_images=2, num_steps=4, seed=3,
                                 schedule=SamplingSchedule(cfg_fraction=1.0, noise_level=0.0, last_step="deterministic"))
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(stock, every))
    assert SamplingSchedule(cfg_fraction=0.5).describe(20) == "CFG on steps i/T <= 0.5 (11 of 20 steps), Euler ODE steps"
    assert PIPELINE_SCHEDULE.describe(28) == "CFG on every step (28), Euler ODE steps"
    assert SamplingSchedule.trained({"cfg_fraction": 0.6, "last_step": "deterministic", "noise_level": 0.7}) == \
        SamplingSchedule(cfg_fraction=0.6, last_step="deterministic")
    assert SamplingSchedule.trained({"cfg_fraction": 0.6, "noise_level": 0.7}, noise=True).plan(5).noise_levels == \
        (0.7,) * 5
    assert SamplingSchedule(noise_level=0.7, last_step="deterministic").plan(5).noise_levels == (0.7,) * 4 + (0.0,)


def test_edit_samples_with_the_trained_cfg_schedule_records_it_and_refuses_mixing(toy_editor_path, editing_requests,
                                                                                   tmp_path, capsys):
    base = ["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(editing_requests), "--steps",
            "4", "--limit", "1", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "stock")]) == 0
    assert main(base + ["--out", str(tmp_path / "trained"), "--cfg-fraction", "0.25"]) == 0
    err = capsys.readouterr().err
    assert "sampling: CFG on every step (4), Euler ODE steps" in err
    assert "sampling: CFG on steps i/T <= 0.25 (2 of 4 steps), Euler ODE steps" in err
    record = json.loads((tmp_path / "trained" / "sampling.json").read_text())
    assert record["cfg_fraction"] == 0.25 and record["guided_steps"] == 2 and record["noise_level"] == 0.0
    line = json.loads((tmp_path / "trained" / "edits.jsonl").read_text().splitlines()[0])
    stock = json.loads((tmp_path / "stock" / "edits.jsonl").read_text().splitlines()[0])
    from PIL import Image

    a = np.asarray(Image.open(tmp_path / "trained" / line["edited"]))
    b = np.asarray(Image.open(tmp_path / "stock" / stock["edited"]))
    assert not np.array_equal(a, b)
    # another schedule into the same folder: one line, exit 2, nothing written
    before = (tmp_path / "trained" / "edits.jsonl").read_text()
    assert main(base + ["--out", str(tmp_path / "trained")]) == 2
    err = capsys.readouterr().err
    assert "holds edits sampled with CFG on steps i/T <= 0.25" in err and "Traceback" not in err
    assert (tmp_path / "trained" / "edits.jsonl").read_text() == before
    with pytest.raises(SystemExit) as exit_info:  # argparse's one line
        main(base + ["--out", str(tmp_path / "bad"), "--cfg-fraction", "1.5"])
    assert exit_info.value.code == 2 and "--cfg-fraction: must lie in [0, 1]" in capsys.readouterr().err


def test_fast_branching_runs_the_prefix_once_per_group(toy_editor_path):
    """Flow-GRPO-Fast: the group shares x_T, the ODE prefix before the window runs one row per call, the members
    are identical at the branch and differ after it; per-member prefixes (sde_window) run G rows everywhere."""
    from PIL import Image

    from modeling_miescore.training.editor_rl.rollout import sample_group

    editor = _toy(toy_editor_path)
    editor.cfg_scale = 1.0
    sources = [Image.fromarray(np.full((16, 16, 3), 90, dtype=np.uint8))]
    plans = {mode: make_step_plan(6, random.Random(4), noise_level=1.0, train_steps=mode, window_size=2,
                                  window_range=(0.5, 1.0), shared_noise=mode == "fast") for mode in ("fast", "sde_window")}
    start = plans["fast"].trained[0]
    assert plans["fast"].trained == plans["sde_window"].trained and start >= 3
    assert plans["fast"].shared_prefix == start and plans["sde_window"].shared_prefix == 0
    counts, handle = _count_rows(editor.transformer)
    fast = sample_group(editor, key="k", sources=sources, source_ids=["s"], instruction="i", num_images=4,
                        plan=plans["fast"], seed=1, shared_noise=True)
    fast_rows, counts["rows"] = counts["rows"], 0
    member = sample_group(editor, key="k", sources=sources, source_ids=["s"], instruction="i", num_images=4,
                          plan=plans["sde_window"], seed=1)
    handle.remove()
    assert fast_rows == start * 1 + (6 - start) * 4 and counts["rows"] == 6 * 4  # one call per step either way
    assert fast.transformer_counts == {"calls": 6, "rows": fast_rows}
    branch = fast.steps[0].sampled.sample  # x at the window's first step: one shared trajectory
    assert all(torch.equal(branch[0], branch[k]) for k in range(1, 4))
    after = fast.steps[-1].sampled.next_sample
    assert not torch.equal(after[0], after[1])  # the SDE window branched the members
    x = member.steps[0].sampled.sample
    assert not torch.equal(x[0], x[1])  # per-member prefixes from per-member noise
    with pytest.raises(ValueError, match="same_latent"):
        make_step_plan(6, random.Random(4), noise_level=1.0, train_steps="fast", window_size=2)


def test_shared_initial_noise_gives_every_member_the_same_x_T(toy_editor_path):
    from PIL import Image

    from modeling_miescore.training.editor_rl.rollout import sample_group

    editor = _toy(toy_editor_path)
    sources = [Image.fromarray(np.full((16, 16, 3), 30, dtype=np.uint8))]
    plan = make_step_plan(4, random.Random(0), noise_level=1.0, train_fraction=1.0)
    shared = sample_group(editor, key="k", sources=sources, source_ids=["s"], instruction="i", num_images=3,
                          plan=plan, seed=7, shared_noise=True)
    own = sample_group(editor, key="k", sources=sources, source_ids=["s"], instruction="i", num_images=3, plan=plan,
                       seed=7)
    x_t = shared.steps[0].sampled.sample  # step 0 is trained: its input is x_T
    assert plan.trained[0] == 0 and all(torch.equal(x_t[0], x_t[k]) for k in (1, 2))
    assert not torch.equal(own.steps[0].sampled.sample[0], own.steps[0].sampled.sample[1])
    assert torch.equal(own.steps[0].sampled.sample[0], x_t[0])  # member 0 draws what the shared noise is
    assert len({np.asarray(im).tobytes() for im in shared.images}) == 3  # the SDE steps still differ


def test_mixgrpo_window_moves_with_the_iteration_and_rolls_back():
    # MixGRPO's script: T = 25, window 4, a shift of 1 every 25 iterations, roll back past T - 2 = 23
    assert mixgrpo_window(1, 25, 4) == (0, 1, 2, 3) and mixgrpo_window(25, 25, 4) == (0, 1, 2, 3)
    assert mixgrpo_window(26, 25, 4) == (1, 2, 3, 4) and mixgrpo_window(51, 25, 4) == (2, 3, 4, 5)
    assert mixgrpo_window(1 + 25 * 20, 25, 4) == (20, 21, 22)  # clipped at max_timesteps = 23 (exclusive)
    assert mixgrpo_window(1 + 25 * 23, 25, 4) == (23,)  # MixGRPO trains nothing here; we train step 23 alone
    assert mixgrpo_window(1 + 25 * 24, 25, 4) == (0, 1, 2, 3)  # rolled back
    assert mixgrpo_window(3, 10, 2, shift_interval=1, stride=3) == (6, 7)
    assert mixgrpo_window(4, 10, 2, shift_interval=1, stride=3) == (0, 1)  # start 9 > T - 2 = 8: back to 0
    plan = make_step_plan(25, random.Random(0), noise_level=0.7, train_steps="mixgrpo", window_size=4, iteration=26)
    assert plan.trained == (1, 2, 3, 4) and [i for i, a in enumerate(plan.noise_levels) if a] == [1, 2, 3, 4]


def test_the_last_step_mode_and_the_deprecated_window_spelling():
    stochastic = make_step_plan(5, random.Random(0), noise_level=0.7)
    deterministic = make_step_plan(5, random.Random(0), noise_level=0.7, last_step="deterministic")
    assert stochastic.noise_levels == (0.7,) * 5 and deterministic.noise_levels == (0.7,) * 4 + (0.0,)
    assert stochastic.trained == deterministic.trained and 4 not in stochastic.trained
    with pytest.warns(FutureWarning, match="sde_window"):
        old = make_step_plan(10, random.Random(2), noise_level=1.0, train_steps="window", window_size=3)
    assert old == make_step_plan(10, random.Random(2), noise_level=1.0, train_steps="sde_window", window_size=3)


def test_fast_branching_on_the_stock_qwen_image_edit_plus_pipeline(tiny_editor_path):
    """The shared prefix inside a real diffusers pipeline (true CFG, per-prompt img_shapes, generator lists):
    3 guided prefix steps at one row per branch call, then the window and the rest at G rows."""
    from PIL import Image

    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
    from modeling_miescore.training.editor_rl.editors import load_editor
    from modeling_miescore.training.editor_rl.rollout import sample_group

    editor = load_editor("qwen-image-edit-plus", str(tiny_editor_path("qwen-image-edit-plus")),
                         options=TINY_EDITOR_OPTIONS["qwen-image-edit-plus"])
    source = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    plan = make_step_plan(6, random.Random(3), noise_level=1.0, train_steps="fast", window_size=2,
                          window_range=(0.5, 1.0), shared_noise=True, cfg_fraction=0.6)
    rollout = sample_group(editor, key="k", sources=[source], source_ids=["s"], instruction="make it red",
                           num_images=3, plan=plan, seed=1, shared_noise=True)
    assert plan.trained == (3, 4) and plan.shared_prefix == 3
    # steps 0-3 guided (2 calls), 4-5 not; rows: 3 prefix steps x 2 calls x 1, step 3 x 2 x 3, steps 4-5 x 1 x 3
    assert rollout.transformer_counts == {"calls": 10, "rows": 6 + 6 + 6}
    x = rollout.steps[0].sampled.sample
    assert torch.equal(x[0], x[1]) and torch.equal(x[0], x[2])
    assert not torch.equal(rollout.steps[-1].sampled.next_sample[0], rollout.steps[-1].sampled.next_sample[1])


@pytest.mark.parametrize("grid_schedule, guided_steps", [("trained", 2), ("pipeline", 4)])
def test_the_sample_grid_guides_the_steps_its_schedule_names(toy_editor_path, editing_requests, tmp_path,
                                                             grid_schedule, guided_steps):
    """The grid of a run trained with cfg_fraction 0.25 guides only steps 0 and 1 of 4 (i/T <= 0.25; ``trained``, the default), or
    every step as the stock pipeline does (``pipeline``): counted as the toy transformer's forwards."""
    from editor_rl_runs import toy_config
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run", max_steps=1, save_steps=1,
                        cfg_scale=2.0, cfg_fraction=0.25, sample_grid_steps=1, sample_grid_groups=1,
                        sample_grid_images=2, sample_grid_schedule=grid_schedule)
    trainer = FlowGRPOEditorTrainer(config)
    trainer.train()
    counts, handle = _count_rows(trainer.editor.transformer)
    try:
        grid = trainer.save_grid(7)
    finally:
        handle.remove()
    assert grid is not None and grid.exists()
    # one transformer forward per step, two on a guided one (conditional + unconditional)
    assert counts["calls"] == 4 + guided_steps
