"""Editor-RL reward kinds other than MIEScore: `--reward` specs and weighted sums, `module:function` callables
(NaN, wrong length), SpatialReward through a real OpenAI-compatible test server (paper's weighted reward, the
B.2.2 min aggregation, unparsable answers, a 500 retried, the endpoint down) and in this process, and the
background RewardWorker (overlap measured, errors through the future, closing)."""

from __future__ import annotations

import functools
import json
import math
import socket
import sys
import time
import types

import numpy as np
import pytest
from PIL import Image

from edit_groups import rl_groups, spatialreward_judge, spatialreward_sub_scores
from local_http import RoutedChatServer

from modeling_miescore.hub.spatialreward_aggregation import spatial_reward
from modeling_miescore.rewards.specs import REWARD_KINDS, build_reward, parse_reward_terms
from modeling_miescore.rewards.groups import GroupScores, RewardUnavailableError
from modeling_miescore.rewards.worker import RewardWorker
from modeling_miescore.rewards.backends import SpatialRewardReward
from modeling_miescore.rewards.backends import WeightedSumReward


def _red(image) -> float:
    return float(np.asarray(image, dtype=np.float64)[..., 0].mean()) / 255.0


@pytest.fixture(scope="module")
def rewards_module():
    """An importable module of reward callables, as a user's ``my_pkg.rewards``."""
    module = types.ModuleType("editor_rl_test_rewards")
    module.redness = lambda images, instructions, sources: [_red(i) for i in images]
    module.darkness = lambda images, instructions, sources: [1.0 - _red(i) for i in images]
    module.nan_for_blue = lambda images, instructions, sources: [
        float("nan") if np.asarray(i)[..., 2].mean() > 200 else 0.5 for i in images]
    module.too_short = lambda images, instructions, sources: [0.0] * (len(images) - 1)
    module.not_a_function = 3
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


@pytest.fixture(scope="module")
def groups(examples):
    return rl_groups(examples, sizes=(3, 2))


def _flat(scores):
    return [r for group in scores for r in group.rewards]


def test_callables_weighted_sums_and_their_failures(rewards_module, groups):
    edits = [e for g in groups for e in g.edits]
    red = build_reward("editor_rl_test_rewards:redness")
    assert _flat(red.score_groups(groups)) == pytest.approx([_red(e) for e in edits])
    total = build_reward("0.7*editor_rl_test_rewards:redness + -0.2 * callable:editor_rl_test_rewards:darkness")
    assert isinstance(total, WeightedSumReward)
    scores = total.score_groups(groups)
    assert _flat(scores) == pytest.approx([0.7 * _red(e) - 0.2 * (1 - _red(e)) for e in edits])
    assert scores[1].components["editor_rl_test_rewards:darkness"] == pytest.approx(
        [1 - _red(e) for e in groups[1].edits])
    # the list forms: YAML/JSON string, a file, a Python list (extra keys are the term's options)
    listed = json.dumps([{"reward": "editor_rl_test_rewards:redness", "weight": 0.7},
                         "-0.2*editor_rl_test_rewards:darkness"])
    assert _flat(build_reward(listed).score_groups(groups)) == pytest.approx(_flat(scores))
    assert parse_reward_terms("[{reward: 'miescore:a', weight: 2, weights: 'if=1'}]") == [
        (2.0, "miescore:a", {"weights": "if=1"})]
    # NaN is a failed sample (never a number), in a sum too; a wrong length is an error naming the reward
    blue = Image.new("RGB", (32, 32), (0, 0, 255))
    mixed = type(groups[0])(groups[0].key, groups[0].sources, groups[0].instruction, (groups[0].edits[0], blue))
    [nan] = build_reward("editor_rl_test_rewards:nan_for_blue").score_groups([mixed])
    assert nan.rewards == [0.5, None] and nan.failures == [None, "nan"]
    [summed] = build_reward("1*editor_rl_test_rewards:redness + 1*editor_rl_test_rewards:nan_for_blue"
                            ).score_groups([mixed])
    assert summed.rewards[1] is None and summed.failures[1] == "editor_rl_test_rewards:nan_for_blue:nan"
    assert summed.rewards[0] == pytest.approx(_red(groups[0].edits[0]) + 0.5)
    with pytest.raises(ValueError, match="returned 2 rewards for 3 edits"):
        build_reward("editor_rl_test_rewards:too_short").score_groups(groups[:1])


@pytest.mark.parametrize("spec, options, message", [
    ("nowhere", {}, "unknown reward 'nowhere'"),
    ("http://127.0.0.1:8000", {}, "write serve:http://127.0.0.1:8000"),
    ("miescore:", {}, "names no miescore argument"),
    ("editor_rl_test_rewards:not_a_function", {}, "has no callable 'not_a_function'"),
    ("no_such_module_xyz:fn", {}, "cannot import module"),
    ("editor_rl_test_rewards:redness", {"aggregation": "min"}, "option aggregation is taken by no reward"),
    ("[{reward: 'editor_rl_test_rewards:redness', weights: 'if=1'}]", {}, "takes no option weights"),
    ("0.5*editor_rl_test_rewards:redness + 0*editor_rl_test_rewards:darkness", {}, None),
    ("0*editor_rl_test_rewards:redness", {}, "not all zero"),
    ("spatialreward-api:no-url", {}, "must be spatialreward-api:MODEL@URL"),
    ("serve:ftp://x", {}, "must start with http"),
    ("[]", {}, "non-empty list"),
])
def test_bad_reward_specs_are_clear_errors(rewards_module, spec, options, message):
    if message is None:
        assert build_reward(spec, **options) is not None
        return
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        build_reward(spec, **options)


def test_model_kinds_load_their_checkpoints_and_options_reach_the_kinds_that_take_them(
        rewards_module, tiny_miescore_path, tiny_spatialreward_path):
    spec = f"0.5*miescore:{tiny_miescore_path} + 0.5*spatialreward:{tiny_spatialreward_path}"
    total = build_reward(spec, device="cpu", dtype="float32", weights="if=1", aggregation="min")
    (_, mie), (_, spatial) = total.terms
    assert mie.name == f"miescore:{tiny_miescore_path}" and mie.weights == (0.0, 1.0, 0.0) and mie.reuse_prefix
    assert spatial.aggregation == "min_bucket" and str(spatial.scorer.device) == "cpu"
    total.close()
    with pytest.raises(ValueError, match="not a MIEScore checkpoint"):
        build_reward(f"0.5*editor_rl_test_rewards:redness + 0.5*miescore:{tiny_spatialreward_path}", device="cpu")


def test_every_kind_is_declared_once_with_its_syntax_and_options():
    assert set(REWARD_KINDS) == {"miescore", "spatialreward", "spatialreward-api", "serve", "callable"}
    assert REWARD_KINDS["spatialreward-api"].syntax == "spatialreward-api:MODEL@URL"
    assert "aggregation" in REWARD_KINDS["serve"].options and "weights" in REWARD_KINDS["miescore"].options


# ----------------------------------------------------------------------------- SpatialReward (OpenAI-compatible)

def _solid(value: int) -> Image.Image:
    return Image.new("RGB", (64, 48), (value, value, value))


def _grey_groups(examples, instructions, values):
    from modeling_miescore.rewards.groups import EditGroup, group_key

    return [EditGroup(group_key([f"s{g}"], text), tuple(examples[g]["sources"]), text,
                      tuple(_solid(v) for v in values), (f"s{g}",)) for g, text in enumerate(instructions)]


def test_spatialreward_api_reward_paper_aggregation_min_ablation_and_failures(examples):
    values = (40, 128, 230)
    groups = _grey_groups(examples, ["Make the sky grey", "FLAKY: add a grey hat", "GARBAGE: remove it",
                                     "BROKEN: recolour it"], values)
    with RoutedChatServer(spatialreward_judge) as server:
        spec = f"spatialreward-api:SpatialReward/SpatialReward-8B@{server.url}"
        paper = build_reward(spec, api_key_env="NO_KEY_FOR_TESTS", max_retries=1)
        minimum = build_reward(spec, aggregation="min", api_key_env="NO_KEY_FOR_TESTS", max_retries=1)
        try:
            weighted, min_scores = paper.score_groups(groups), minimum.score_groups(groups)
        finally:
            paper.close()
            minimum.close()
    for g, group in enumerate(groups[:2]):
        parts = [spatialreward_sub_scores(v, group.instruction) for v in values]
        assert weighted[g].rewards == pytest.approx([spatial_reward(*p) for p in parts], abs=1e-9)
        assert min_scores[g].rewards == pytest.approx([spatial_reward(*p, mode="min_bucket") for p in parts], abs=1e-9)
        assert weighted[g].components["s_con"] == [p[1] for p in parts]
        assert weighted[g].components["sc"] == pytest.approx([0.6 * p[0] + 0.4 * p[1] for p in parts])
    assert weighted[0].rewards != min_scores[0].rewards  # the two aggregations differ on these scores
    # the FLAKY group's first SC requests got 500 and were retried; the GARBAGE group cannot be parsed; the
    # BROKEN group's SC requests fail after the retry: HTTP errors, flagged, while its PQ requests succeeded
    assert weighted[2].rewards == [None] * 3 and all(f.startswith("sc:parse_failed") for f in weighted[2].failures)
    assert weighted[3].rewards == [None] * 3 and weighted[3].failures == ["sc:api_error:http"] * 3
    assert weighted[3].components["s_nat"] == [None] * 3


def test_spatialreward_endpoint_down_stops_clearly(examples):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    reward = build_reward(f"spatialreward-api:m@{dead}", max_retries=0, api_key_env="NO_KEY_FOR_TESTS")
    with pytest.raises(RewardUnavailableError, match="could not be reached or did not answer"):
        reward.score_groups(_grey_groups(examples, ["x"], (10, 20)))
    reward.close()


@pytest.fixture(scope="module")
def spatialreward_model(tiny_spatialreward_path):
    from modeling_miescore.scoring.loading import load_spatialreward

    return load_spatialreward(str(tiny_spatialreward_path), device="cpu", dtype="float32")


def _spy_on_evaluate(model, monkeypatch):
    """Record each ``evaluate_edits`` call's keyword arguments and results."""
    calls, results = [], []
    evaluate = model.evaluate_edits

    @functools.wraps(evaluate)  # keeps the signature, which the reward reads to pass group ids
    def spy(samples, **kwargs):
        calls.append(kwargs)
        results.extend(evaluate(samples, **kwargs))
        return results[-len(samples):]

    monkeypatch.setattr(model, "evaluate_edits", spy)
    return calls, results


def test_spatialreward_in_process_rewards_what_its_scorer_parsed(spatialreward_model, examples, monkeypatch):
    model = spatialreward_model
    groups = rl_groups(examples, sizes=(3,))
    shared = []

    def scripted(prompts, processor):  # generation replaced: SC answers parse for the 1st and 3rd edit only
        out = []
        for prompt in prompts:
            if "Editing instruction:" in prompt[1][0]["content"][-1]["text"]:
                shared.append(getattr(prompt, "shared", None) is not None)
                ok = len(shared) % 3 != 2
                out.append([json.dumps({"edit_region": [], "reasoning": "ok", "score": [20, 15]}) if ok
                            else "<think>no answer"])
            else:
                out.append([json.dumps({"reasoning": "ok", "score": [22, 8]})])
        return out

    monkeypatch.setattr(model, "_generate_texts", scripted)
    calls, results = _spy_on_evaluate(model, monkeypatch)
    [scores] = SpatialRewardReward(model, aggregation="min").score_groups(groups)
    # one call with the group's key as group id: the SC prompts continue the group's shared prefix
    assert calls == [{"batch_size": 3, "groups": [groups[0].key] * 3}] and shared == [True] * 3
    minimum = spatial_reward(20, 15, 22, 8, mode="min_bucket")
    assert scores.rewards == pytest.approx([minimum, None, minimum])
    assert scores.failures == [None, ",".join(results[1].failure_reasons), None] and results[1].failed
    assert scores.components["s_nat"] == [22, None, 22]
    [paper] = SpatialRewardReward(model).score_groups(groups)
    assert paper.rewards[0] == pytest.approx(spatial_reward(20, 15, 22, 8)) and paper.rewards[0] != minimum


@pytest.mark.slow
def test_spatialreward_in_process_flags_real_generations_like_evaluate_edits(spatialreward_model, examples,
                                                                             monkeypatch):
    """The real generation of a tiny random model: nothing parses, and every sample is flagged with the reasons
    of the results ``evaluate_edits`` returned inside the reward."""
    groups = rl_groups(examples, sizes=(2,))
    calls, results = _spy_on_evaluate(spatialreward_model, monkeypatch)
    [scores] = SpatialRewardReward(spatialreward_model).score_groups(groups)
    assert calls == [{"batch_size": 2, "groups": [groups[0].key] * 2}] and all(r.failed for r in results)
    assert scores.rewards == [None, None] and scores.failures == [",".join(r.failure_reasons) for r in results]


# ------------------------------------------------------------------------------------------------ RewardWorker

class _SleepyReward:
    name = "sleepy"

    def __init__(self, seconds: float, fail: Exception | None = None, wrong: bool = False):
        self.seconds, self.fail, self.wrong, self.closed = seconds, fail, wrong, False

    def score_groups(self, groups):
        time.sleep(self.seconds)
        if self.fail is not None:
            raise self.fail
        scores = [GroupScores([0.5] * len(g.edits), [None] * len(g.edits)) for g in groups]
        return scores[:-1] if self.wrong else scores

    def close(self):
        self.closed = True


def test_reward_worker_overlaps_reports_timing_and_propagates_errors(groups):
    reward = _SleepyReward(0.3)
    with RewardWorker(reward) as worker:
        pending = worker.submit(groups)
        time.sleep(0.6)  # "sampling the next batch"
        assert [s.rewards for s in pending.result()] == [[0.5] * 3, [0.5] * 2]
        assert pending.reward_seconds == pytest.approx(0.3, abs=0.15) and pending.waited_seconds < 0.1
        blocking = worker.submit(groups)
        blocking.result()  # nothing to overlap with: the caller waits the whole reward time
        assert blocking.waited_seconds == pytest.approx(blocking.reward_seconds, abs=0.1)
    timing = worker.timing
    assert reward.closed and timing.calls == 2 and timing.reward_s == pytest.approx(0.6, abs=0.2)
    assert 0.3 < timing.hidden_fraction < 0.7 and timing.as_dict()["hidden_s"] == pytest.approx(timing.hidden_s)
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit(groups)

    down = RewardWorker(_SleepyReward(0.0, fail=RewardUnavailableError("sleepy", "all replicas down")))
    with pytest.raises(RewardUnavailableError, match="all replicas down"):
        down.submit(groups).result(timeout=5)
    wrong = RewardWorker(_SleepyReward(0.0, wrong=True))
    with pytest.raises(ValueError, match="returned 1 results for 2 groups"):
        wrong.submit(groups).result(timeout=5)
    assert down.timing.failed_calls == 1
    down.close()
    wrong.close()


def test_leaving_the_worker_by_an_exception_cancels_what_has_not_started(groups):
    reward = _SleepyReward(0.5)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="sampler crashed"):
        with RewardWorker(reward) as worker:
            first = worker.submit(groups)
            second = worker.submit(groups)
            time.sleep(0.05)
            raise RuntimeError("sampler crashed")
    # the running call is waited for (a reward thread left inside torch at interpreter exit aborts the process),
    # the one not started is cancelled
    assert 0.4 < time.monotonic() - started < 3 and first.done() and second.cancelled() and reward.closed
    assert not math.isnan(first.result(timeout=0)[0].rewards[0])


def test_the_wait_for_a_running_call_is_bounded(groups):
    reward = _SleepyReward(5.0)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="sampler crashed"):
        with RewardWorker(reward, drain_seconds=0.3) as worker:
            worker.submit(groups)
            time.sleep(0.05)
            raise RuntimeError("sampler crashed")
    assert time.monotonic() - started < 2 and reward.closed
