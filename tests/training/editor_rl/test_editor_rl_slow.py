"""Long editor-RL runs (slow): the tiny diffusers editor learns a reachable reward for several seeds while a
large beta holds it near the reference; kill -9 + --resume gives the uninterrupted run's adapter; two
``accelerate launch`` processes train like one process with the same global batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from editor_rl_runs import toy_config, write_run_yaml

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "trainers" / "flow_grpo_editor.py"
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("single_thread")]


def _recipe_env(**extra) -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


def _tiny_recipe_run(tmp_path, tiny_editor_path, editing_requests, **overrides):
    sys.path.insert(0, str(RECIPE.parent))
    import flow_grpo_editor
    from trl import TrlParser

    args = ["--config", str(ROOT / "trainers/configs/flow_grpo_editor_tiny_cpu.yaml"),
            "--model_name_or_path", str(tiny_editor_path("flux2-klein")), "--dataset", str(editing_requests),
            "--output_dir", str(tmp_path / f"run-{len(list(tmp_path.iterdir()))}"), "--progress", "false"]
    for key, value in overrides.items():
        args += [f"--{key}", str(value)]
    script, config = TrlParser((flow_grpo_editor.ScriptArguments, flow_grpo_editor.FlowGRPOConfig)).parse_args_and_config(args)
    return [m["reward_mean"] for m in flow_grpo_editor.main(script, config)["metrics"]]


def _gain(rewards):
    return sum(rewards[-5:]) / 5 - sum(rewards[:3]) / 3


def test_the_tiny_diffusers_editor_learns_for_several_seeds_and_a_large_beta_holds_it(tmp_path, tiny_editor_path,
                                                                                     editing_requests):
    curves = {seed: _tiny_recipe_run(tmp_path, tiny_editor_path, editing_requests, seed=seed) for seed in (0, 1, 2)}
    held = _tiny_recipe_run(tmp_path, tiny_editor_path, editing_requests, seed=0, beta=1000)
    for seed, rewards in curves.items():
        print(f"seed {seed}: " + " ".join(f"{r:.4f}" for r in rewards[::5]))
        assert _gain(rewards) > 0.02, (seed, rewards)  # the within-group reward std is ~0.005
    print("beta 1000: " + " ".join(f"{r:.4f}" for r in held[::5]))
    assert abs(_gain(held)) < 0.25 * _gain(curves[0]), (held, curves[0])


def _run_toy_recipe(config_path, env, timeout=600):
    return subprocess.Popen([sys.executable, str(RECIPE), "--config", config_path], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _full_then_killed_and_resumed(tmp_path, toy_editor_path, editing_requests, kill_after: str, delay: str,
                                  **settings):
    """The toy recipe run whole into ``tmp_path/full``, and again into ``tmp_path/killed``, SIGKILLed just after its
    ``kill_after`` checkpoint and resumed to the end. Returns ``(full, killed)`` folders and ``adapters_equal``."""
    from safetensors.torch import load_file

    runs = {name: write_run_yaml(tmp_path / f"{name}.yaml",
                                 toy_config(toy_editor_path, editing_requests, tmp_path / name, **settings))
            for name in ("full", "killed")}
    assert subprocess.run([sys.executable, str(RECIPE), "--config", runs["full"]], env=_recipe_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=600).returncode == 0
    full, killed = tmp_path / "full", tmp_path / "killed"
    process = _run_toy_recipe(runs["killed"], _recipe_env(MIESCORE_TEST_REWARD_DELAY=delay))
    deadline = time.monotonic() + 600
    while not (killed / kill_after).is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(float(delay) + 0.2)  # into the next step
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (killed / "pytorch_lora_weights.safetensors").exists()
    done = subprocess.run([sys.executable, str(RECIPE), "--config", runs["killed"], "--resume", "true"],
                          env=_recipe_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = (load_file(str(folder / "pytorch_lora_weights.safetensors")) for folder in (full, killed))
    return full, killed, a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_kill_9_then_resume_gives_the_uninterrupted_adapter(tmp_path, toy_editor_path, editing_requests):
    _, killed, adapters_equal = _full_then_killed_and_resumed(tmp_path, toy_editor_path, editing_requests,
                                                              "checkpoint-2", "0.5", max_steps=6, save_steps=2)
    assert adapters_equal
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_kill_9_then_resume_keeps_the_eval_history_the_alarms_and_the_best_checkpoint(tmp_path, toy_editor_path,
                                                                                       editing_requests):
    """Held-out evals with a gold reward that prefers the opposite of the proxy: a run killed with SIGKILL after its
    second checkpoint and resumed ends as the uninterrupted run (evals, alarms, best checkpoint, exported adapter)."""
    golds = "modeling_miescore.testing.editor_rewards"
    full, killed, adapters_equal = _full_then_killed_and_resumed(
        tmp_path, toy_editor_path, editing_requests, "checkpoint-4", "0.3", max_steps=6, save_steps=2,
        eval_dataset=str(editing_requests), eval_steps=2, eval_images_per_request=3,
        eval_rewards={"gold": f"{golds}:low_redness"}, hacking_patience=1, metric_for_best_model="eval/gold",
        load_best_model_at_end=True, save_total_limit=2)
    assert adapters_equal
    assert (full / "evals.jsonl").read_text() == (killed / "evals.jsonl").read_text()
    first, second = (json.loads((folder / "run.json").read_text()) for folder in (full, killed))
    assert first["hacking_alarms"] and first["hacking_alarms"] == second["hacking_alarms"]
    assert first["best_model"] == second["best_model"] and (killed / second["best_model"]["checkpoint"]).is_dir()


def test_two_accelerate_processes_train_like_one(tmp_path, toy_editor_path, editing_requests):
    """2 processes x 1 group = 1 process x 2 groups: the same groups, seeds and gathered advantages, DDP-averaged
    gradients equal to the one-process mean, so the adapters agree to float rounding."""
    from safetensors.torch import load_file

    one = write_run_yaml(tmp_path / "one.yaml", toy_config(toy_editor_path, editing_requests, tmp_path / "one",
                                                           max_steps=3, save_steps=3, updates_per_step=1))
    two = write_run_yaml(tmp_path / "two.yaml", toy_config(toy_editor_path, editing_requests, tmp_path / "two",
                                                           max_steps=3, save_steps=3, updates_per_step=1,
                                                           per_device_batch_size=4))
    single = subprocess.run([sys.executable, str(RECIPE), "--config", one], env=_recipe_env(), cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--mixed_precision", "no", "--main_process_port", "29561", str(RECIPE), "--config", two]
    multi = subprocess.run(launch, env=_recipe_env(), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert multi.returncode == 0, multi.stderr[-4000:]
    a = load_file(str(tmp_path / "one" / "pytorch_lora_weights.safetensors"))
    b = load_file(str(tmp_path / "two" / "pytorch_lora_weights.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4) for k in a)
    lines = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3]  # one line per step, from the main process
    assert [m["reward_mean"] for m in lines] == pytest.approx([m["reward_mean"] for m in ref], rel=1e-4)
    assert (tmp_path / "two" / "checkpoint-3" / "rng-1.safetensors").is_file()  # really two processes


def test_two_accelerate_processes_with_served_rewards_keep_groups_whole_and_normalise_after_gathering(
        tmp_path, toy_editor_path, editing_requests, miescore_replicas, tiny_miescore):
    """`accelerate launch --num_processes 2` with `serve:URL,URL`: every group is sampled on one process and
    scored whole on one replica; with batch-level std, every process's advantages use the std of both
    processes' rewards (gathered before normalising), which differs from each process's own."""
    from modeling_miescore.training.editor_rl.objective import group_advantages

    for _, backend in miescore_replicas:
        backend.seen.clear()
    out = tmp_path / "two"
    urls = ",".join(server.url for server, _ in miescore_replicas)
    config = write_run_yaml(tmp_path / "two.yaml", toy_config(
        toy_editor_path, editing_requests, out, reward=f"serve:{urls}", max_steps=2, save_steps=2,
        updates_per_step=1, std_level="batch", save_rollouts_steps=1))
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--mixed_precision", "no", "--main_process_port", "29563", str(RECIPE), "--config", config]
    done = subprocess.run(launch, env=_recipe_env(), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    records = [json.loads(x) for x in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 4 * 4 and [m["step"] for m in metrics] == [1, 2]  # 2 steps x 4 groups x G = 4
    for step, m in zip((1, 2), metrics):
        mine = [r for r in records if r["step"] == step]
        groups = {}
        for r in mine:
            groups.setdefault(r["group"], []).append(r)
        assert all(len(g) == 4 and len({r["rank"] for r in g}) == 1 for g in groups.values())  # never split
        assert sorted(g[0]["rank"] for g in groups.values()) == [0, 0, 1, 1]
        assert m["reward_mean"] == pytest.approx(sum(r["reward"] for r in mine) / len(mine), abs=1e-12)

        def advantages(subset):
            pairs = [(g[0]["key"], [r["reward"] for r in g]) for g in subset]
            return [a for row in group_advantages(pairs, std_level="batch").advantages for a in row]

        ordered = [groups[k] for k in sorted(groups)]
        assert [r["advantage"] for g in ordered for r in g] == pytest.approx(advantages(ordered), abs=1e-9)
        alone = [a for rank in (0, 1) for a in advantages([g for g in ordered if g[0]["rank"] == rank])]
        assert max(abs(a - b) for a, b in zip(alone, advantages(ordered))) > 1e-3  # gathering changed them
    # each group scored whole on one replica (per instruction, a replica saw a multiple of G edits), both used
    for _, backend in miescore_replicas:
        counts = {}
        for instruction, _ in backend.seen:
            counts[instruction] = counts.get(instruction, 0) + 1
        assert counts and all(c % 4 == 0 for c in counts.values()), counts
    # and the rewards are what the scorer returns for the saved edits
    folder = out / "rollouts"
    samples = [{"sources": [str(folder / s) for s in r["sources"]], "edited": str(folder / r["edited"]),
                "instruction": r["instruction"]} for r in records]
    reference = tiny_miescore.score_batch(samples, batch_size=4, reuse_prefix=False)
    assert [r["reward"] for r in records] == pytest.approx([x["overall"] / 100 for x in reference], abs=1e-5)


def test_two_accelerate_processes_split_a_group_and_normalise_it_whole(tmp_path, toy_editor_path, editing_requests):
    """6 images per process, G = 4, 2 processes: 3 groups per step, group 1 sampled half on each process (as
    OmniGen2-RL spreads its groups over GPUs); after gathering its four rewards are one group's."""
    from modeling_miescore.training.editor_rl.objective import group_advantages

    out = tmp_path / "split"
    config = write_run_yaml(tmp_path / "split.yaml", toy_config(
        toy_editor_path, editing_requests, out, per_device_batch_size=6, train_batch_size=2, updates_per_step=1,
        max_steps=2, save_steps=2, save_rollouts_steps=1))
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--mixed_precision", "no", "--main_process_port", "29565", str(RECIPE), "--config", config]
    done = subprocess.run(launch, env=_recipe_env(), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    records = [json.loads(x) for x in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    for step in (1, 2):
        groups = {}
        for r in (r for r in records if r["step"] == step):
            groups.setdefault(r["group"], []).append(r)
        assert len(groups) == 3 and all(sorted(r["sample"] for r in g) == [0, 1, 2, 3] for g in groups.values())
        middle = groups[min(groups) + 1]
        assert {r["rank"]: sorted(x["sample"] for x in middle if x["rank"] == r["rank"]) for r in middle} == \
            {0: [0, 1], 1: [2, 3]}
        ordered = [sorted(groups[k], key=lambda r: r["sample"]) for k in sorted(groups)]
        expected = group_advantages([(g[0]["key"], [r["reward"] for r in g]) for g in ordered]).advantages
        assert [r["advantage"] for g in ordered for r in g] == pytest.approx([a for row in expected for a in row])
