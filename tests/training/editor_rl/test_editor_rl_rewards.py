"""Editor-RL rewards from MIEScore: in this process with prefix reuse, and through two real `miescore serve`
replicas (groups kept whole on one replica, rewards equal to the scorer's); failures over HTTP: a replica down,
all down, a 500 retried, a sample the model fails on, a slow server, answers without a reward."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from PIL import Image

from edit_groups import rl_groups
from local_http import RoutedChatServer, score_groups_answer

from modeling_miescore.hub.miescore_overall import overall_score
from modeling_miescore.serving.backends import CallableBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.serving.settings import ServerSettings
from modeling_miescore.rewards.backends import MIEScoreReward, parse_score_weights
from modeling_miescore.rewards.specs import build_reward
from modeling_miescore.rewards.groups import RewardUnavailableError, flat_samples
from modeling_miescore.rewards.backends import ServedReward


NAMES = ("visual_quality", "instruction_following", "attribute_preservation")


@pytest.fixture(scope="module")
def groups(examples):
    return rl_groups(examples, sizes=(2, 2))


@pytest.fixture(scope="module")
def reference(tiny_miescore, groups):
    """What the scorer returns for the groups' edits, each edit's full prompt (no prefix reuse)."""
    samples, _ = flat_samples(groups)
    return tiny_miescore.score_batch(samples, batch_size=2, reuse_prefix=False)


def _flat(scores):
    return [r for group in scores for r in group.rewards]


def test_in_process_miescore_with_prefix_reuse_equals_scoring_without(tiny_miescore, groups, reference):
    calls = []
    original = tiny_miescore.score_batch

    def spy(samples, **kwargs):
        calls.append(kwargs)
        return original(samples, **kwargs)

    reward = MIEScoreReward(tiny_miescore)
    tiny_miescore.score_batch = spy
    try:
        scores = reward.score_groups(groups)
    finally:
        del tiny_miescore.score_batch
    # one call, each edit labelled with its group's key: the group's prefix runs once
    assert len(calls) == 1 and calls[0]["reuse_prefix"] is True
    assert calls[0]["groups"] == [g.key for g in groups for _ in g.edits] and calls[0]["batch_size"] == 2
    assert _flat(scores) == pytest.approx([r["overall"] / 100 for r in reference], abs=1e-5)
    assert len(set(np.round(_flat(scores), 6))) == 4  # the scores depend on the images
    assert all(f is None for s in scores for f in s.failures)
    for name in NAMES:
        assert [v for s in scores for v in s.components[name]] == pytest.approx([r[name] for r in reference], abs=1e-3)


def test_score_weights_forms_and_errors():
    assert parse_score_weights(None) is None
    assert parse_score_weights("vq=1,if=2,ap=1") == parse_score_weights([1, 2, 1]) == (0.25, 0.5, 0.25)
    assert parse_score_weights({"instruction_following": 3}) == parse_score_weights("0, 1, 0") == (0.0, 1.0, 0.0)
    for bad, message in (("vq=1,style=2", "not one of"), ([1, 2], "give 3"), ("0,0,0", "positive sum"),
                         ([1, -1, 1], "non-negative"), ("a,b,c", "must be numbers")):
        with pytest.raises(ValueError, match=message):
            parse_score_weights(bad)


def test_unreadable_edit_is_a_failed_sample_and_the_others_are_scored(tiny_miescore, groups, reference, tmp_path):
    group = groups[0]
    broken = type(group)(group.key, group.sources, group.instruction,
                         (group.edits[0], str(tmp_path / "never-written.png")), group.source_ids)
    [scores] = MIEScoreReward(tiny_miescore).score_groups([broken])
    assert scores.rewards[1] is None and scores.failures == [None, "unreadable_image"]
    assert scores.rewards[0] == pytest.approx(reference[0]["overall"] / 100, abs=1e-5)
    assert scores.components["visual_quality"][1] is None


def _dead_url() -> str:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_two_replicas_keep_each_group_whole_and_reward_what_the_scorer_returns(miescore_replicas, groups, reference):
    for _, backend in miescore_replicas:
        backend.seen.clear()
    urls = ",".join(server.url for server, _ in miescore_replicas)
    reward = build_reward(f"serve:{urls}", weights="vq=1,if=2,ap=1")
    try:
        scores = reward.score_groups(groups)
    finally:
        reward.close()
    # weights over VQ/IF/AP: eq. 2's geometric mean with these exponents (normalised), of the scorer's scores
    expected = [overall_score(*(r[n] for n in NAMES), weights=(0.25, 0.5, 0.25)) / 100 for r in reference]
    assert _flat(scores) == pytest.approx(expected, abs=1e-5)
    assert scores[0].components["attribute_preservation"] == pytest.approx(
        [r["attribute_preservation"] for r in reference[:2]], abs=1e-3)
    for group in groups:
        holders = [b for _, b in miescore_replicas if any(i == group.instruction for i, _ in b.seen)]
        assert len(holders) == 1  # the whole group on one replica ...
        ids = [gid for i, gid in holders[0].seen if i == group.instruction]
        assert len(ids) == len(group.edits) and len(set(ids)) == 1  # ... as one shared-prefix group
    assert all(b.seen for _, b in miescore_replicas)  # and the two groups went to different replicas


def test_a_replica_down_moves_its_groups_and_all_down_stops_clearly(miescore_replicas, groups, reference):
    server = miescore_replicas[0][0]
    reward = ServedReward([_dead_url(), server.url], max_retries=1, backoff=0.01)
    try:
        assert _flat(reward.score_groups(groups)) == pytest.approx([r["overall"] / 100 for r in reference], abs=1e-5)
        health = reward.client.replicas.describe()
        assert health[server.url] == "up" and health[reward.client.base_urls[0]].startswith("down: cannot reach")
    finally:
        reward.close()
    dead = [_dead_url(), _dead_url()]
    reward = ServedReward(dead, max_retries=1, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(RewardUnavailableError) as info:
        reward.score_groups(groups)
    assert time.monotonic() - started < 10
    assert all(url in str(info.value) for url in dead) and "cannot reach" in str(info.value)
    reward.close()


def _mean_reward(group, image) -> dict:
    return {"overall": float(np.asarray(image, dtype=np.float64).mean()) / 2.55}


def test_a_500_naming_no_sample_is_retried(groups):
    def answer(body, repeat):
        if repeat == 0:
            return 500, {"error": {"field": None, "message": "worker crashed", "kind": "internal_error"}}, None, 0
        return 200, score_groups_answer(body, _mean_reward), None, 0

    with RoutedChatServer(answer) as server:
        reward = ServedReward(server.origin, backoff=0.01)
        scores = reward.score_groups(groups)
        reward.close()
    assert len(server.requests) == 2 and server.requests[0]["body"] == server.requests[1]["body"]
    assert _flat(scores) == pytest.approx(
        [_mean_reward(None, e)["overall"] / 100 for g in groups for e in g.edits], abs=1e-9)


def test_a_sample_the_model_fails_on_is_flagged_and_its_group_mates_are_scored(groups, tmp_path):
    black = Image.new("RGB", (48, 40))

    def score(samples):
        if any(not np.asarray(s.edited).any() for s in samples):
            raise RuntimeError("CUDA error on this image")
        return [_mean_reward(None, s.edited) for s in samples]

    group = groups[0]
    edits = (group.edits[0], black, str(tmp_path / "missing.png"), group.edits[1])
    broken = type(group)(group.key, group.sources, group.instruction, edits, group.source_ids)
    with serve_in_background(CallableBackend(score), ServerSettings(max_wait_ms=5)) as server:
        reward = ServedReward(server.url, backoff=0.01)
        [scores, other] = reward.score_groups([broken, groups[1]])
        reward.close()
    assert scores.failures == [None, "http_500", "unreadable_image", None]
    assert scores.rewards[0] == pytest.approx(_mean_reward(None, edits[0])["overall"] / 100)
    assert scores.rewards[3] == pytest.approx(_mean_reward(None, edits[3])["overall"] / 100)
    assert other.failures == [None] * 2


def test_a_slow_server_stops_the_reward_clearly_and_missing_rewards_are_flagged(groups):
    with RoutedChatServer(lambda body, repeat: (200, score_groups_answer(body, _mean_reward), None, 2.0)) as server:
        reward = ServedReward(server.origin, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(RewardUnavailableError, match="within the client timeout"):
            reward.score_groups(groups)
        assert time.monotonic() - started < 1.5  # a timeout is not retried on the same replica
        reward.close()

    def nan_and_short(body, repeat):
        answer = score_groups_answer(body, lambda group, image: {"overall": None})
        if len(body["groups"]) > 1:
            answer["results"] = answer["results"][:-1]  # a server that loses a result
        return 200, answer, None, 0

    with RoutedChatServer(nan_and_short) as server:
        reward = ServedReward(server.origin)
        [scores] = reward.score_groups(groups[:1])
        assert scores.rewards == [None] * 2 and scores.failures == ["not_a_number"] * 2  # null
        with pytest.raises(RewardUnavailableError, match="answered 4 edits with 3 results"):
            reward.score_groups(groups)
        reward.close()


def test_an_error_naming_no_sample_is_narrowed_down_to_the_edit_that_causes_it(groups):
    """A stand-in replica refuses any request holding a black edit with a 413 about the whole body: the client
    splits the request (groups apart, then edit by edit) until only the black edit is refused."""
    black = Image.new("RGB", (48, 40))

    def answer(body, repeat):
        seen = score_groups_answer(body, lambda group, image: {"black": not np.asarray(image).any()})["results"]
        if any(result["black"] for result in seen):
            return 413, {"error": {"field": "body", "message": "request too large", "kind": "too_large"}}, None, 0
        return 200, score_groups_answer(body, _mean_reward), None, 0

    group = groups[1]
    broken = type(group)(group.key, group.sources, group.instruction, (group.edits[0], black, group.edits[1]))
    with RoutedChatServer(answer) as server:
        reward = ServedReward(server.origin)
        scores = reward.score_groups([groups[0], broken])
        reward.close()
    assert scores[0].failures == [None, None] and scores[1].failures == [None, "http_413", None]
    assert scores[1].rewards[2] == pytest.approx(_mean_reward(None, group.edits[1])["overall"] / 100)
    # all at once, then the two groups apart, then the broken group's three edits one by one
    assert [sum(len(g["edited"]) for g in r["body"]["groups"]) for r in server.requests] == [5, 2, 3, 1, 1, 1]
