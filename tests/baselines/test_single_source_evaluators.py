"""``miescore baselines --evaluator``: Table 3's single-source evaluators (✩ rows) run on each source of a
multi-source edit and averaged (MIEScore paper, Implementation Details), written as the same predictions files; and
the EditScore adapter through the ``editscore`` package, against a scripted OpenAI-compatible server and (slow) a
tiny random Qwen2.5-VL checkpoint."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from PIL import Image

from local_http import RoutedChatServer, chat_completion, request_images, request_text
from modeling_miescore.cli.main import main
from modeling_miescore.data.schema import TASKS
import toy_evaluators
from tiny_mie_raw import tiny_mie_raw


@pytest.fixture(scope="module")
def mie_dir(tmp_path_factory):
    from modeling_miescore.data.builders.mie_bench import build_mie_bench

    base = tmp_path_factory.mktemp("mie")
    tiny_mie_raw(base / "raw", {TASKS[0]: 5, TASKS[1]: 5})
    build_mie_bench(base / "raw", base / "ds", progress=False)
    return base / "ds"


def _test_split(mie_dir):
    import datasets

    return datasets.load_dataset(str(mie_dir), split="test")


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_evaluator_runs_on_each_source_and_averages(mie_dir, tmp_path, capsys):
    out = tmp_path / "closeness.jsonl"
    assert main(["baselines", "--dataset", str(mie_dir), "--evaluator",
                 "toy_evaluators:closeness", "--out", str(out), "--no-progress"]) == 0
    ds = _test_split(mie_dir)
    lines = {line["id"]: line for line in _lines(out)}
    assert sorted(lines) == sorted(str(i) for i in ds["id"]) and len(lines) == 4
    for row in ds:
        per_source = [toy_evaluators.closeness(s.convert("RGB"), row["edited_image"].convert("RGB"), row["instruction"])
                      for s in row["source_images"]]
        line = lines[str(row["id"])]
        assert line["metric"] == "closeness" and "overall" not in line  # only the keys the evaluator gave
        for key in ("attribute_preservation", "visual_quality", "instruction_following"):
            assert line[key] == pytest.approx(np.mean([s[key] for s in per_source]))
        assert per_source[0]["attribute_preservation"] != per_source[1]["attribute_preservation"]  # a real average
    # the benchmark reads the file as it reads score-batch predictions (overall from eq. 2)
    from modeling_miescore.evaluation.prediction_files import read_score_predictions

    assert read_score_predictions(out).attrs["overall_computed"] is True
    # rerun: every id is there, nothing recomputed
    assert main(["baselines", "--dataset", str(mie_dir), "--evaluator",
                 "toy_evaluators:closeness", "--out", str(out), "--no-progress"]) == 0
    assert "wrote 0 edits, skipped 4 already" in capsys.readouterr().err


def test_evaluator_factory_options_and_failed_edits(mie_dir, tmp_path, capsys):
    out = tmp_path / "scaled.jsonl"
    assert main(["baselines", "--dataset", str(mie_dir), "--evaluator",
                 "toy_evaluators:scaled",
                 "--evaluator-option", "factor=2", "--evaluator-name", "twice", "--out", str(out),
                 "--no-progress"]) == 0
    ds = _test_split(mie_dir)
    row = ds[0]
    expected = np.mean([toy_evaluators.scaled(2.0)(s, row["edited_image"], "") for s in row["source_images"]])
    first = {line["id"]: line for line in _lines(out)}[str(row["id"])]
    assert first["metric"] == "twice"
    assert [first[k] for k in ("visual_quality", "instruction_following", "attribute_preservation", "overall")] == \
        pytest.approx([expected] * 4)
    failing_word = ds[1]["instruction"].split()[-1]  # the instructions end in "(<k>)."
    failed = tmp_path / "failed.jsonl"
    code = main(["baselines", "--dataset", str(mie_dir), "--evaluator",
                 "toy_evaluators:failing_on", "--evaluator-option",
                 f"word={json.dumps(failing_word)}", "--out", str(failed), "--no-progress"])
    err = capsys.readouterr().err
    failing = {str(r["id"]) for r in ds if r["instruction"] == ds[1]["instruction"]}  # the instance's edits
    assert code == 1 and all(f"skipped edit '{i}', failing_on: RuntimeError" in err for i in failing)
    assert {line["id"] for line in _lines(failed)} == {str(i) for i in ds["id"]} - failing and len(failing) == 2


@pytest.mark.parametrize("argv, message", [
    (["--metrics", "editscore"], "is not a --metrics metric: it runs via --evaluator"),
    (["--evaluator", "no.such.module:f"], "cannot import module 'no.such.module'"),
    (["--evaluator", "toy_evaluators:nope"], "has no callable 'nope'"),
    (["--evaluator", "toy_evaluators:closeness", "--evaluator-option", "x"],
     "is not KEY=VALUE"),
    (["--metrics", "ssim", "--evaluator", "toy_evaluators:closeness"], "not both"),
])
def test_evaluator_usage_errors_exit_2(mie_dir, tmp_path, capsys, argv, message):
    code = main(["baselines", "--dataset", str(mie_dir), "--out", str(tmp_path / "p.jsonl"), *argv])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "p.jsonl").exists()


def _editscore_server(sc_answer: str, pq_answer: str):
    def answer(body, repeat):
        text = request_text(body)
        reply = sc_answer if "Editing instruction:" in text else pq_answer
        return 200, chat_completion(reply), None, 0

    return RoutedChatServer(answer)


def test_editscore_adapter_through_the_package_on_an_endpoint(tmp_path):
    pytest.importorskip("editscore")
    from modeling_miescore.baselines.editscore_adapter import EditScoreAnswerError, editscore

    source, edited = Image.new("RGB", (40, 32), (200, 40, 40)), Image.new("RGB", (40, 32), (40, 40, 200))
    sc = '{"reasoning": "the cup is red now", "score": [20, 15]}'
    pq = '{"reasoning": "natural", "score": [18, 22]}'
    with _editscore_server(sc, pq) as server:
        evaluate = editscore(base_url=server.url, model="editscore-7b")
        assert "editscore" not in sys.path  # the package's import puts this relative path first; it is taken out
        scores = evaluate(source, edited, "make the cup red")
        # EditScore's own arithmetic on its 0-25 answers, rescaled to 0-10 (score_range 25): SC = [20, 15] / 2.5,
        # PQ = min(18, 22) / 2.5, overall = sqrt(min(SC) * PQ)
        assert scores == pytest.approx({"instruction_following": 8.0, "attribute_preservation": 6.0,
                                        "visual_quality": 7.2, "overall": (6.0 * 7.2) ** 0.5})
        sc_request, pq_request = (r["body"] for r in server.requests[:2])
        assert "Editing instruction: make the cup red" in request_text(sc_request)
        assert [im.size for im in request_images(sc_request)] == [(40, 32), (40, 32)]  # source, then edited
        assert len(request_images(pq_request)) == 1 and "naturalness" in request_text(pq_request)
    with _editscore_server("I cannot say.", pq) as server:
        evaluate = editscore(base_url=server.url, model="editscore-7b")
        with pytest.raises(EditScoreAnswerError, match="could not parse the model's SC answer"):
            evaluate(source, edited, "make the cup red")  # the package would have drawn a random score
        assert len(server.requests) == 6  # EditScore's own retries: three tries of both prompts, then it gives up


@pytest.mark.slow
def test_editscore_adapter_runs_a_tiny_random_qwen25vl(tmp_path, mie_dir, capsys):
    """The local path: the tiny random Qwen2.5-VL through editscore.EditScore on CPU (the package's own local
    backends need CUDA). Random weights answer no score, so every edit is reported and none is written."""
    pytest.importorskip("editscore")
    from modeling_miescore.baselines.editscore_adapter import LocalVLM
    from modeling_miescore.testing.tiny_backbones import build_tiny_qwen25vl

    path = build_tiny_qwen25vl(tmp_path / "qwen25vl")
    vlm = LocalVLM(str(path), device="cpu", dtype="float32", max_new_tokens=4)
    inputs = vlm.prepare_input([Image.new("RGB", (56, 56)), Image.new("RGB", (56, 56))], "rate it")
    assert int((inputs["input_ids"] == vlm.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum()) > 0
    assert inputs["pixel_values"].device.type == "cpu" and isinstance(vlm.inference(inputs, seed=0), str)
    out = tmp_path / "editscore.jsonl"
    code = main(["baselines", "--dataset", str(mie_dir), "--evaluator",
                 "modeling_miescore.baselines.editscore_adapter:editscore", "--evaluator-option",
                 f"model_name_or_path={json.dumps(str(path))}", "--evaluator-option", "device=cpu",
                 "--evaluator-option", "dtype=float32", "--evaluator-option", "max_new_tokens=4",
                 "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("EditScoreAnswerError: EditScore could not parse") == 4
    assert not out.read_text().strip()  # no random substitute was written
