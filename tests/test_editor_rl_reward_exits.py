"""A reward that exits, interrupts or fails on one process stops the run clearly (issue 31 MEDIUM, issue 32):
``SystemExit(0)`` / ``KeyboardInterrupt`` / ``os._exit(0)`` inside a reward are reward failures (exit 1, one
message), a real Ctrl-C keeps only complete files and says how to resume, a failure while the next batch is still
being scored no longer aborts the process at exit (SIGABRT), and one rank's failure stops every rank at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from editor_rl_runs import RECIPE, toy_config, write_run_yaml
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer, RewardUnavailableError

pytestmark = pytest.mark.usefixtures("single_thread")
REWARDS = "modeling_miescore.testing.editor_rewards"
ROOT = RECIPE.parents[1]


def _env(**extra) -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


PROCESS_EXIT = os._exit  # the real one, before any RewardWorker replaced it


@pytest.mark.parametrize("reward,message", [
    ("exiting_reward", r"failed at step 1: raised SystemExit\(SystemExit\(0\)\) inside the reward"),
    ("interrupting_reward", r"failed at step 1: raised KeyboardInterrupt\(KeyboardInterrupt\(\)\) inside the reward"),
    ("os_exit_reward", r"failed at step 1: RewardExitError: called os._exit\(0\), which would have ended the run"),
])
def test_a_reward_that_exits_or_interrupts_is_a_reward_failure(toy_editor_path, editing_requests, tmp_path,
                                                               reward, message):
    if reward == "os_exit_reward":  # without the guard this would end the test session silently: check it first
        from modeling_miescore.rewards.worker import RewardWorker
        from modeling_miescore.rewards.specs import build_reward

        RewardWorker(build_reward(f"{REWARDS}:mean_redness")).close()
        assert os._exit is not PROCESS_EXIT, "os._exit is not guarded while rewards run"
    out = tmp_path / "run"
    try:
        with pytest.raises(RewardUnavailableError, match=message):
            FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out,
                                             reward=f"{REWARDS}:{reward}")).train()
    except (SystemExit, KeyboardInterrupt) as error:  # escaped the trainer: it would end the session
        pytest.fail(f"the reward's {type(error).__name__} escaped the trainer")
    assert not list(out.glob("checkpoint-*")) and not (out / "metrics.jsonl").exists()


def _recipe(tmp_path, config, *args, **env):
    path = write_run_yaml(tmp_path / f"{Path(config.output_dir).name}.yaml", config)
    return subprocess.Popen([sys.executable, str(RECIPE), "--config", path, *args], env=_env(**env), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_failure_while_the_next_batch_is_scored_exits_1_not_sigabrt(toy_editor_path, editing_requests, tmp_path):
    """Two rollout batches a step: the first batch's reward fails while the second keeps torch busy on the reward
    thread. The old worker left that thread running into interpreter exit: "terminate called without an active
    exception", status -6 (SIGABRT), after the right message."""
    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run", per_device_batch_size=4,
                        gradient_accumulation_steps=2, updates_per_step=1, reward=f"{REWARDS}:failing_then_busy_reward")
    done = _recipe(tmp_path, config)
    _, err = done.communicate(timeout=300)
    assert done.returncode == 1, err[-3000:]
    assert "flow_grpo_editor: stopped: reward" in err and "NaN head" in err and "terminate called" not in err


@pytest.mark.slow
def test_os_exit_inside_a_reward_does_not_end_the_run_silently(toy_editor_path, editing_requests, tmp_path):
    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run", reward=f"{REWARDS}:os_exit_reward")
    done = _recipe(tmp_path, config)
    _, err = done.communicate(timeout=300)
    assert done.returncode == 1 and "called os._exit(0)" in err, err[-3000:]


@pytest.mark.slow
def test_a_real_ctrl_c_keeps_only_complete_files_and_says_how_to_resume(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "run"
    config = toy_config(toy_editor_path, editing_requests, out, max_steps=40, save_steps=1)
    run = _recipe(tmp_path, config, MIESCORE_TEST_REWARD_DELAY="0.3")
    deadline = time.monotonic() + 240
    while not (out / "checkpoint-2").is_dir() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("flow_grpo_editor: interrupted during step ") and "rerun the same command with --resume" in last
    assert not list(out.glob(".checkpoint-*")) and "Traceback" not in err
    resumed = _recipe(tmp_path, toy_config(toy_editor_path, editing_requests, out, max_steps=4, save_steps=1),
                      "--resume", "true")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert (out / "pytorch_lora_weights.safetensors").is_file()


@pytest.mark.slow
def test_one_ranks_reward_failure_stops_every_rank_with_the_same_message(toy_editor_path, editing_requests,
                                                                         tmp_path):
    """``accelerate launch --num_processes 2`` on CPU, the reward raising on rank 1 only: before, rank 0 waited in
    the gather of the advantages until gloo's timeout (30 min); now both stop at once, exit 1."""
    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run", per_device_batch_size=4,
                        updates_per_step=1, reward=f"{REWARDS}:failing_on_rank_1_reward")
    path = write_run_yaml(tmp_path / "two.yaml", config)
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--mixed_precision", "no", "--main_process_port", "29573", str(RECIPE), "--config", path]
    started = time.monotonic()
    done = subprocess.run(launch, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and time.monotonic() - started < 300, done.stderr[-3000:]
    stops = [line for line in done.stderr.splitlines() if line.startswith("flow_grpo_editor: stopped:")]
    assert len(stops) == 2 and len(set(stops)) == 1, done.stderr[-3000:]
    assert "went away" in stops[0] and "[process 1 of 2]" in stops[0]
