"""How a stopped editor-RL run ends: the trainer closes its trackers (TensorBoard's writer buffers the steps it
was sent) whenever it stops on an error, and the recipe's ``exit_with`` ends the process without interpreter
finalisation only while a reward call is still running, after flushing stdout, stderr and the log handlers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from editor_rl_runs import RECIPE, REDNESS, toy_config
from modeling_miescore.rewards.specs import build_reward
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer, RewardUnavailableError

ROOT = RECIPE.parents[1]


class FailingAtSecondCall:
    """The redness reward, which fails from its second call on (step 2 of a one-batch step)."""

    name = "failing-at-second-call"

    def __init__(self):
        self.inner, self.calls = build_reward(REDNESS), 0

    def score_groups(self, groups):
        self.calls += 1
        if self.calls > 1:
            raise RewardUnavailableError(self.name, "down")
        return self.inner.score_groups(groups)

    def close(self):
        self.inner.close()


@pytest.mark.usefixtures("single_thread")
def test_a_run_stopped_by_its_reward_closes_its_trackers_and_keeps_what_it_logged(toy_editor_path, editing_requests, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    trainer = FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=3, save_steps=1,
                                               updates_per_step=1, report_to="tensorboard"),
                                    reward=FailingAtSecondCall())
    with pytest.raises(RewardUnavailableError, match="down"):
        trainer.train()
    (tracker,) = trainer.accelerator.trackers
    assert tracker.writer.all_writers is None, "the TensorBoard writer of the stopped run was left open"
    events = EventAccumulator(str(out / "flow_grpo_editor")).Reload()
    assert [e.step for e in events.Scalars("reward/mean")] == [1]  # step 1's record, written before the stop


EXIT_SCRIPT = """
import atexit, logging, sys, threading
sys.path.insert(0, {trainers!r})
import flow_grpo_editor
from modeling_miescore.rewards.worker import RewardWorker

release, entered = threading.Event(), threading.Event()

class Reward:
    name = "blocking"
    def score_groups(self, groups):
        entered.set()
        release.wait({hold})
        return []
    def close(self):
        pass

logging.basicConfig(filename={log!r}, level=logging.INFO)
atexit.register(lambda: print("finalised", file=sys.stderr))
worker = RewardWorker(Reward())
worker.submit([])
entered.wait(30)
if {finish}:
    release.set()
worker.close(cancel_pending=True, timeout=5)
print("the stop message, unflushed", end="")
sys.stderr.write("stopped: the reward, unflushed")
logging.getLogger("flow_grpo_editor").info("the run's log line")
flow_grpo_editor.exit_with(1)
"""


def _exit_after(tmp_path, *, finish: bool):
    """The script's status and output, and its log file (stdout buffered: a pipe, no PYTHONUNBUFFERED)."""
    log = tmp_path / f"run-{finish}.log"
    code = EXIT_SCRIPT.format(trainers=str(RECIPE.parent), hold=600 if not finish else 30, log=str(log),
                              finish=finish)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return done, log.read_text() if log.is_file() else ""


def test_exit_with_skips_finalisation_only_while_a_reward_call_runs_and_flushes_first(tmp_path):
    running, log = _exit_after(tmp_path, finish=False)  # the call still blocked after the worker gave up on it
    assert running.returncode == 1, running.stderr[-2000:]
    assert running.stdout == "the stop message, unflushed"
    assert running.stderr.startswith("stopped: the reward, unflushed") and "finalised" not in running.stderr
    assert "the run's log line" in log
    finished, log = _exit_after(tmp_path, finish=True)  # the call returned: an ordinary exit, atexit included
    assert finished.returncode == 1, finished.stderr[-2000:]
    assert finished.stdout == "the stop message, unflushed" and "finalised" in finished.stderr
    assert "the run's log line" in log


def test_a_ctrl_c_before_the_training_loop_says_interrupted(toy_editor_path, editing_requests, tmp_path, capsys,
                                                           monkeypatch):
    """A bare ``KeyboardInterrupt`` (no message: before the loop turns it into ``TrainingInterrupted``) is still
    one line that says what happened, status 130."""
    from editor_rl_runs import recipe_cli, write_run_yaml

    if str(RECIPE.parent) not in sys.path:
        sys.path.insert(0, str(RECIPE.parent))
    import flow_grpo_editor

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    path = write_run_yaml(tmp_path / "run.yaml", toy_config(toy_editor_path, editing_requests, tmp_path / "run"))
    monkeypatch.setattr(flow_grpo_editor, "main", interrupted)
    assert recipe_cli("--config", path) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "flow_grpo_editor: interrupted"
