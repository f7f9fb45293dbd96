"""The zero-shot MLLM judge: answer parsing, and `miescore judge` against a real local chat-completions server
with scripted answers (good, malformed, refusals, 429, timeouts, a kill and a resume), plus a local transformers
model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from kill_resume import kill_then_resume
from local_http import RoutedChatServer, chat_completion, request_images, request_text
from PIL import Image

from modeling_miescore.cli.main import main
from modeling_miescore.evaluation.prediction_files import read_score_predictions
from modeling_miescore.judges.mllm_judge import ANSWER_FORMAT, JUDGE_RUBRIC, judge_prompt_parts, parse_mos_answer
from modeling_miescore.hub.miescore_overall import overall_score

DIMS = ("visual_quality", "instruction_following", "attribute_preservation")


def _answer(vq, if_, ap, reasoning="fine"):
    return json.dumps({"reasoning": reasoning, "visual_quality": vq, "instruction_following": if_,
                       "attribute_preservation": ap})


# ------------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize("text,scores,issues", [
    (_answer(70, 60.5, 80), (70, 60.5, 80), []),
    ("```json\n" + _answer(10, 20, 30) + "\n```", (10, 20, 30), []),
    # thinking text is never read, even when it holds a JSON object with the keys
    ("<think>" + _answer(1, 1, 1) + "</think>" + _answer(90, 80, 70), (90, 80, 70), []),
    ('{"Visual Quality": 50, "instruction-following": "40", "attribute_preservation": 30}', (50, 40, 30),
     ["key_alias:visual_quality", "score_from_string:instruction_following", "key_alias:instruction_following"]),
    # out of range or not a number: no score, flagged; never clamped or guessed
    (_answer(105, -3, 50), (None, None, 50), ["score_out_of_range:visual_quality",
                                              "score_out_of_range:instruction_following"]),
    ('{"visual_quality": "73/100", "instruction_following": true, "attribute_preservation": null}',
     (None, None, None), ["score_invalid:visual_quality", "score_invalid:instruction_following",
                          "score_invalid:attribute_preservation"]),
    ('{"visual_quality": 60, "instruction_following": 50}', (60, 50, None),
     ["missing_score:attribute_preservation"]),
    # broken JSON: the key-anchored fallback, only with the quoted keys
    ('{"visual_quality": 61, "instruction_following": 52 "attribute_preservation": 43', (61, 52, 43),
     ["no_json_object", "score_from_fallback"]),
    ('"visual_quality": 61, "visual_quality": 62, "instruction_following": 1, "attribute_preservation": 2 }',
     (None, 1, 2), ["no_json_object", "fallback_ambiguous:visual_quality", "score_from_fallback"]),
    # numbers in prose are never scores
    ("Visual quality is 70, instruction following 60 and attribute preservation 50.", (None, None, None),
     ["no_json_object", "missing_score:visual_quality", "missing_score:instruction_following",
      "missing_score:attribute_preservation"]),
    ("I'm sorry, I can't rate this image.", (None, None, None), ["no_json_object"]),
    ("", (None, None, None), ["empty_answer"]),
])
def test_parse_mos_answer(text, scores, issues):
    answer = parse_mos_answer(text)
    assert tuple(answer.scores[d] for d in DIMS) == scores
    for code in issues:
        assert code in answer.issues
    assert answer.parse_ok == all(s is not None for s in scores)


def test_prompt_parts_label_images_as_miescore_does():
    a, b, out = (Image.new("RGB", (8, 8), c) for c in ("red", "green", "blue"))
    parts = judge_prompt_parts([a, b], out, "Put the cat on the sofa")
    assert parts[0].startswith(JUDGE_RUBRIC) and "0 (worst) to 100 (best)" in parts[0]
    assert parts[1:4] == ["Source image 1:", a, "\n"] and parts[4:7] == ["Source image 2:", b, "\n"]
    assert parts[7] == 'Editing instruction: "Put the cat on the sofa"\n\nEdited image:' and parts[8] is out
    assert parts[9].endswith(ANSWER_FORMAT)
    for dim in ("Visual quality:", "Instruction following:", "Attribute preservation:"):
        assert dim in JUDGE_RUBRIC


# ------------------------------------------------------------------------------------------------ CLI, scripted


def _edits(folder: Path, instructions) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, instruction in enumerate(instructions):
        src = folder / f"s{i}.png"
        out = folder / f"e{i}.png"
        Image.new("RGB", (40, 32), (10 * i % 255, 80, 120)).save(src)
        Image.new("RGB", (40, 32), (200, 10 * i % 255, 40)).save(out)
        lines.append(json.dumps({"id": f"edit-{i}", "sources": [src.name], "edited": out.name,
                                 "instruction": instruction}))
    path = folder / "edits.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _instruction(body) -> str:
    return json.loads(request_text(body).split("Editing instruction: ")[1].split("\n")[0])


def _scripted(body, repeat):
    instruction = _instruction(body)
    if instruction.startswith("GOOD"):
        k = int(instruction.split()[-1])
        return 200, chat_completion(_answer(40 + k, 50 + k, 60 + k), 900, 40), None, 0
    if instruction == "BADJSON":
        return 200, chat_completion('{"visual_quality": 70, "instruction_following": oops}', 900, 20), None, 0
    if instruction == "REFUSE":
        return 200, chat_completion("", refusal="I cannot evaluate this."), None, 0
    if instruction == "RATE":
        if repeat == 0:
            return 429, {"error": {"message": "rate limited"}}, {"Retry-After": "0.2"}, 0
        return 200, chat_completion(_answer(11, 22, 33), 900, 30), None, 0
    if instruction == "SLOW":
        return 200, chat_completion(_answer(1, 2, 3)), None, 2.0
    raise AssertionError(instruction)


def test_judge_cli_against_scripted_server(tmp_path, capsys):
    edits = _edits(tmp_path / "in", ["GOOD 1", "BADJSON", "REFUSE", "RATE", "SLOW", "GOOD 2"])
    output = tmp_path / "out" / "preds.jsonl"
    args = ["judge", "--backend", "openai", "--model", "vlm-x", "--input", str(edits), "--output", str(output),
            "--timeout", "0.5", "--max-retries", "1", "--concurrency", "3", "--no-progress",
            "--price", "vlm-x=1,2"]
    with RoutedChatServer(_scripted) as server:
        assert main([*args, "--base-url", server.url]) == 1  # one edit could not be judged
        first = len(server.requests)
    err = capsys.readouterr().err
    assert "edits.jsonl:line 5: could not be scored" in err and "ChatError[timeout]" in err
    records = {r["id"]: r for r in map(json.loads, output.read_text().splitlines())}
    assert set(records) == {"edit-0", "edit-1", "edit-2", "edit-3", "edit-5"}
    refused = records["edit-2"]  # a refusal is the model's answer: flagged, not asked again
    assert refused["failed"] and refused["issues"] == ["refusal"] and "cannot evaluate" in refused["raw"]
    assert all(refused[d] is None for d in DIMS)
    good = records["edit-0"]
    assert (good["visual_quality"], good["instruction_following"], good["attribute_preservation"]) == (41, 51, 61)
    assert good["overall"] == pytest.approx(overall_score(41, 51, 61)) and good["judge"] == "vlm-x"
    assert good["failed"] is False and good["issues"] == []
    assert records["edit-3"]["visual_quality"] == 11  # answered after the 429
    bad = records["edit-1"]
    assert bad["failed"] is True and bad["overall"] is None and bad["instruction_following"] is None
    assert "no_json_object" in bad["issues"] and bad["raw"].startswith('{"visual_quality": 70')
    # the benchmark reads the file; a flagged answer is "no prediction" (NaN)
    frame = read_score_predictions(output)
    assert frame.loc["edit-0", "overall"] == pytest.approx(overall_score(41, 51, 61))
    assert math.isnan(frame.loc["edit-1", "visual_quality"]) is False and math.isnan(frame.loc["edit-1", "overall"])
    usage = json.loads((tmp_path / "out" / "preds.jsonl.usage.jsonl").read_text().splitlines()[-1])
    totals = usage["usage"]["totals"]
    assert totals["failed_by_kind"] == {"refusal": 1, "timeout": 1} and totals["retries"] >= 2
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (4 * 900, 40 + 20 + 30 + 40)
    assert totals["cost_usd"] == pytest.approx(4 * 900 / 1000 * 1 + 130 / 1000 * 2)

    # rerun with a server that now answers everything fast: only the timed-out edit is asked again
    def healed(body, repeat):
        return 200, chat_completion(_answer(5, 6, 7), 900, 10), None, 0

    with RoutedChatServer(healed) as server:
        assert main([*args, "--base-url", server.url]) == 0
        asked = [_instruction(r["body"]) for r in server.requests]
    assert asked == ["SLOW"] and first == 8
    ids = [json.loads(line)["id"] for line in output.read_text().splitlines()]
    assert sorted(ids) == [f"edit-{i}" for i in range(6)]
    # another judge may not extend this file
    assert main(["judge", "--backend", "openai", "--model", "other", "--base-url", "http://127.0.0.1:9/v1",
                 "--input", str(edits), "--output", str(output), "--no-progress"]) == 2
    assert "holds predictions of judge 'vlm-x'" in capsys.readouterr().err


def test_judge_bad_arguments_exit_2(tmp_path, capsys):
    edits = _edits(tmp_path, ["GOOD 1"])
    assert main(["judge", "--backend", "openai", "--model", "m", "--input", str(edits),
                 "--output", str(tmp_path / "p.jsonl")]) == 2
    assert "--base-url" in capsys.readouterr().err
    assert main(["judge", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                 "--input", str(edits), "--output", str(tmp_path / "p.jsonl"), "--price", "m=cheap"]) == 2
    assert "MODEL=IN,OUT" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e0.png", "edits.jsonl", "s0.png"]  # no output, cache, log


def test_judge_kill_and_resume(tmp_path):
    """A run killed with SIGKILL mid-way: the rerun writes every id once and re-sends no answered request."""
    n = 12
    edits = _edits(tmp_path / "in", [f"GOOD {k}" for k in range(n)])
    output = tmp_path / "preds.jsonl"

    def slow_good(body, repeat):
        status, answer, headers, _ = _scripted(body, repeat)
        return status, answer, headers, 0.25

    with RoutedChatServer(slow_good) as server:
        args = ["judge", "--backend", "openai", "--model", "vlm-x", "--base-url", server.url, "--input", str(edits),
                "--output", str(output), "--concurrency", "2", "--no-progress"]
        cached, resent = kill_then_resume(server, args, output.with_name("preds.jsonl.cache.sqlite"), kill_after=5)
    assert 1 <= cached < n
    ids = [json.loads(line)["id"] for line in output.read_text().splitlines()]
    assert sorted(ids) == sorted(f"edit-{k}" for k in range(n))  # every id once
    assert resent == n - cached  # answers in the cache were not asked for again


def test_judge_dataset_split_and_local_transformers_model(tmp_path, tiny_qwen3vl_path):
    """--dataset with a MIE-Bench split, --backend transformers with the tiny random Qwen3-VL: every answer is
    garbage, so every prediction is a flagged failure with null scores (never a made-up number)."""
    from modeling_miescore.data.builders.mie_bench import build_mie_bench
    from modeling_miescore.testing.raw_benchmarks import make_raw_mie_bench

    make_raw_mie_bench(tmp_path / "raw", n_instances=5, n_models=2, seed=1, image_size=32)
    build_mie_bench(tmp_path / "raw", tmp_path / "ds", progress=False, split_method="hash")
    output = tmp_path / "tiny.jsonl"
    code = main(["judge", "--backend", "transformers", "--model", str(tiny_qwen3vl_path), "--dataset",
                 str(tmp_path / "ds"), "--split", "train", "--output", str(output), "--device", "cpu",
                 "--dtype", "float32", "--batch-size", "4", "--max-tokens", "6", "--max-pixels", "4096",
                 "--no-progress"])
    assert code == 0
    import datasets

    ids = datasets.load_dataset(str(tmp_path / "ds"), split="train")["id"]
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(ids)
    assert all(r["failed"] and r["overall"] is None and r["judge"] == Path(tiny_qwen3vl_path).name for r in records)
    assert all(r[d] is None for r in records for d in DIMS)


def test_judge_a_converted_benchmark_for_the_zero_shot_table(tmp_path):
    """Table 6 path: judge every edited image of a converted benchmark (pointwise and pairwise configs), then
    `miescore benchmark zero-shot` reads the predictions."""
    from modeling_miescore.data.converters import get_converter
    from modeling_miescore.testing import raw_benchmarks as rb

    rb.make_raw_editreward_bench(tmp_path / "raw")
    get_converter("editreward-bench")(tmp_path / "raw", tmp_path / "ds", progress=False).build()
    output = tmp_path / "preds.jsonl"

    def scores(body, repeat):  # a judge that likes brighter images: deterministic, different per image
        edited = request_images(body)[-1].convert("L")
        level = sum(edited.getdata()) / (edited.width * edited.height) / 255 * 100
        return 200, chat_completion(_answer(level, level, level)), None, 0

    with RoutedChatServer(scores) as server:
        assert main(["judge", "--backend", "openai", "--model", "vlm-x", "--base-url", server.url, "--dataset",
                     str(tmp_path / "ds"), "--output", str(output), "--no-progress"]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert records and all(not r["failed"] and 0 <= r["overall"] <= 100 for r in records)
    assert main(["benchmark", "zero-shot", "--dataset", str(tmp_path / "ds"), "--predictions", str(output),
                 "--out", str(tmp_path / "report"), "--row-name", "vlm-x"]) == 0
    assert "vlm-x" in (tmp_path / "report" / "report.md").read_text()


def test_python_api_judge_and_request_failures():
    from modeling_miescore.judges.call_engine import CallEngine
    from modeling_miescore.judges.chat_backends import OpenAIChatBackend
    from modeling_miescore.judges.mllm_judge import JudgeRequestError, MLLMJudge

    source, edited = Image.new("RGB", (32, 32), "red"), Image.new("RGB", (32, 32), "blue")
    with RoutedChatServer(_scripted) as server:
        engine = CallEngine(OpenAIChatBackend(server.url, "vlm-y", max_retries=0, timeout=0.5))
        judge = MLLMJudge(engine)
        (record,) = judge.judge([{"sources": [source], "edited": edited, "instruction": "GOOD 3"}])
        with pytest.raises(JudgeRequestError, match="timeout"):
            judge.judge([(source, edited, "SLOW")])
    assert (record["visual_quality"], record["judge"], record["failed"]) == (43.0, "vlm-y", False)
    assert record["overall"] == pytest.approx(overall_score(43, 53, 63)) and record["reasoning"] == "fine"
