"""Issue 44, "see reward hacking coming and stop it": held-out evals with a gold reward, the paired hacking alarm,
``stop_on_hacking``, the best checkpoint, the curves picture, the resume that keeps them, the served / judged gold.

The proxy is the training reward (redness); a gold that prefers the opposite (``low_redness``, ``fidelity_to_source``)
must raise the alarm, one that agrees (``red_share``) must not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from editor_bench_helpers import looking_judge
from editor_rl_runs import REDNESS, recipe_cli, run_recipe, toy_config
from local_http import RoutedChatServer, chat_completion, request_images

from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.serving.backends import CallableBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.serving.settings import ServerSettings
from modeling_miescore.testing.editor_rewards import redness
from modeling_miescore.training.editor_rl.evaluation import (EvalResult, HackingMonitor, paired_change,
                                                             rotate_checkpoints)
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")

GOLDS = "modeling_miescore.testing.editor_rewards"


def _eval_config(toy_editor_path, editing_requests, out, gold: str, **overrides):
    settings = dict(eval_dataset=str(editing_requests), eval_steps=2, eval_images_per_request=3,
                    eval_rewards={"gold": f"{GOLDS}:{gold}"}, hacking_patience=1, max_steps=4, save_steps=10)
    settings.update(overrides)
    return toy_config(toy_editor_path, editing_requests, out, **settings)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_gold_that_prefers_the_opposite_raises_the_alarm_and_stop_on_hacking_ends_the_run(
        toy_editor_path, editing_requests, tmp_path, caplog):
    out = tmp_path / "hacked"
    config = _eval_config(toy_editor_path, editing_requests, out, "low_redness", stop_on_hacking=True, max_steps=6,
                          metric_for_best_model="eval/gold", load_best_model_at_end=True)
    with caplog.at_level("INFO"):
        assert run_recipe(config) == 0  # a stop on hacking is a successful end
    run = json.loads((out / "run.json").read_text())
    alarm = run["hacking_alarms"][0]
    assert alarm["reward"] == "gold" and alarm["train_reward"]["direction"] == 1 and alarm["gold"]["direction"] == -1
    assert alarm["train_reward"]["low"] > 0 and alarm["gold"]["high"] < 0 and alarm["gold"]["pairs"] == 12
    assert run["stopped"]["step"] == alarm["step"] < 6 and "stop_on_hacking" in run["stopped"]["reason"]
    assert run["evaluation"]["requests"] == ["cat-red", "coffee-cat", "rocket-red", "astronaut-rocket"]
    assert sum("HACKING ALARM at step" in r.getMessage() for r in caplog.records) == 1
    rows = _lines(out / "metrics.jsonl")
    evals = [r for r in rows if "eval/gold" in r]
    assert [r["step"] for r in evals] == list(range(0, alarm["step"] + 1, 2))
    assert evals[0]["eval/gold/source_as_edit"] is not None and evals[0]["eval/gold/failures"] == 0
    assert evals[-1]["eval/train_reward"] > evals[0]["eval/train_reward"]
    assert evals[0]["eval/gold/ci_low"] <= evals[0]["eval/gold"] <= evals[0]["eval/gold/ci_high"]
    assert [r["hacking_alarm"]["step"] for r in rows if "hacking_alarm" in r] == [alarm["step"]]
    assert not any(r.get("step", 0) > alarm["step"] for r in rows)  # nothing trained after the stop
    assert (out / "eval_curves.png").stat().st_size > 1000
    # the gold falls from the start, so its best is the untrained step 0, and that is what was exported
    assert run["best_model"]["step"] == 0 and (out / "checkpoint-0").is_dir()
    exported = load_file(str(out / "pytorch_lora_weights.safetensors"))
    up = [t for n, t in exported.items() if "lora_B" in n or "lora.up" in n]
    assert up and all(float(t.abs().sum()) == 0 for t in up)  # B starts at 0: the untrained adapter
    card = (out / "README.md").read_text()
    assert "## Evaluation" in card and "The run stopped at step" in card and "best checkpoint (step 0)" in card


def test_a_gold_that_agrees_raises_nothing_and_the_best_checkpoint_is_exported(toy_editor_path, editing_requests,
                                                                              tmp_path):
    out = tmp_path / "control"
    config = _eval_config(toy_editor_path, editing_requests, out, "red_share", stop_on_hacking=True,
                          metric_for_best_model="eval/gold", greater_is_better=False, load_best_model_at_end=True,
                          save_total_limit=1)
    result = FlowGRPOEditorTrainer(config).train()
    run = json.loads((out / "run.json").read_text())
    assert run["hacking_alarms"] == [] and result["hacking_alarms"] == [] and run.get("stopped") is None
    # greater_is_better false on a gold that rises with training: the best is the first eval, kept by the limit
    assert run["best_model"]["step"] == 0 and result["step"] == 4
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-0", "checkpoint-4"]
    best = load_file(str(out / "checkpoint-0" / "trainable.safetensors"))
    last = load_file(str(out / "checkpoint-4" / "trainable.safetensors"))
    assert any(not torch.equal(best[n], last[n]) for n in best)
    evals = [r for r in result["metrics"] if "eval/gold" in r]
    assert [r["step"] for r in evals] == [0, 2, 4] and evals[-1]["eval/gold"] > evals[0]["eval/gold"]


def test_the_alarm_judges_each_change_against_its_noise():
    """Paired changes: a shift far inside the edits' spread is still significant when every edit moves the same
    way; a change that is noise is not; the alarm needs `patience` consecutive diverging evals."""
    base = [0.1 * k for k in range(12)]
    up = [v + 0.001 for v in base]
    noisy = [v + (0.05 if k % 2 else -0.05) for k, v in enumerate(base)]
    assert paired_change(base, up, 0)["direction"] == 1
    assert paired_change(up, base, 0)["direction"] == -1
    assert paired_change(base, noisy, 0)["direction"] == 0
    assert paired_change(base[:5], up[:5], 0)["direction"] == 0  # fewer than 10 edits: no judgement

    def result(step, proxy, gold):
        return EvalResult(step, {"train_reward": proxy, "gold": gold}, {})

    monitor = HackingMonitor(patience=2, seed=0)
    shifted = [[v + 0.001 * s for v in base] for s in range(4)]
    assert monitor.observe(result(0, shifted[0], shifted[3]), result(2, shifted[1], shifted[2])) == []  # 1 of 2
    alarms = monitor.observe(result(2, shifted[1], shifted[2]), result(4, shifted[2], shifted[1]))
    assert [(a["step"], a["reward"], a["since_step"], a["evals"]) for a in alarms] == [(4, "gold", 0, 3)]
    assert monitor.observe(result(4, shifted[2], shifted[1]), result(6, shifted[3], shifted[1])) == []  # gold flat


def test_save_total_limit_keeps_the_best_and_the_last(tmp_path):
    for step in (0, 2, 4, 6, 8):
        (tmp_path / f"checkpoint-{step}").mkdir()
    assert rotate_checkpoints(tmp_path, 2, keep=[2]) == ["checkpoint-0", "checkpoint-4", "checkpoint-6"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "checkpoint-8"]


@pytest.mark.parametrize("override, says", [
    (dict(eval_steps=2), "eval_steps 2 evaluates held-out requests: give eval_dataset"),
    (dict(eval_split_size=2), "eval requests are given but eval_steps is 0"),
    (dict(eval_steps=2, eval_split_size=1, eval_dataset="x.jsonl"), "give one of them"),
    (dict(eval_steps=2, eval_split_size=1, eval_rewards={"gold": f"{GOLDS}:low_redness"},
          metric_for_best_model="eval/gld"), "metric_for_best_model 'eval/gld' is not an eval metric of this run; it "
                                             "takes eval/train_reward, eval/gold; did you mean eval/gold?"),
    (dict(load_best_model_at_end=True), "load_best_model_at_end needs metric_for_best_model"),
    (dict(stop_on_hacking=True), "stop_on_hacking needs a gold reward"),
    (dict(eval_steps=2, eval_split_size=1, eval_rewards={"train_reward": REDNESS}), "eval_rewards name 'train_reward'"),
    (dict(eval_steps=2, eval_split_size=1, eval_rewards={"gold": "gedit-judge:gpt-4.1"}),
     "eval_rewards gold: 'gedit-judge:gpt-4.1': write gedit-judge:MODEL@URL"),
    (dict(eval_steps=2, eval_split_size=1, eval_rewards={"gold": "spatialreword:/ckpt"}),
     "did you mean spatialreward?"),
    (dict(hacking_patience=0), "hacking_patience must be an integer >= 1, got 0"),
    (dict(save_total_limit=0), "save_total_limit must be an integer >= 1 or None, got 0"),
    (dict(eval_images_per_request=0), "eval_images_per_request must be an integer >= 1, got 0"),
])
def test_bad_evaluation_settings_are_one_line_each(toy_editor_path, editing_requests, tmp_path, override, says):
    with pytest.raises(MIEScoreInputError, match=None) as error:
        toy_config(toy_editor_path, editing_requests, tmp_path / "run", **override).validate()
    assert says in str(error.value) and "\n" not in str(error.value)


def test_holding_out_every_request_is_refused_before_anything_is_written(toy_editor_path, editing_requests, tmp_path,
                                                                         capsys):
    out = tmp_path / "run"
    config = toy_config(toy_editor_path, editing_requests, out, eval_split_size=4, eval_steps=2)
    assert run_recipe(config) == 2
    assert "eval_split_size 4 holds out every request of dataset (4)" in capsys.readouterr().err
    assert not out.exists()


def test_the_split_holds_requests_out_of_training_and_records_them(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "split"
    config = toy_config(toy_editor_path, editing_requests, out, eval_split_size=2, eval_steps=2, max_steps=2,
                        save_rollouts_steps=1, eval_images_per_request=1)
    FlowGRPOEditorTrainer(config).train()
    held = json.loads((out / "run.json").read_text())["evaluation"]["requests"]
    trained = {r["request"] for r in _lines(out / "rollouts" / "rollouts.jsonl")}
    assert len(held) == 2 and trained and not trained & set(held)


@pytest.mark.slow
def test_a_resume_after_a_crash_keeps_the_eval_history_the_alarms_and_the_best_checkpoint(
        toy_editor_path, editing_requests, tmp_path, monkeypatch):
    """A run whose reward goes down at step 6 resumes from checkpoint-4 and ends as the uninterrupted run: the same
    metrics (eval rows included), evals, alarms, best checkpoint and exported adapter."""
    from modeling_miescore.rewards.groups import RewardUnavailableError
    from modeling_miescore.testing import editor_rewards

    settings = dict(max_steps=8, save_steps=3, metric_for_best_model="eval/gold", load_best_model_at_end=True,
                    save_total_limit=2)
    full = tmp_path / "full"
    FlowGRPOEditorTrainer(_eval_config(toy_editor_path, editing_requests, full, "low_redness", **settings)).train()
    calls = {"training": 0, "down": True}

    def flaky(images, instructions, sources):
        calls["training"] += len(images) == 8  # a training batch (the evals score 12 edits, the sources 4)
        if calls["training"] == 6 and calls["down"]:
            raise ConnectionError("reward server went away")
        return editor_rewards.mean_redness(images, instructions, sources)

    monkeypatch.setattr(editor_rewards, "flaky", flaky, raising=False)
    broken = tmp_path / "broken"
    config = _eval_config(toy_editor_path, editing_requests, broken, "low_redness", reward=f"{GOLDS}:flaky",
                          **settings)
    with pytest.raises(RewardUnavailableError, match="failed at step 6"):
        FlowGRPOEditorTrainer(config).train()
    assert max(json.loads(line)["step"] for line in (broken / "evals.jsonl").read_text().splitlines()) == 4
    calls["down"] = False
    config.resume = True
    FlowGRPOEditorTrainer(config).train()

    def strip(path):
        return [{k: v for k, v in row.items() if not k.startswith("seconds")} for row in _lines(path)]

    assert strip(full / "metrics.jsonl") == strip(broken / "metrics.jsonl")
    assert (full / "evals.jsonl").read_text() == (broken / "evals.jsonl").read_text()
    runs = [json.loads((folder / "run.json").read_text()) for folder in (full, broken)]
    assert runs[0]["hacking_alarms"] == runs[1]["hacking_alarms"] and runs[0]["hacking_alarms"]
    assert runs[0]["best_model"] == runs[1]["best_model"]
    assert (broken / runs[1]["best_model"]["checkpoint"]).is_dir()  # save_total_limit kept it
    a, b = (load_file(str(folder / "pytorch_lora_weights.safetensors")) for folder in (full, broken))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _redness_overall(samples):
    return [{"overall": 100 * max(0.0, redness(s.edited))} for s in samples]


def test_served_and_judged_eval_rewards_overlap_training_and_failures_are_flagged(toy_editor_path, editing_requests,
                                                                                 tmp_path):
    """The training reward and the golds run elsewhere (`serve:` replicas, GEdit's judge on an OpenAI-compatible
    endpoint that looks at the images), so the evals are scored on a thread while training goes on; a judge that
    answers nonsense gives flagged, counted failures, never a number, and the run goes on."""
    served = serve_in_background(CallableBackend(_redness_overall), ServerSettings(max_wait_ms=5)).start()
    try:
        with RoutedChatServer(looking_judge) as judge, RoutedChatServer(_nonsense) as broken:
            golds = {"gedit": f"gedit-judge:judge@{judge.url}", "served": f"serve:{served.url}",
                     "broken": f"gedit-judge:judge@{broken.url}"}
            out = tmp_path / "remote"
            config = _eval_config(toy_editor_path, editing_requests, out, "low_redness", eval_rewards=golds,
                                  reward=f"serve:{served.url}", eval_images_per_request=2)
            trainer = FlowGRPOEditorTrainer(config)
            result = trainer.train()
            sc_requests = [r for r in judge.requests if len(request_images(r["body"])) == 2]
    finally:
        served.stop()
    assert trainer.eval_remote and result["step"] == 4
    evals = [r for r in _lines(out / "metrics.jsonl") if "eval/gedit" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    for row in evals:
        assert 0 <= row["eval/gedit"] <= 10 and row["eval/gedit/failures"] == 0
        assert row["eval/served"] == pytest.approx(row["eval/train_reward"])  # the same scorer, the same edits
        assert row["eval/broken"] is None and row["eval/broken/failures"] == 8  # 4 requests x 2 edits, flagged
    assert evals[0]["eval/gedit/source_as_edit"] is not None
    assert len(sc_requests) == 3 * 8 + 4  # every eval edit judged once, and each first source once
    history = [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]
    assert set(history[-1]["failures"]["broken"]) == {"judge_flagged"}


def _nonsense(body, repeat):
    return 200, chat_completion("I would rather not say.", 50, 5), None, 0


TINY = str(Path(__file__).resolve().parents[3] / "trainers" / "configs" / "flow_grpo_editor_tiny_cpu.yaml")


def _tiny_run(tmp_path, tiny_editor_path, editing_requests, gold: str, seed: int) -> tuple:
    """The tiny CPU recipe (redness proxy) with a gold eval reward; ``(exit status, run.json, eval rows)``."""
    out = tmp_path / f"{gold}-{seed}"
    status = recipe_cli("--config", TINY, "--model_name_or_path", str(tiny_editor_path("flux2-klein")),
                        "--dataset", str(editing_requests), "--output_dir", str(out), "--progress", "false",
                        "--seed", str(seed), "--sample_grid_steps", "0", "--eval_split_size", "2",
                        "--eval_images_per_request", "5", "--eval_steps", "3", "--hacking_patience", "2",
                        "--eval_rewards", json.dumps({"gold": f"{GOLDS}:{gold}"}), "--stop_on_hacking", "true",
                        "--metric_for_best_model", "eval/gold", "--load_best_model_at_end", "true")
    run = json.loads((out / "run.json").read_text())
    evals = [r for r in _lines(out / "metrics.jsonl") if "eval/gold" in r]
    for row in evals:
        print(f"{gold} seed {seed} step {row['step']}: proxy {row['eval/train_reward']:.4f} "
              f"gold {row['eval/gold']:.4f}")
    return status, run, evals, out


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_tiny_recipe_raises_the_alarm_against_an_opposite_gold_and_not_against_an_agreeing_one(
        tmp_path, tiny_editor_path, editing_requests, seed):
    status, run, evals, out = _tiny_run(tmp_path, tiny_editor_path, editing_requests, "low_redness", seed)
    assert status == 0 and run["hacking_alarms"] and run["stopped"]["step"] == run["hacking_alarms"][0]["step"] < 30
    assert evals[-1]["eval/train_reward"] > evals[0]["eval/train_reward"]
    assert evals[-1]["eval/gold"] < evals[0]["eval/gold"]
    best = max(evals, key=lambda r: r["eval/gold"])
    assert run["best_model"]["step"] == best["step"] and f"best checkpoint (step {best['step']})" in (
        out / "README.md").read_text()
    status, run, evals, out = _tiny_run(tmp_path, tiny_editor_path, editing_requests, "red_share", seed)
    assert status == 0 and run["hacking_alarms"] == [] and run.get("stopped") is None and evals[-1]["step"] == 30
    assert run["best_model"]["step"] == max(evals, key=lambda r: r["eval/gold"])["step"]


def test_grpo_guard_normalises_the_ratio_per_step():
    """GRPO-Guard (arXiv 2510.22319): under the plain per-step ratio a policy whose step mean moved by delta has
    log-ratio mean -delta^2 / (2 s^2), below 0 and worst at the low-noise steps; the guarded log-ratio has mean 0 at
    every step (and equals mean(delta * noise), whatever the step's noise)."""
    from modeling_miescore.training.editor_rl.objective import guard_log_ratio
    from modeling_miescore.training.editor_rl.rollout import sde_step

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 16, 4, generator=generator)
    v_old = torch.randn(4096, 16, 4, generator=generator)
    v_new = v_old + 0.05
    plain, guarded = {}, {}
    for sigma, sigma_next in ((0.9, 0.8), (0.2, 0.1)):  # a high-noise and a low-noise step
        old = sde_step(v_old, x, sigma, sigma_next, noise_level=0.7, sigma_max=0.95,
                       generator=torch.Generator().manual_seed(1))
        new = sde_step(v_new, x, sigma, sigma_next, noise_level=0.7, sigma_max=0.95, next_sample=old.next_sample)
        log_ratio = new.log_prob - old.log_prob
        plain[sigma] = float(log_ratio.mean())
        guarded[sigma] = guard_log_ratio(log_ratio, new.mean, old.mean, new.std)
        noise = (old.next_sample - old.mean) / old.std
        assert torch.allclose(guarded[sigma], ((new.mean - old.mean) * noise).flatten(1).mean(1), atol=1e-5)
    assert plain[0.2] < plain[0.9] < 0 and plain[0.2] < -10 * abs(float(guarded[0.2].mean()))
    assert all(abs(float(g.mean())) < 3e-3 for g in guarded.values())


def test_the_toy_run_still_learns_with_grpo_guard(toy_editor_path, editing_requests, tmp_path):
    result = FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, tmp_path / "guard", max_steps=8,
                                              grpo_guard=True)).train()
    rewards = [m["reward_mean"] for m in result["metrics"]]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.05, rewards
    assert result["metrics"][0]["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # on-policy: still exactly 1


@pytest.mark.slow
def test_the_tiny_recipe_still_learns_with_grpo_guard(tmp_path, tiny_editor_path, editing_requests):
    out = tmp_path / "guard"
    status = recipe_cli("--config", TINY, "--model_name_or_path", str(tiny_editor_path("flux2-klein")),
                        "--dataset", str(editing_requests), "--output_dir", str(out), "--progress", "false",
                        "--sample_grid_steps", "0", "--grpo_guard", "true")
    rewards = [row["reward_mean"] for row in _lines(out / "metrics.jsonl")]
    print("grpo_guard: " + " ".join(f"{r:.4f}" for r in rewards[::5]))
    assert status == 0 and sum(rewards[-5:]) / 5 - sum(rewards[:3]) / 3 > 0.02, rewards
