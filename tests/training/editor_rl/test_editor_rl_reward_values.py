"""Only real rewards are trained on (issue 31, HIGH 2): a reward is a finite real number (not a bool, not a
string) inside the reward's declared range; anything else is a failed sample, counted and never a training signal.
Served answers with duplicate keys are ambiguous, reordered results are matched by their labels, the advantage
arithmetic does not overflow and ``metrics.jsonl`` stays strict JSON."""

from __future__ import annotations

import json
import math
import random

import pytest
from PIL import Image

from editor_rl_runs import toy_config
from local_http import RoutedChatServer, score_groups_answer
from modeling_miescore.training.editor_rl.objective import group_advantages
from modeling_miescore.rewards.groups import EditGroup, RewardUnavailableError
from modeling_miescore.rewards.backends import ServedReward
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
REWARDS = "modeling_miescore.testing.editor_rewards"


def _groups(n_groups=1, n_edits=3):
    source = Image.new("RGB", (16, 16), (10, 20, 30))
    return [EditGroup(f"k{g}", (source,), f"instruction {g}",
                      tuple(Image.new("RGB", (16, 16), (40 * e, 0, 0)) for e in range(n_edits)), (f"s{g}",))
            for g in range(n_groups)]


def test_a_reward_value_is_a_finite_real_number_inside_its_range():
    import numpy as np
    import torch

    from modeling_miescore.rewards.groups import checked_value

    assert checked_value(0.5, (0, 1)) == (0.5, None) and checked_value(np.float32(0.25)) == (0.25, None)
    assert checked_value(torch.tensor(0.75)) == (0.75, None) and checked_value(3) == (3.0, None)
    for value in ("55", True, False, None, [0.5], {"v": 1}, np.bool_(True), torch.tensor(True)):
        assert checked_value(value) == (None, "not_a_number"), value
    for value in (float("nan"), float("inf"), 10 ** 400, np.float64("-inf")):
        assert checked_value(value) == (None, "nan"), value
    assert checked_value(1e6, (0, 1)) == (None, "out_of_range") and checked_value(-500, (0, 100))[1] == "out_of_range"


@pytest.mark.parametrize("overall,reason", [("55", "not_a_number"), (True, "not_a_number"), (1e6, "out_of_range"),
                                            (-500, "out_of_range"), (None, "not_a_number")])
def test_a_served_miescore_answer_off_its_0_100_scale_is_a_failed_sample(overall, reason):
    def answer(body, repeat):
        return 200, score_groups_answer(body, lambda group, image: {"overall": overall if image.getpixel((0, 0))[0]
                                                                    else 50.0}), None, 0

    with RoutedChatServer(answer) as server:
        reward = ServedReward(server.origin)
        [scores] = reward.score_groups(_groups())
        reward.close()
    assert scores.rewards == [0.5, None, None] and scores.failures == [None, reason, reason]


def test_a_served_spatialreward_answer_off_0_1_or_with_a_non_bool_failed_flag_fails():
    values = iter([{"reward": 0.4, "failed": False}, {"reward": 1.5, "failed": False},
                   {"reward": 0.4, "failed": "no"}])

    with RoutedChatServer(lambda body, repeat: (200, score_groups_answer(body, lambda g, i: next(values)), None,
                                                0)) as server:
        reward = ServedReward(server.origin)
        [scores] = reward.score_groups(_groups())
        reward.close()
    assert scores.rewards == [0.4, None, None] and scores.failures[1] == "out_of_range"


def _raw(results_json: str) -> bytes:
    return ('{"results": ' + results_json + '}').encode()


def test_duplicate_keys_in_a_served_answer_are_ambiguous():
    row = lambda e, body: '{"overall": %s, "group": 0, "index": %d}' % (body, e)  # noqa: E731
    duplicated_score = _raw("[" + ", ".join([row(0, "40"), row(1, '40, "overall": 90'), row(2, "60")]) + "]")
    two_lists = ('{"results": [%s], "results": [%s]}' % (", ".join(row(e, "10") for e in range(3)),
                                                         ", ".join(row(e, "90") for e in range(3)))).encode()
    for body, rewards, failures in [
            (duplicated_score, [0.4, None, 0.6], [None, "duplicate_key:overall", None]),
            (two_lists, [None] * 3, ["duplicate_key:results"] * 3)]:
        with RoutedChatServer(lambda request, repeat, body=body: (200, body, None, 0)) as server:
            reward = ServedReward(server.origin)
            [scores] = reward.score_groups(_groups())
            reward.close()
        assert scores.rewards == rewards and scores.failures == failures


def test_reordered_results_are_matched_by_their_labels_and_unlabelled_ones_refused():
    def shuffled(body, repeat):
        answer = score_groups_answer(body, lambda group, image: {"overall": float(image.getpixel((0, 0))[0])})
        random.Random(3).shuffle(answer["results"])
        return 200, answer, None, 0

    with RoutedChatServer(shuffled) as server:
        reward = ServedReward(server.origin)
        scores = reward.score_groups(_groups(n_groups=2))
        reward.close()
    assert [s.rewards for s in scores] == [[0.0, 0.4, 0.8]] * 2  # each edit's own score, whatever the order

    def unlabelled(body, repeat):
        answer = score_groups_answer(body, lambda group, image: {"overall": 50.0})
        for result in answer["results"]:
            del result["index"]
        return 200, answer, None, 0

    with RoutedChatServer(unlabelled) as server:
        reward = ServedReward(server.origin)
        with pytest.raises(RewardUnavailableError, match="without integer 'group' and 'index' labels"):
            reward.score_groups(_groups())
        reward.close()


def test_advantages_of_huge_rewards_do_not_overflow_and_a_clip_must_be_positive():
    small = [0.17, 0.16, 0.15, 0.14]
    huge = [1.7e308, 1.6e308, 1.5e308, 1.4e308]  # their plain sum overflows
    a = group_advantages([("k", small)]).advantages[0]
    b = group_advantages([("k", [v * 1e308 for v in small])]).advantages[0]
    c = group_advantages([("k", [1.7e308, -1.7e308, 0.0, 1.0])]).advantages[0]
    d = group_advantages([("k", huge)]).advantages[0]
    assert all(math.isfinite(x) for x in a + b + c + d) and d == pytest.approx(a, rel=1e-6)
    assert b == pytest.approx(a, rel=1e-6) and c[0] == pytest.approx(math.sqrt(2), rel=1e-6)
    assert group_advantages([("k", [v * 1e308 for v in small])]).reward_mean == pytest.approx(1.55e307)
    for clip in (0.0, -5.0, float("nan")):
        with pytest.raises(ValueError, match="advantage clip must be a finite number > 0"):
            group_advantages([("k", small)], clip=clip)


@pytest.mark.parametrize("reward", ["text_reward", "bool_reward"])
def test_strings_and_booleans_from_a_callable_are_never_trained_on(toy_editor_path, editing_requests, tmp_path,
                                                                   reward):
    out = tmp_path / "run"
    with pytest.raises(RewardUnavailableError, match=r"8 of 8 rewards failed at step 1 .*not_a_number"):
        FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out,
                                         reward=f"{REWARDS}:{reward}")).train()
    assert not list(out.glob("checkpoint-*")) and not (out / "metrics.jsonl").exists()


def test_a_value_outside_the_declared_range_is_a_counted_failure(toy_editor_path, editing_requests, tmp_path):
    result = FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, tmp_path / "run", max_steps=2,
                                              reward=f"{REWARDS}:out_of_range_reward",
                                              max_reward_failure_rate=0.6)).train()
    assert [m["reward_failures"] for m in result["metrics"]] == [4, 4]
    assert all(0 <= m["reward_mean"] <= 1 for m in result["metrics"])


def _strict_lines(path):
    def refuse(constant):
        raise AssertionError(f"{constant} in {path}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_rewards_near_the_float_limit_train_with_finite_advantages(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "run"
    result = FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=2,
                                              reward=f"{REWARDS}:huge_reward", save_rollouts_steps=1)).train()
    lines = _strict_lines(out / "metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2] and all(1.4e308 <= line["reward_mean"] <= 1.7e308
                                                              for line in lines)
    advantages = [a for line in _strict_lines(out / "rollouts" / "rollouts.jsonl") for a in [line["advantage"]]]
    assert advantages and all(a is None or -5 <= a <= 5 for a in advantages)
    assert len({a for a in advantages if a is not None}) > 2  # not all +5 (the overflowing arithmetic's answer)
    assert result["metrics"][-1]["grad_norm"] is not None


def test_metrics_without_an_update_are_null_not_nan(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "run"
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=1, drop_zero_std_groups=True,
                                     reward=f"{REWARDS}:constant_reward")).train()
    [line] = _strict_lines(out / "metrics.jsonl")
    assert line["zero_std_groups"] == 2 and line["loss"] is None and line["ratio_mean"] is None
    assert "Mean reward at step 1: 0.5000" in (out / "README.md").read_text()
