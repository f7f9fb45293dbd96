"""Reward-guided best-of-N (issue 33.5): ``miescore edit --num-images N --select SPEC`` keeps the candidate the reward
scores highest (every candidate on disk with its reward; MIEScore scores a request's N with their shared prefix run
once), ``benchmark gedit`` judges every candidate and reports the first sample, the selected one and the judge's own
best of N, and ``benchmark editors`` compares the three with paired CIs."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from editor_bench_helpers import converted
from local_http import RoutedChatServer, chat_completion, request_images
from PIL import Image

from modeling_miescore.cli.main import main
from modeling_miescore.testing.editor_rewards import redness

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"
REWARDS = "modeling_miescore.testing.editor_rewards"
REDNESS = f"{REWARDS}:mean_redness"


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _edit(toy_editor_path, requests, out, *extra):
    return main(["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(requests), "--out",
                 str(out), "--steps", "2", "--num-images", "3", "--no-progress", *extra])


def test_select_keeps_the_highest_reward_and_every_candidate_with_its_reward(toy_editor_path, editing_requests,
                                                                             tmp_path, capsys):
    out = tmp_path / "out"
    assert _edit(toy_editor_path, editing_requests, out, "--select", REDNESS) == 0
    requests = [json.loads(x) for x in editing_requests.read_text().splitlines()]
    lines = _lines(out / "edits.jsonl")
    assert len(lines) == len(requests) and len(_lines(out / "candidates.jsonl")) == 3 * len(requests)
    for line in lines:
        rewards = [redness(Image.open(out / c["edited"])) for c in line["candidates"]]  # each candidate on disk
        assert [c["reward"] for c in line["candidates"]] == pytest.approx(rewards)
        assert line["sample"] == max(range(3), key=lambda k: (rewards[k], -k))  # the best, lowest sample on ties
        assert line["edited"] == line["candidates"][line["sample"]]["edited"] and line["reward"] == max(rewards)
        assert line["selected_by"] == REDNESS and len({c["edited"] for c in line["candidates"]}) == 3
    capsys.readouterr()
    assert _edit(toy_editor_path, editing_requests, out, "--select", REDNESS) == 0  # resumes: nothing to do
    assert "selected 0 edit(s)" in capsys.readouterr().err and _lines(out / "edits.jsonl") == lines
    # another reward, a plain run's folder, or a single candidate: refused before anything is made
    assert _edit(toy_editor_path, editing_requests, out, "--select", "modeling_miescore.testing.editor_rewards:"
                 "nan_reward") == 2
    assert "holds a selection of" in capsys.readouterr().err
    assert main(["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(editing_requests),
                 "--out", str(tmp_path / "one"), "--select", REDNESS, "--no-progress"]) == 2
    assert "--num-images N with N >= 2" in capsys.readouterr().err and not (tmp_path / "one" / "edits.jsonl").exists()


def test_a_request_whose_every_reward_failed_is_listed_and_retried(toy_editor_path, editing_requests, tmp_path,
                                                                   capsys):
    out = tmp_path / "out"
    assert _edit(toy_editor_path, editing_requests, out, "--select",
                 "modeling_miescore.testing.editor_rewards:nan_reward") == 1  # NaN is a failed reward, not a number
    err = capsys.readouterr().err
    assert "no candidate has a reward (nan)" in err and "rerun the same command" in err
    assert not (out / "edits.jsonl").read_text().strip() and len(_lines(out / "candidates.jsonl")) > 0


def test_select_with_miescore_scores_each_requests_candidates_together(toy_editor_path, editing_requests,
                                                                       tiny_miescore_path, tiny_miescore, tmp_path,
                                                                       monkeypatch):
    """The N candidates of a request are one group: one score_batch call with the group's prefix run once
    (reuse_prefix, a group key per request), and the rewards are MIEScore's overall / 100 of each candidate."""
    from modeling_miescore.hub.modeling_miescore import MIEScoreModel

    calls = []
    original = MIEScoreModel.score_batch

    def spy(self, samples, *args, **kwargs):
        calls.append((len(samples), kwargs.get("reuse_prefix"), list(kwargs.get("groups") or [])))
        return original(self, samples, *args, **kwargs)

    monkeypatch.setattr(MIEScoreModel, "score_batch", spy)
    out = tmp_path / "out"
    assert _edit(toy_editor_path, editing_requests, out, "--select", f"miescore:{tiny_miescore_path}", "--limit", "2",
                 "--device", "cpu") == 0
    assert calls and all(reuse for _, reuse, _ in calls)
    groups = [g for _, _, keys in calls for g in keys]
    assert len(groups) == 6 and len(set(groups)) == 2  # 2 requests x 3 candidates, one key per request
    monkeypatch.setattr(MIEScoreModel, "score_batch", original)
    for line in _lines(out / "edits.jsonl"):
        samples = [{"sources": [str(out / s) for s in line["sources"]], "edited": str(out / c["edited"]),
                    "instruction": line["instruction"]} for c in line["candidates"]]
        alone = [r["overall"] / 100 for r in tiny_miescore.score_batch(samples, batch_size=1, reuse_prefix=False)]
        assert [c["reward"] for c in line["candidates"]] == pytest.approx(alone, abs=1e-3)
        assert set(line["candidates"][0]["components"]) >= {"visual_quality", "instruction_following"}


def test_benchmark_reports_first_selected_and_oracle_and_editors_compares_them(toy_editor_path, tmp_path):
    dataset, truth = converted("gedit-bench", tmp_path, languages=("en",), source_side=40)
    out = tmp_path / "edits"
    assert main(["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--dataset", str(dataset), "--out",
                 str(out), "--steps", "2", "--num-images", "3", "--select", REDNESS, "--no-progress"]) == 0
    lines = {x["id"]: x for x in _lines(out / "edits.jsonl")}

    def scores(image):  # a judge whose taste is not the selector's (redness): the two need not agree
        import hashlib

        value = hashlib.sha256(image.convert("RGB").tobytes()).digest()[0] % 11
        return [value, value]

    def answer(body, repeat):
        text = json.dumps({"score": scores(request_images(body)[-1]), "reasoning": "r"})
        return 200, chat_completion(text, 10, 5), None, 0

    report_dir = tmp_path / "rep"
    with RoutedChatServer(answer) as server:
        assert main(["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(out / "edits.jsonl"), "--out",
                     str(report_dir), "--backend", "openai", "--base-url", server.url, "--model", "gpt-4.1",
                     "--image-format", "PNG", "--no-progress", "--bootstrap", "0", "--no-plots", "--label",
                     "RANDOM WEIGHTS (a test)"]) == 0
        assert len(server.requests) == 2 * 3 * len(truth)  # every candidate judged (SC and PQ)
    report = json.loads((report_dir / "report.json").read_text())
    views = report["selection"]["views"]
    assert report["selection"]["selector"] == REDNESS
    judged = {}
    for key, line in lines.items():
        source = Image.open(report_dir / next(r for r in report["per_row"] if r["row"] == key)["sources"][0])
        o = []
        for c in line["candidates"]:
            edit = Image.open(out / c["edited"]).convert("RGB").resize(source.size)
            o.append(math.sqrt(min(scores(edit)) * min(scores(edit))))
        judged[key] = (o[0], o[line["sample"]], max(o))
    for view, index in (("first", 0), ("selected", 1), ("oracle", 2)):
        assert {r["row"]: r["o"] for r in views[view]["per_row"]} == pytest.approx(
            {k: v[index] for k, v in judged.items()})
    assert {r["row"]: r["o"] for r in report["per_row"]} == pytest.approx({k: v[1] for k, v in judged.items()})
    cmp = tmp_path / "cmp"
    assert main(["benchmark", "editors", "--runs", f"toy={report_dir}", "--out", str(cmp), "--bootstrap", "20"]) == 0
    comparison = json.loads((cmp / "report.json").read_text())
    assert comparison["runs"] == ["toy: first sample", "toy: selected", "toy: judge's best of N"]
    assert comparison["baseline"] == "toy: first sample"

    def overall(index):
        by_type = {}
        for t in truth:
            by_type.setdefault(t["task_type"], []).append(judged[t["key"]][index])
        return sum(sum(v) / len(v) for v in by_type.values()) / len(by_type)

    for name, index in (("toy: selected", 1), ("toy: judge's best of N", 2)):
        delta = comparison["table3"][name]["gedit"]["delta"]
        assert delta["value"] == pytest.approx(overall(index) - overall(0)) and delta["n_paired"] == len(truth)
        assert 0 < delta["p_value"] <= 1
    assert overall(2) >= overall(1) and overall(2) >= overall(0)  # nothing beats the judge's own choice
    assert len({round(overall(i), 6) for i in range(3)}) == 3  # the three views differ on this fixture
    page = (cmp / "report.md").read_text()
    assert "candidate modeling_miescore.testing.editor_rewards:mean_redness scored highest" in page
    assert "> **RANDOM WEIGHTS (a test)**" in page  # the run's label carries over to the comparison


def _edit_process(toy_editor_path, requests, out, *extra):
    """``miescore edit`` in a child process (a reward's ``os._exit`` would end this test session)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "modeling_miescore.cli.main", "edit", "--pipeline", TOY, "--model",
                           str(toy_editor_path), "--input", str(requests), "--out", str(out), "--steps", "2",
                           "--num-images", "2", "--limit", "2", "--no-progress", *extra],
                          env=env, cwd=root, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("reward,message", [
    ("exiting_reward", r"failed while scoring the candidates: raised SystemExit\(SystemExit\(0\)\) inside the reward"),
    ("os_exit_reward", r"failed while scoring the candidates: RewardExitError: called os._exit\(0\)"),
    ("wrong_length_reward", r"failed while scoring the candidates: ValueError: reward '\S+' returned 3 rewards for "
                            "4 edits"),
    ("value_error_reward", r"failed while scoring the candidates: ValueError: cannot score an image"),
])
def test_a_reward_that_exits_or_raises_stops_the_selection_with_one_line(toy_editor_path, editing_requests,
                                                                         tmp_path, reward, message):
    """The trainer's contract (test_editor_rl_reward_exits): before, SystemExit(0) / os._exit(0) ended `edit` with
    exit 0 and no word (candidates made, no edit selected), and a ValueError was a traceback."""
    out = tmp_path / "out"
    done = _edit_process(toy_editor_path, editing_requests, out, "--select", f"{REWARDS}:{reward}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "is unavailable" in x)
    assert re.search(rf"miescore edit: reward '{REWARDS}:{reward}' is unavailable: {message}", line), line
    assert "the candidates are kept" in done.stderr
    assert len(_lines(out / "candidates.jsonl")) == 4 and not (out / "edits.jsonl").read_text()


@pytest.mark.parametrize("spec,message", [
    ("bogus", "unknown reward 'bogus'"),
    (f"{REWARDS}:mean_rednes", "has no callable 'mean_rednes'; did you mean mean_redness?"),
    ("no_such_package.rewards:score", "cannot import module 'no_such_package.rewards'"),
    ("miescore:/no/such/checkpoint", "no checkpoint folder '/no/such/checkpoint'"),
])
def test_an_unusable_select_spec_is_refused_before_any_candidate_is_made(toy_editor_path, editing_requests, tmp_path,
                                                                         capsys, spec, message):
    """Before, the spec was tried after N x requests candidates were made, and selection.json kept it: the rerun
    with the corrected spec on the same --out was refused."""
    out = tmp_path / "out"
    assert _edit(toy_editor_path, editing_requests, out, "--select", spec, "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "--select: " in err and message in err and "Traceback" not in err
    assert not (out / "candidates.jsonl").exists() and not (out / "selection.json").exists()
    assert _edit(toy_editor_path, editing_requests, out, "--select", REDNESS, "--limit", "1") == 0


def test_a_recorded_selection_that_selected_nothing_yields_to_a_corrected_spec(toy_editor_path, editing_requests,
                                                                              tmp_path, capsys):
    """A folder whose selection.json records a spec that never selected anything (as an unusable spec was
    recorded before): the corrected --select resumes it with the candidates made; once an edit is selected,
    another reward is refused."""
    out = tmp_path / "out"
    assert _edit(toy_editor_path, editing_requests, out, "--select", REDNESS, "--limit", "1") == 0
    candidates = (out / "candidates.jsonl").read_text()
    (out / "edits.jsonl").write_text("")
    (out / "selection.json").write_text(json.dumps({"selected_by": "bogus", "num_images": 3}))
    assert _edit(toy_editor_path, editing_requests, out, "--select", REDNESS, "--limit", "1") == 0
    assert (out / "candidates.jsonl").read_text() == candidates and len(_lines(out / "edits.jsonl")) == 1
    assert json.loads((out / "selection.json").read_text())["selected_by"] == REDNESS
    capsys.readouterr()
    assert _edit(toy_editor_path, editing_requests, out, "--select", f"{REWARDS}:constant_reward", "--limit", "1") == 2
    assert "holds a selection of" in capsys.readouterr().err


@pytest.mark.parametrize("field,value,message", [
    ("sample", "x", "'sample' must be an integer from 0 to 2 (--num-images 3), got 'x'"),
    ("sample", 7, "'sample' must be an integer from 0 to 2 (--num-images 3), got 7"),
    ("key", None, "'key' must be the request's id (a string), got None"),
    ("edited", "../../../etc/passwd", "'edited': "),
])
def test_a_damaged_candidates_file_is_one_line_naming_its_line(toy_editor_path, editing_requests, tmp_path, capsys,
                                                               field, value, message):
    out = tmp_path / "out"
    assert _edit(toy_editor_path, editing_requests, out, "--limit", "1", "--select", REDNESS) == 0
    (out / "edits.jsonl").write_text("")  # selected again from the damaged file
    lines = _lines(out / "candidates.jsonl")
    lines[1][field] = value
    (out / "candidates.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    capsys.readouterr()
    assert _edit(toy_editor_path, editing_requests, out, "--limit", "1", "--select", REDNESS) == 2
    err = capsys.readouterr().err
    assert "candidates.jsonl' line 2: " in err and message in err and "Traceback" not in err
    assert not (out / "edits.jsonl").read_text()


def test_num_images_is_bounded_and_says_its_bound(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["edit", "--pipeline", TOY, "--model", str(tmp_path), "--input", str(tmp_path / "x.jsonl"), "--out",
              str(tmp_path / "out"), "--num-images", str(10 ** 40 - 1)])
    assert stopped.value.code == 2
    assert "--num-images: must lie in [1, 64], got 9999999999" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
