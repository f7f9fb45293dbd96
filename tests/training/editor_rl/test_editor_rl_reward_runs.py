"""The Flow-GRPO recipe (``trainers/flow_grpo_editor.py``'s own entry) with every model reward kind, end to end:
two `miescore serve` replicas of a tiny MIEScore (``serve:URL,URL``), SpatialReward behind a scripted
OpenAI-compatible endpoint (``spatialreward-api:MODEL@URL``) and MIEScore in this process with prefix reuse
(``miescore:CKPT``, on the tiny diffusers Flux2-Klein). Each run completes its steps and the rewards it logs
(``rollouts/rollouts.jsonl``, ``metrics.jsonl``) are what the scorer returns for the same saved edits; a reward
server that goes down mid-run stops the run clearly with its last checkpoint intact, and the run resumes from it
once the server is back."""

from __future__ import annotations

import json
import math
import threading

import pytest
from edit_groups import spatialreward_judge, spatialreward_sub_scores
from editor_rl_runs import run_recipe, toy_config
from local_http import RoutedChatServer
from PIL import Image

from modeling_miescore.judges.spatialreward_api import processor_sized_image
from modeling_miescore.hub.spatialreward_aggregation import spatial_reward
from modeling_miescore.cli.main import main as miescore
from modeling_miescore.serving.backends import CallableBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.serving.settings import ServerSettings
from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
from modeling_miescore.training.editor_rl.objective import group_advantages
from modeling_miescore.training.editor_rl.checkpoints import latest_checkpoint

pytestmark = pytest.mark.usefixtures("single_thread")


def _run(toy_editor_path, editing_requests, out, **overrides):
    """A toy-editor run of the recipe that records every step's rollouts; ``(exit status, rollout records)``."""
    settings = dict(max_steps=2, save_steps=1, updates_per_step=1, save_rollouts_steps=1)
    config = toy_config(toy_editor_path, editing_requests, out, **{**settings, **overrides})
    return run_recipe(config, "--progress", "false"), _records(out)


def _records(out) -> list:
    path = out / "rollouts" / "rollouts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _metrics(out) -> list:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _check_logged_rewards(out, records, steps, group_size=4):
    """Every step's metrics are the statistics of its logged per-edit rewards and advantages."""
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == steps and sorted({r["step"] for r in records}) == steps
    for m in metrics:
        mine = [r for r in records if r["step"] == m["step"]]
        rewards = [r["reward"] for r in mine]
        assert m["reward_mean"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-12)
        groups = [(r["key"], [x["reward"] for x in mine if x["group"] == r["group"]]) for r in mine[::group_size]]
        expected = group_advantages(groups, std_level="group", clip=5.0).advantages
        assert [r["advantage"] for r in mine] == pytest.approx([a for g in expected for a in g], abs=1e-9)
        assert math.isfinite(m["loss"]) and m["reward_failures"] == 0


def test_served_miescore_replicas_keep_groups_whole_and_log_what_score_batch_returns(
        miescore_replicas, toy_editor_path, editing_requests, tiny_miescore_path, tmp_path):
    out = tmp_path / "run"
    for _, backend in miescore_replicas:
        backend.seen.clear()
    urls = ",".join(server.url for server, _ in miescore_replicas)
    status, records = _run(toy_editor_path, editing_requests, out, reward=f"serve:{urls}")
    assert status == 0 and len(records) == 2 * 2 * 4  # 2 steps x 2 groups x G = 4
    _check_logged_rewards(out, records, [1, 2])
    requests = [json.loads(line)["id"] for line in editing_requests.read_text().splitlines()]
    assert sorted(r["request"] for r in records[::4]) == sorted(requests)  # an epoch: each request once
    assert [r["sample"] for r in records[:4]] == [0, 1, 2, 3] and {r["rank"] for r in records} == {0}
    # each group went whole to one replica, as one shared-prefix group; the replicas shared the work
    for step in (1, 2):
        for group in {r["group"]: r for r in records if r["step"] == step}.values():
            holders = [b for _, b in miescore_replicas if any(i == group["instruction"] for i, _ in b.seen)]
            assert len(holders) == 1, group["instruction"]
            ids = [gid for i, gid in holders[0].seen if i == group["instruction"]]
            assert len(ids) == 4 and len(set(ids)) == 1
    assert all(b.seen for _, b in miescore_replicas)
    # the logged rewards are overall / 100 of `miescore score-batch` on the saved edits (no prefix reuse there)
    preds = tmp_path / "preds.jsonl"
    assert miescore(["score-batch", "--model", str(tiny_miescore_path), "--input",
                     str(out / "rollouts" / "rollouts.jsonl"), "--output", str(preds), "--device", "cpu",
                     "--no-progress"]) == 0
    scored = {p["id"]: p for p in map(json.loads, preds.read_text().splitlines())}
    assert [r["reward"] for r in records] == pytest.approx([scored[r["id"]]["overall"] / 100 for r in records],
                                                           abs=1e-5)
    assert [r["components"]["visual_quality"] for r in records] == pytest.approx(
        [scored[r["id"]]["visual_quality"] for r in records], abs=1e-3)
    assert len({round(r["reward"], 6) for r in records}) > 8  # the rewards depend on the edits


def test_spatialreward_endpoint_rewards_are_the_papers_formula_of_the_judges_sub_scores(
        toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "run"
    with RoutedChatServer(spatialreward_judge) as server:
        status, records = _run(toy_editor_path, editing_requests, out, max_steps=1,
                               reward=f"spatialreward-api:SpatialReward/SpatialReward-8B@{server.url}",
                               reward_options={"api_key_env": "NO_KEY_FOR_TESTS", "max_retries": 1})
    assert status == 0 and len(records) == 8
    assert len(server.requests) == 2 * 8  # an SC and a PQ request per edit
    _check_logged_rewards(out, records, [1])
    folder = out / "rollouts"
    for record in records:
        edited = Image.open(folder / record["edited"]).convert("RGB")
        # the judge reads the image the client sent: sized as the Qwen-VL processor sizes it (paper's pixel range)
        value = processor_sized_image(edited, 65_536, 589_824).getpixel((0, 0))[0]
        parts = spatialreward_sub_scores(value, record["instruction"])
        assert record["reward"] == pytest.approx(spatial_reward(*parts), abs=1e-9)  # (SC/25)^0.8 (PQ/25)^0.2
        assert [record["components"][k] for k in ("s_if", "s_con", "s_nat", "s_art")] == list(parts)
    assert len({r["reward"] for r in records}) > 2


def test_in_process_miescore_with_prefix_reuse_on_the_diffusers_editor_equals_scoring_without(
        tiny_editor_path, editing_requests, tiny_miescore, tiny_miescore_path, tmp_path):
    out = tmp_path / "run"
    config = toy_config(tiny_editor_path("flux2-klein"), editing_requests, out, editor="flux2-klein",
                        editor_options=TINY_EDITOR_OPTIONS["flux2-klein"], cfg_scale=1.0, max_steps=1,
                        updates_per_step=1, save_rollouts_steps=1, reward=f"miescore:{tiny_miescore_path}",
                        reward_options={"dtype": "float32"})
    assert run_recipe(config, "--progress", "false") == 0
    records = _records(out)
    assert len(records) == 8
    _check_logged_rewards(out, records, [1])
    folder = out / "rollouts"
    samples = [{"sources": [str(folder / s) for s in r["sources"]], "edited": str(folder / r["edited"]),
                "instruction": r["instruction"]} for r in records]
    reference = tiny_miescore.score_batch(samples, batch_size=4, reuse_prefix=False)
    assert [r["reward"] for r in records] == pytest.approx([x["overall"] / 100 for x in reference], abs=1e-5)
    assert len({round(r["reward"], 6) for r in records}) > 4


def _redness_scores(samples):
    return [{"overall": 100 * sum(p[0] for p in s.edited.convert("RGB").getdata()) / 255 /
             (s.edited.width * s.edited.height)} for s in samples]


def test_a_reward_server_that_goes_down_stops_the_run_and_its_last_checkpoint_resumes(
        toy_editor_path, editing_requests, tmp_path, capsys):
    """The server stops for good after answering step 2: step 3 stops the run (exit 1, the reward's message,
    nothing updated or logged for it, checkpoint-2 complete); with the server back on its port, --resume
    continues from checkpoint-2."""
    scored = {"n": 0}
    server = None

    def score(samples):
        scored["n"] += len(samples)
        if scored["n"] >= 2 * 8:  # step 2's edits answered: then the server goes away (graceful, like SIGTERM)
            threading.Thread(target=server.stop, daemon=True).start()
        return _redness_scores(samples)

    server = serve_in_background(CallableBackend(score), ServerSettings(max_wait_ms=5)).start()
    port = server.port
    out = tmp_path / "run"
    options = {"max_retries": 1, "timeout": 5, "replica_cooldown_s": 0.1}
    common = dict(reward=f"serve:http://127.0.0.1:{port}", reward_options=options, max_steps=3)
    status, _ = _run(toy_editor_path, editing_requests, out, **common)
    server.thread.join(30)
    err = capsys.readouterr().err
    assert status == 1, err
    assert f"flow_grpo_editor: stopped: reward 'serve:http://127.0.0.1:{port}' is unavailable" in err
    assert "at step 3" in err and "--resume" in err and "127.0.0.1" in err
    assert err.count("is unavailable") == 1  # said once, not wrapped twice
    assert [m["step"] for m in _metrics(out)] == [1, 2] and all(math.isfinite(m["loss"]) for m in _metrics(out))
    assert latest_checkpoint(out).name == "checkpoint-2" and not list(out.glob(".checkpoint-*"))
    assert not (out / "pytorch_lora_weights.safetensors").exists() and {r["step"] for r in _records(out)} == {1, 2}
    with serve_in_background(CallableBackend(_redness_scores), ServerSettings(max_wait_ms=5), port=port):
        status, records = _run(toy_editor_path, editing_requests, out, resume=True, **common)
    assert status == 0 and [m["step"] for m in _metrics(out)] == [1, 2, 3]
    assert sorted({r["step"] for r in records}) == [1, 2, 3] and len(records) == 3 * 8
    assert (out / "pytorch_lora_weights.safetensors").is_file()

