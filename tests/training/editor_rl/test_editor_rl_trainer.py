"""The Flow-GRPO editor trainer end to end on the toy editor (fast): it learns, it writes what it promises, it
resumes exactly, and every bad input stops it clearly with nothing half-written."""

from __future__ import annotations

import json

import pytest
import torch

from editor_rl_runs import toy_config
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer, RewardUnavailableError

pytestmark = pytest.mark.usefixtures("single_thread")

REWARDS = "modeling_miescore.testing.editor_rewards"
METRIC_KEYS = {"step", "reward_mean", "reward_std", "kl", "ratio_mean", "clipfrac", "approx_kl", "zero_std_groups",
               "reward_failures", "seconds_rollout", "seconds_reward", "seconds_reward_wait", "seconds_update",
               "seconds_step"}


def _train(config):
    return FlowGRPOEditorTrainer(config).train()


def test_it_learns_a_reachable_reward_and_writes_its_outputs(toy_editor_path, editing_requests, tmp_path):
    from modeling_miescore.training.editor_rl.editors import load_editor

    out = tmp_path / "run"
    result = _train(toy_config(toy_editor_path, editing_requests, out, max_steps=8, beta=0.01, sample_grid_steps=4,
                               sample_grid_groups=2))
    rewards = [m["reward_mean"] for m in result["metrics"]]
    assert [m["step"] for m in result["metrics"]] == list(range(1, 9))
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.1, rewards  # redness of the toy rises fast
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and METRIC_KEYS <= set(lines[0])
    assert lines[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-3) and lines[0]["kl"] >= 0
    assert lines[-1]["kl"] > 0 and lines[0]["seconds_rollout"] > 0 and lines[0]["reward_failures"] == 0
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["example-source-0.png", "step-000000.png",
                                                                  "step-000004.png", "step-000008.png"]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6", "checkpoint-8"]
    card = (out / "README.md").read_text()
    assert "library_name: diffusers" in card and "mean_redness" in card and "| `beta` | `0.01` |" in card
    editor = load_editor(toy_config(toy_editor_path, editing_requests, out).editor, str(toy_editor_path))
    editor.load_lora(out)
    trained = {n: p for n, p in editor.transformer.named_parameters() if "lora_B" in n}
    assert trained and any(p.abs().sum() > 0 for p in trained.values())  # the saved adapter is the trained one


def test_a_crashed_run_resumes_exactly(toy_editor_path, editing_requests, tmp_path, monkeypatch):
    """A run that stops at step 5 (reward down) and resumes from checkpoint-3 ends with the adapter, the metrics
    and the rollout records of an uninterrupted run (steps 4-5 are redone, none is logged twice)."""
    from safetensors.torch import load_file

    full = tmp_path / "full"
    _train(toy_config(toy_editor_path, editing_requests, full, save_rollouts_steps=2))
    broken = tmp_path / "broken"
    calls = {"n": 0}
    from modeling_miescore.testing import editor_rewards

    def flaky(images, instructions, sources):
        calls["n"] += 1
        if calls["n"] == 5:
            raise ConnectionError("reward server went away")
        return editor_rewards.mean_redness(images, instructions, sources)

    monkeypatch.setattr(editor_rewards, "flaky", flaky, raising=False)
    with pytest.raises(RewardUnavailableError, match="failed at step 5.*ConnectionError.*--resume"):
        _train(toy_config(toy_editor_path, editing_requests, broken, reward=f"{REWARDS}:flaky", save_rollouts_steps=2))
    assert sorted(p.name for p in broken.glob("checkpoint-*")) == ["checkpoint-3"]
    assert not (broken / "pytorch_lora_weights.safetensors").exists()
    rollouts = (broken / "rollouts" / "rollouts.jsonl").read_text().splitlines()
    assert sorted({json.loads(line)["step"] for line in rollouts}) == [2, 4]  # step 4 is redone after the resume
    _train(toy_config(toy_editor_path, editing_requests, broken, reward=f"{REWARDS}:flaky", resume=True,
                      save_rollouts_steps=2))
    a = load_file(str(full / "pytorch_lora_weights.safetensors"))
    b = load_file(str(broken / "pytorch_lora_weights.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda lines: [{k: v for k, v in json.loads(line).items() if not k.startswith("seconds")}  # noqa: E731
                           for line in lines.read_text().splitlines()]
    assert strip(full / "metrics.jsonl") == strip(broken / "metrics.jsonl")
    assert (full / "rollouts" / "rollouts.jsonl").read_text() == (broken / "rollouts" / "rollouts.jsonl").read_text()


@pytest.mark.parametrize("overrides,message", [
    (dict(num_generations=1, per_device_batch_size=1), "num_generations must be an integer >= 2, got 1"),
    (dict(per_device_batch_size=6), r"6 images per step \(per_device_batch_size 6 x processes 1 x rollout_batches_"
                                    r"per_step 1\) are not whole groups of num_generations 4"),
    (dict(global_batch_size=576), "global_batch_size 576 != per_device_batch_size 8 x processes 1"),
    (dict(train_batch_size=3), "train_batch_size 3 must divide num_generations 4"),
    (dict(updates_per_step=3), "updates_per_step 3 must divide the 2 training micro-batches"),
])
def test_bad_settings_stop_before_anything_is_loaded(toy_editor_path, editing_requests, tmp_path, overrides, message):
    with pytest.raises(MIEScoreInputError, match=message):
        FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, tmp_path / "run", **overrides))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("reward,extra,message", [
    ("wrong_length_reward", {}, r"failed at step 1: ValueError: .*returned 7 rewards for 8 edits"),
    ("nan_reward", {}, r"8 of 8 rewards failed at step 1 \(100% > max_reward_failure_rate 25%; reasons on this "
                       r"process: nan\)"),
    ("failing_reward", {}, "failed at step 1: ConnectionError: reward server at http://127.0.0.1:9 refused"),
    ("mean_redness", {"reward_timeout": 0.3}, r"gave no scores within reward_timeout=0.3s at step 1"),
])
def test_a_bad_or_down_reward_stops_the_run_before_any_update(toy_editor_path, editing_requests, tmp_path, monkeypatch,
                                                              reward, extra, message):
    if "reward_timeout" in extra:
        monkeypatch.setenv("MIESCORE_TEST_REWARD_DELAY", "1.2")
    out = tmp_path / "run"
    with pytest.raises(RewardUnavailableError, match=message):
        _train(toy_config(toy_editor_path, editing_requests, out, reward=f"{REWARDS}:{reward}", **extra))
    assert not list(out.glob("checkpoint-*")) and not (out / "pytorch_lora_weights.safetensors").exists()
    assert not (out / "metrics.jsonl").exists()


def test_failed_samples_are_counted_and_excluded(toy_editor_path, editing_requests, tmp_path):
    result = _train(toy_config(toy_editor_path, editing_requests, tmp_path / "run", reward=f"{REWARDS}:half_nan_reward",
                               max_reward_failure_rate=0.6, max_steps=2))
    assert [m["reward_failures"] for m in result["metrics"]] == [4, 4]
    assert all(m["reward_mean"] == m["reward_mean"] for m in result["metrics"])  # never NaN


def test_output_folder_of_another_run(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "run"
    _train(toy_config(toy_editor_path, editing_requests, out, max_steps=1))
    with pytest.raises(MIEScoreInputError, match="already holds a run; pass --resume"):
        _train(toy_config(toy_editor_path, editing_requests, out, max_steps=1))
    with pytest.raises(MIEScoreInputError, match=r"another run \(1 setting\(s\) differ: seed: 0 there, 7 now\)"):
        _train(toy_config(toy_editor_path, editing_requests, out, max_steps=2, seed=7, resume=True))
    with pytest.raises(MIEScoreInputError, match="holds no run"):
        _train(toy_config(toy_editor_path, editing_requests, tmp_path / "empty", resume=True))
    # an overwrite starts over: the old run's adapter, card and logs go with its checkpoints
    with pytest.raises(RewardUnavailableError):
        _train(toy_config(toy_editor_path, editing_requests, out, overwrite_output_dir=True,
                          reward=f"{REWARDS}:failing_reward"))
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]


def test_the_progress_bar_of_a_run_without_kl(toy_editor_path, editing_requests, tmp_path, capsys):
    result = _train(toy_config(toy_editor_path, editing_requests, tmp_path / "run", max_steps=1, save_steps=1,
                               progress=True))  # beta 0: no KL to show
    assert result["metrics"][0]["kl"] is None
    shown = capsys.readouterr().err
    assert "flow-grpo" in shown and "reward=" in shown and "kl=" not in shown


def test_full_fine_tuning_with_a_frozen_reference(toy_editor_path, editing_requests, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "full"
    result = _train(toy_config(toy_editor_path, editing_requests, out, finetuning="full", beta=0.5, max_steps=2,
                               updates_per_step=1, learning_rate=1e-3))
    assert result["metrics"][0]["kl"] == 0.0 and result["metrics"][1]["kl"] > 0  # the copy stays where it was
    weights = load_file(str(out / "transformer.safetensors"))
    original = load_file(str(toy_editor_path / "transformer.safetensors"))
    assert weights.keys() == original.keys() and not torch.equal(weights["to_out.weight"], original["to_out.weight"])


def test_the_paper_config_reaches_576_images_per_step_on_8_processes():
    import sys
    from pathlib import Path

    from trl import TrlParser

    root = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root / "trainers"))
    import flow_grpo_editor

    parser = TrlParser((flow_grpo_editor.ScriptArguments, flow_grpo_editor.FlowGRPOConfig))
    _, config = parser.parse_args_and_config(["--config", str(root / "trainers/configs/flow_grpo_editor_paper.yaml"),
                                              "--dataset", "rows.jsonl", "--reward", "pkg.mod:fn",
                                              "--output_dir", "out"])
    config.validate(num_processes=8)
    assert (config.num_generations, config.num_inference_steps, config.lora_rank, config.lora_alpha,
            config.learning_rate, config.beta, config.advantage_clip) == (12, 20, 32, 64, 4e-4, 0.04, 5.0)
    assert config.per_device_batch_size * 8 * config.rollout_batches_per_step == config.global_batch_size == 576
    assert config.train_batch_size is None and config.step_weighting == "tempflow"  # the rollout's batch; v0.2
    assert config.editor_options["vae_image_size"] == 512 * 512
    with pytest.raises(MIEScoreInputError, match="global_batch_size 576 != .* x processes 4 .* = 288"):
        config.validate(num_processes=4)


def test_ema_tempflow_and_tensorboard(toy_editor_path, editing_requests, tmp_path):
    """EMA weights are what the adapter holds (and checkpoints keep them); TempFlow weighting and CPS steps run;
    the TensorBoard tracker gets the metrics."""
    from safetensors.torch import load_file

    out = tmp_path / "ema"
    _train(toy_config(toy_editor_path, editing_requests, out, max_steps=2, save_steps=2, ema_decay=0.9,
                      ema_update_interval=1,
                      step_weighting="tempflow", sde_type="cps", noise_level=0.8, report_to="tensorboard"))
    adapter = load_file(str(out / "pytorch_lora_weights.safetensors"))
    raw = load_file(str(out / "checkpoint-2" / "trainable.safetensors"))
    ema = load_file(str(out / "checkpoint-2" / "ema.safetensors"))
    name = next(k for k in raw if "lora_B" in k)
    saved = adapter["transformer." + name.replace(".default", "")]
    assert torch.equal(saved, ema[name]) and not torch.equal(saved, raw[name])
    assert list(out.glob("flow_grpo_editor/events.out.tfevents.*"))
