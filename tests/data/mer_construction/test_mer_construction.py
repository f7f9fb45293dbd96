"""MER-Bench instruction synthesis (SpatialReward sec. 4.2, prompts D.3): the prompts against the paper's text,
the 2:1:1 plan, answer parsing, the report, and runs against a scripted local chat server (good, malformed,
refusal, 429 and timeout answers), a kill in the middle and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from kill_resume import kill_then_resume
from local_http import RoutedChatServer, chat_completion, request_images, request_text
from mer_construction_helpers import BASE_WIDTH, good_answer, write_sources
from paper_listings import assert_listings_match

from modeling_miescore.cli.main import main
from modeling_miescore.data.mer_construction import (GENERAL_PROMPT, HUMAN_PROMPT, MER_SUBTASKS, parse_instruction,
                                                     plan_jobs, read_sources)
from modeling_miescore.data.mer_construction.instruction_synthesis import build_synthesis_report
from modeling_miescore.data.schema import MER_CATEGORIES
from modeling_miescore.hub.errors import MIEScoreInputError

PAPER_D3 = Path(__file__).parents[2] / "fixtures" / "spatialreward_appendix_d3.txt"  # arXiv 2602.07458v4, appendix D.3
LISTINGS = {"MER-Bench: General Multi-Edit Instruction Synthesis": GENERAL_PROMPT,
            "MER-Bench: Human-Centric Multi-Edit Instruction Synthesis": HUMAN_PROMPT}


def test_d3_prompts_are_the_paper_text_word_for_word():
    assert_listings_match(PAPER_D3, LISTINGS)
    assert "’" not in GENERAL_PROMPT + HUMAN_PROMPT and GENERAL_PROMPT.count("{num_edits}") == 5


def test_plan_is_2_1_1_with_balanced_subtasks_and_2_to_5_edits(tmp_path):
    sources = read_sources(write_sources(tmp_path, 70, 60))
    jobs = plan_jobs(sources, total=120, seed=3)
    categories = Counter(j.category for j in jobs)
    assert categories == {"general": 60, "human_basic": 30, "human_fine": 30}
    for category, names in MER_SUBTASKS.items():
        counts = Counter(j.subtask for j in jobs if j.category == category)
        assert set(counts) == set(names) and max(counts.values()) - min(counts.values()) <= 1
    assert set(Counter(j.num_edits for j in jobs)) == {2, 3, 4, 5}
    assert plan_jobs(sources, total=120, seed=3) == jobs  # deterministic
    # an image keeps its operation count whatever else is planned (a resumed run asks the same question)
    small = {j.image_id: j.num_edits for j in plan_jobs(sources, total=20, seed=3)}
    assert all(small[j.image_id] == j.num_edits for j in jobs if j.image_id in small)
    with pytest.raises(MIEScoreInputError, match="needs 75 general and 75 human images"):
        plan_jobs(sources, total=150)


@pytest.mark.parametrize("answer, asked, reason", [
    (good_answer("exactly 3 edits"), 3, None),
    ("I cannot see a clear scene.", 3, "malformed"),
    ('{"is_editable": false, "reason": "blurred"}', 3, "not_editable"),
    (good_answer("exactly 3 edits", num_edits=2), 3, "wrong_num_edits"),
    ('{"is_editable": true, "edit_instruction": "", "num_edits": 3}', 3, "malformed"),
    ('{"is_editable": true, "edit_instruction": "a; b", "num_edits": 2, "edit_regions": '
     '[{"description": "sky", "bbox": [0, 0, 10, 10]}, {"description": "car", "bbox": [50, 50, 20, 2000]}]}', 2,
     "bad_regions"),
])
def test_parse_instruction(answer, asked, reason):
    fields, problem = parse_instruction(answer, asked)
    if reason is None:
        assert problem is None and fields["instruction"].startswith("Image 0") and len(fields["edit_regions"]) == 3
    else:
        assert problem[0] == reason and fields == {}


def _records(category_counts, subtasks=True, edits=3):
    records = []
    for category, n in category_counts.items():
        names = sorted(MER_SUBTASKS[category]) if subtasks else [sorted(MER_SUBTASKS[category])[0]]
        records += [{"status": "ok", "category": category, "subtask": names[i % len(names)], "num_edits": edits}
                    for i in range(n)]
    return records


def test_report_checks_ratio_subtasks_and_edit_counts():
    ok = build_synthesis_report(_records({"general": 28, "human_basic": 14, "human_fine": 14}), 56)
    assert all(check["ok"] for check in ok["checks"].values()) and ok["checks"]["subtasks"]["covered"] == 15
    skewed = build_synthesis_report(_records({"general": 20, "human_basic": 14, "human_fine": 14}, subtasks=False,
                                             edits=6), 56)
    assert not skewed["checks"]["ratio_2_1_1"]["ok"] and skewed["checks"]["ratio_2_1_1"]["shares"]["general"] == 0.4167
    missing = skewed["checks"]["subtasks"]["missing"]
    assert skewed["checks"]["subtasks"]["covered"] == 3 and len(missing) == 12
    assert "general/background_change" not in missing and "general/color_change" in missing
    assert not skewed["checks"]["num_edits"]["ok"]


# ------------------------------------------------------------------------------------------------ against a server

_BEHAVIOUR = {1: "malformed", 2: "refusal", 3: "429", 4: "timeout", 9: "not_editable"}


def _answer(body, repeat):
    index = request_images(body)[0].width - BASE_WIDTH
    text = request_text(body)
    kind = _BEHAVIOUR.get(index)
    if kind == "malformed":
        return 200, chat_completion("Here are some edits: make it nicer."), None, 0
    if kind == "refusal":
        return 200, chat_completion("", refusal="I can't help with that."), None, 0
    if kind == "429" and repeat == 0:
        return 429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}, 0
    if kind == "timeout" and repeat < 2:  # the first run's attempt and its retry time out
        return 200, chat_completion(good_answer(text, index=index)), None, 2.0
    if kind == "not_editable":
        return 200, chat_completion('{"is_editable": false, "reason": "too many people"}'), None, 0
    return 200, chat_completion(good_answer(text, index=index), 100, 20), None, 0


def _synth_args(server, manifest, folder, *extra):
    return ["mer-bench", "synthesize", "--sources", str(manifest), "--folder", str(folder), "--model",
            f"writer@{server.url}", "--timeout", "0.5", "--max-retries", "1", "--concurrency", "3", "--no-progress",
            *extra]


def test_synthesis_against_a_scripted_server_and_rerun(tmp_path):
    manifest = write_sources(tmp_path / "src", 6, 6)
    folder = tmp_path / "work"
    with RoutedChatServer(_answer) as server:
        assert main(_synth_args(server, manifest, folder)) == 1  # the timeout is unfinished
        first = len(server.requests)
        report = json.loads((folder / "synthesis_report.json").read_text())
        assert report["rejected"] == {"malformed": 1, "not_editable": 1, "refusal": 1} and report["pending"] == 1
        assert main(_synth_args(server, manifest, folder)) == 0  # the timed-out request is answered now
        assert len(server.requests) - first == 1  # nothing else is asked again
        bodies = [r["body"] for r in server.requests]
    ledger = [json.loads(line) for line in (folder / "instructions.jsonl").read_text().splitlines()]
    assert len(ledger) == len({r["id"] for r in ledger}) == 12
    report = json.loads((folder / "synthesis_report.json").read_text())
    assert report["accepted"] == 9 and report["pending"] == 0
    assert report["per_category"] == dict(zip(MER_CATEGORIES, [4, 3, 2]))  # 1, 2 (general), 9 (human-fine) rejected
    assert report["checks"]["ratio_2_1_1"]["ok"] is False  # 4:3:2 is not 2:1:1: reported
    for body in bodies:  # the verbatim prompt, filled, after the image, then the subtask line
        text = request_text(body)
        job = next(r for r in ledger if r["image"].endswith(f"src{request_images(body)[0].width - BASE_WIDTH:02d}.png"))
        prompt = GENERAL_PROMPT if job["category"] == "general" else HUMAN_PROMPT
        assert text.startswith(prompt.replace("{num_edits}", str(job["num_edits"])))
        assert "{num_edits}" not in text and "Focus the edits mainly on this edit type" in text
    accepted = [r for r in ledger if r["status"] == "ok"]
    assert all(len(r["edit_regions"]) == r["num_edits"] and 2 <= r["num_edits"] <= 5 for r in accepted)
    usage = [json.loads(line) for line in (folder / "usage.jsonl").read_text().splitlines()]
    first_run = usage[0]["usage"]["totals"]
    assert first_run["retries"] == 2 and first_run["failed_by_kind"] == {"refusal": 1, "timeout": 1}  # 429 retried


def test_synthesis_kill_and_resume(tmp_path):
    manifest = write_sources(tmp_path / "src", 5, 5)
    folder = tmp_path / "work"

    def slow(body, repeat):
        index = request_images(body)[0].width - BASE_WIDTH
        return 200, chat_completion(good_answer(request_text(body), index=index)), None, 0.3

    with RoutedChatServer(slow) as server:
        args = _synth_args(server, manifest, folder, "--concurrency", "1", "--chunk-size", "2", "--timeout", "5")
        cached, resent = kill_then_resume(server, args, folder / "calls.sqlite", kill_after=5)
    assert cached >= 3 and resent == 10 - cached
    ledger = [json.loads(line) for line in (folder / "instructions.jsonl").read_text().splitlines()]
    assert len(ledger) == len({r["id"] for r in ledger}) == 10 and all(r["status"] == "ok" for r in ledger)


def test_synthesis_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    manifest = write_sources(tmp_path / "src", 2, 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"image_id": "a", "image": "missing.png", "domain": "general"}\n')
    folder = tmp_path / "work"
    base = ["mer-bench", "synthesize", "--folder", str(folder), "--no-progress"]
    assert main([*base, "--sources", str(bad), "--model", "m@http://127.0.0.1:9/v1"]) == 2
    assert "missing.png' does not exist" in capsys.readouterr().err
    assert main([*base, "--sources", str(manifest), "--model", "not-a-spec"]) == 2
    assert "is not MODEL@URL" in capsys.readouterr().err
    assert main([*base, "--sources", str(manifest), "--model", "m@http://127.0.0.1:9/v1", "--total", "9"]) == 2
    assert "needs 5 general and 4 human images" in capsys.readouterr().err
    bad.write_text('{"image_id": "a", "image": "x.png", "domain": "animals"}\n')
    assert main([*base, "--sources", str(bad), "--model", "m@http://127.0.0.1:9/v1"]) == 2
    assert not folder.exists()


def test_synthesis_with_a_local_transformers_model(tmp_path, tiny_qwen3vl_path):
    """`--model transformers:PATH`: the tiny random Qwen3-VL writes garbage, so every job is rejected as
    malformed (a final outcome: the run finishes, a rerun asks nothing)."""
    manifest = write_sources(tmp_path / "src", 2, 2)
    folder = tmp_path / "work"
    args = ["mer-bench", "synthesize", "--sources", str(manifest), "--folder", str(folder), "--model",
            f"transformers:{tiny_qwen3vl_path}", "--device", "cpu", "--dtype", "float32", "--max-tokens", "8",
            "--max-pixels", "4096", "--no-progress"]
    assert main(args) == 0
    report = json.loads((folder / "synthesis_report.json").read_text())
    assert report["rejected"] == {"malformed": 4} and report["accepted"] == 0 and report["pending"] == 0
    assert main(args) == 0
    usage = [json.loads(line) for line in (folder / "usage.jsonl").read_text().splitlines()]
    assert usage[0]["usage"]["totals"]["sent"] == 4 and usage[1]["usage"]["totals"]["requests"] == 0
