"""A reward that exits, interrupts or fails on one process stops the run clearly (issue 31 MEDIUM, issue 32):
``SystemExit(0)`` / ``KeyboardInterrupt`` / ``os._exit(0)`` inside a reward are reward failures (exit 1, one
message), a real Ctrl-C keeps only complete files and says how to resume, a failure while the next batch is still
being scored no longer aborts the process at exit (SIGABRT), and one rank's failure stops every rank at once."""

from __future__ import annotations

import os
import re
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


def _launch_two(tmp_path, config, port: int, **env):
    """``accelerate launch --num_processes 2`` of the recipe on ``config`` (CPU, gloo)."""
    path = write_run_yaml(tmp_path / "two.yaml", config)
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--mixed_precision", "no", "--main_process_port", str(port), str(RECIPE), "--config", path]
    return subprocess.Popen(launch, env=_env(**env), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_one_ranks_full_disk_at_a_checkpoint_stops_every_rank_with_its_message(toy_editor_path, editing_requests,
                                                                             tmp_path):
    """Rank 1's checkpoint file fails with ENOSPC: before, rank 1 stopped with a line that named no process and
    rank 0 died in the checkpoint's barrier with gloo's "Connection closed by peer" traceback; now both stop with
    the same line naming process 1, and no partial checkpoint stays."""
    out = tmp_path / "run"
    config = toy_config(toy_editor_path, editing_requests, out, per_device_batch_size=4, updates_per_step=1,
                        save_steps=1, reward=f"{REWARDS}:disk_full_on_rank_1_reward")
    started = time.monotonic()
    run = _launch_two(tmp_path, config, 29574)
    _, err = run.communicate(timeout=600)
    assert run.returncode != 0 and time.monotonic() - started < 300, err[-3000:]
    stops = [line for line in err.splitlines() if line.startswith("flow_grpo_editor: stopped:")]
    assert len(stops) == 2 and len(set(stops)) == 1, err[-3000:]
    assert "cannot write checkpoint-1 (No space left on device)" in stops[0] and "[process 1 of 2]" in stops[0]
    assert "[rank0]: Traceback" not in err and "[rank1]: Traceback" not in err
    assert not list(out.glob("*checkpoint-*"))


def _descendants(pid: int) -> list:
    """The processes below ``pid`` (from /proc), children first."""
    children: dict = {}
    for entry in (e for e in Path("/proc").iterdir() if e.name.isdigit()):
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _rank_of(pid: int):
    try:
        environ = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((item[5:].decode() for item in environ if item.startswith(b"RANK=")), None)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
def test_a_killed_rank_ends_the_run_within_seconds_and_the_launcher_names_it(toy_editor_path, editing_requests,
                                                                             tmp_path):
    """SIGKILL of rank 1 (ours: a process this test started) after its first checkpoint: torchrun's agent ends
    rank 0 within seconds, never a hang in the next collective, and its report names rank 1 and SIGKILL; the
    complete checkpoint stays and no partial one."""
    out = tmp_path / "run"
    config = toy_config(toy_editor_path, editing_requests, out, per_device_batch_size=4, updates_per_step=1,
                        max_steps=40, save_steps=1)
    run = _launch_two(tmp_path, config, 29575, MIESCORE_TEST_REWARD_DELAY="0.3")
    deadline = time.monotonic() + 240
    while not (out / "checkpoint-1").is_dir() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)
    victim = next((pid for pid in _descendants(run.pid) if _rank_of(pid) == "1"), None)
    if victim is None:
        run.kill()
        pytest.fail(f"no rank 1 process below the launcher: {run.communicate()[1][-3000:]}")
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    assert run.returncode != 0 and time.monotonic() - killed < 60, err[-3000:]
    assert re.search(rf"failed \(exitcode: -9\) local_rank: 1 \(pid: {victim}\)", err), err[-3000:]
    assert "Signal 9 (SIGKILL) received by PID" in err and "[rank0]: Traceback" not in err
    assert (out / "checkpoint-1" / "trainer_state.json").is_file() and not list(out.glob(".checkpoint-*"))
