"""Full fine-tuning of an editor with its transformer sharded by FSDP2 (`finetuning: full` + `fsdp: true`, issue 23
part 5). Fast: the settings that cannot work are refused, the block lists of a diffusers transformer are found,
a checkpoint's name-keyed (FSDP full state dict) optimizer state round-trips. Slow: two `accelerate launch`
processes sharding the tiny Flux2-Klein transformer train like one unsharded process over the same groups, and a
resume gives the uninterrupted run's weights bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from editor_rl_runs import REDNESS, toy_config
from modeling_miescore.hub.errors import MIEScoreInputError

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "trainers" / "flow_grpo_editor.py"
WEIGHTS = Path("transformer") / "diffusion_pytorch_model.safetensors"


@pytest.mark.parametrize("overrides, message", [
    (dict(fsdp=True), "finetuning: full"),  # a LoRA trains with DDP
    (dict(fsdp=True, finetuning="full", ema_decay=0.9), "ema_decay"),
])
def test_fsdp_settings_that_cannot_work_are_refused(toy_editor_path, editing_requests, tmp_path, overrides, message):
    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run", **overrides)
    with pytest.raises(MIEScoreInputError, match=message):
        config.validate(num_processes=2)
    toy_config(toy_editor_path, editing_requests, tmp_path / "run", fsdp=True, finetuning="full").validate(2)


def test_the_block_lists_of_a_diffusers_transformer_are_found(tiny_editor_path):
    from diffusers import Flux2Transformer2DModel

    from modeling_miescore.training.editor_rl.policy import block_lists

    model = Flux2Transformer2DModel.from_pretrained(tiny_editor_path("flux2-klein") / "transformer")
    assert {k: len(v) for k, v in block_lists(model).items()} == {"transformer_blocks": 1,
                                                                  "single_transformer_blocks": 1}


def test_a_name_keyed_optimizer_state_round_trips_through_a_checkpoint(tmp_path):
    """FSDP's full optimizer state dict keys parameters by name (with dots); the checkpoint keeps them."""
    from modeling_miescore.training.editor_rl.checkpoints import load_checkpoint, save_checkpoint

    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    raw = optimizer.state_dict()
    names = ["0.weight", "0.bias"]
    by_name = {"state": {names[i]: v for i, v in raw["state"].items()},
               "param_groups": [{**g, "params": names} for g in raw["param_groups"]]}
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    save_checkpoint(tmp_path, 1, trainable=dict(model.named_parameters()), optimizer=by_name, lr_scheduler=scheduler)
    loaded = []
    load_checkpoint(tmp_path / "checkpoint-1", optimizer=loaded.append, lr_scheduler=scheduler)
    state = loaded[0]
    assert state["param_groups"][0]["params"] == names and set(state["state"]) == set(names)
    for name in names:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(state["state"][name][key], by_name["state"][name][key])


def _tiny_run_yaml(path, model, dataset, out, **overrides) -> str:
    settings = yaml.safe_load((ROOT / "trainers/configs/flow_grpo_editor_tiny_cpu.yaml").read_text())
    for key in ("build_tiny_editor", "build_tiny_requests", "lora_rank", "lora_alpha"):
        settings.pop(key)
    settings.update(model_name_or_path=str(model), dataset=str(dataset), reward=REDNESS, output_dir=str(out),
                    finetuning="full", fsdp=True, learning_rate=1e-3, updates_per_step=1, max_steps=2, save_steps=2,
                    sample_grid_steps=2, sample_grid_groups=1, sample_grid_images=2, progress=False)
    settings.update(overrides)
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def _env() -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _run(config: str, *args: str, processes: int = 1, port: int = 29581):
    launch = ([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--mixed_precision", "no", "--main_process_port", str(port)] if processes > 1 else [sys.executable])
    done = subprocess.run(launch + [str(RECIPE), "--config", config, *args], env=_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / WEIGHTS))


@pytest.mark.slow
def test_two_fsdp_processes_train_like_one_unsharded_process(tmp_path, tiny_editor_path, editing_requests):
    """2 processes x 1 group, the transformer and its frozen reference sharded (FSDP2 over gloo) = 1 process x 2
    groups unsharded: the same groups, the same step plan, FSDP-averaged gradients = the one-process mean."""
    model = tiny_editor_path("flux2-klein")
    one = _tiny_run_yaml(tmp_path / "one.yaml", model, editing_requests, tmp_path / "one", per_device_batch_size=8)
    two = _tiny_run_yaml(tmp_path / "two.yaml", model, editing_requests, tmp_path / "two", per_device_batch_size=4)
    single = _run(one)
    assert "FSDP2:" not in single.stderr  # one process: nothing to shard over
    multi = _run(two, processes=2)
    assert "FSDP2: the transformer and its reference is sharded over 2 processes (2 blocks" in multi.stderr
    a, b, base = _weights(tmp_path / "one"), _weights(tmp_path / "two"), _weights(model)
    assert a.keys() == b.keys() == base.keys()
    assert max((a[k] - base[k]).abs().max().item() for k in a) > 1e-3  # every weight trained, and they moved
    assert all(torch.allclose(a[k], b[k], atol=1e-5, rtol=0) for k in a)
    lines = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert [m["reward_mean"] for m in lines] == pytest.approx([m["reward_mean"] for m in ref], rel=1e-4)
    assert lines[1]["kl"] == pytest.approx(ref[1]["kl"], rel=1e-3) and lines[1]["kl"] > 0
    checkpoint = tmp_path / "two" / "checkpoint-2"
    assert (checkpoint / "rng-1.safetensors").is_file() and (tmp_path / "two" / "samples").is_dir()
    from safetensors.torch import load_file

    saved = load_file(str(checkpoint / "trainable.safetensors"))  # full tensors, not shards
    assert all(torch.equal(saved[k], b[k]) for k in b)
    from diffusers import Flux2Transformer2DModel

    Flux2Transformer2DModel.from_pretrained(tmp_path / "two" / "transformer")  # a normal diffusers folder


@pytest.mark.slow
def test_an_fsdp_run_resumed_after_step_2_gives_the_uninterrupted_weights(tmp_path, tiny_editor_path,
                                                                          editing_requests):
    model = tiny_editor_path("flux2-klein")
    full = _tiny_run_yaml(tmp_path / "full.yaml", model, editing_requests, tmp_path / "full",
                          per_device_batch_size=4, max_steps=4)
    part = _tiny_run_yaml(tmp_path / "part.yaml", model, editing_requests, tmp_path / "part", per_device_batch_size=4)
    _run(full, processes=2, port=29583)
    _run(part, processes=2, port=29583)
    _run(part, "--resume", "true", "--max_steps", "4", processes=2, port=29583)
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "part")
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(x)["step"] for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
