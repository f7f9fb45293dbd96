"""The endpoint clients against a real vLLM (``-m engines``): SpatialRewardAPI and ``miescore spatialreward
--api-base``, ``miescore judge --backend openai``, the GEdit and ImgEdit judges, and vLLM's limits.

One server for the module: the random SpatialReward of ``tests/servable_checkpoints.py`` (the real Qwen vocabulary
and the paper's D.1 prompts, so requests have their real sizes), exported to the plain Qwen3-VL layout and started
by ``scripts/vllm_cpu.sh`` with at most 3 images per prompt. Its random texts are never judgements: each one must
come back flagged, with no score, and every request must have reached the model (HTTP 200)."""

from __future__ import annotations

import json

import pytest
from engine_servers import module_server, require_vllm

from modeling_miescore.cli import main
from modeling_miescore.judges.chat_client import ChatClient
from modeling_miescore.judges.spatialreward_api import CUT_ISSUE, SpatialRewardAPI

pytestmark = pytest.mark.engines
MAX_IMAGES = 3
MAX_MODEL_LEN = 1200  # room for every prompt here but the long one of test_a_prompt_longer_than_the_context


@pytest.fixture(scope="module")
def export():
    require_vllm()
    from servable_checkpoints import random_servable_spatialreward

    return random_servable_spatialreward()


@pytest.fixture(scope="module")
def server(export, tmp_path_factory):
    yield from module_server(export, "tiny", tmp_path_factory,
                             env={"MIESCORE_VLLM_MAX_IMAGES": str(MAX_IMAGES),
                                  "MIESCORE_VLLM_MAX_MODEL_LEN": str(MAX_MODEL_LEN)})


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Three example edits as files (2, 2 and 3 sources)."""
    from modeling_miescore.data.example_edits import example_edits, save_example_files

    return save_example_files(example_edits(max_side=160)[:3], tmp_path_factory.mktemp("edits"))


class RecordingClient(ChatClient):
    """A ChatClient that keeps every request's messages and the server's answer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def complete(self, messages, **kwargs):
        answer = super().complete(messages, **kwargs)
        self.calls.append((messages, answer))
        return answer


def _in_process_prompt_tokens(export, edit, config) -> dict:
    """Prompt tokens of the SC and PQ prompts as the in-process model builds them (its processor, its size)."""
    from modeling_miescore.hub.image_io import load_image
    from modeling_miescore.hub.modeling_spatialreward import pq_messages, sc_messages
    from modeling_miescore.hub.processing_miescore import image_size_kwargs, load_checkpoint_processor

    processor = load_checkpoint_processor(str(export))
    sources, edited = [load_image(p) for p in edit["sources"]], load_image(edit["edited"])
    counts = {}
    for stream, messages, images in (("sc", sc_messages(config, len(sources), edit["instruction"]), [*sources, edited]),
                                     ("pq", pq_messages(config), [edited])):
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        counts[stream] = processor(text=[text], images=images, return_tensors="pt",
                                   **image_size_kwargs(config))["input_ids"].shape[1]
    return counts


def test_spatialreward_api_reaches_the_model_with_the_in_process_prompts(server, export, records):
    edit = records[0]  # two sources: SC shows three images
    client = RecordingClient(server.url, server.name)
    api = SpatialRewardAPI(server.url, server.name, config=str(export), client=client)
    result, = api.evaluate_edits([edit])
    # every request reached the model; random text is flagged, never a score
    assert api.stats["requests"] == 2 and api.stats["failed_requests"] == 0
    assert result.failed and result.failure_reasons == ["sc:parse_failed", "pq:parse_failed"]
    assert result.reward == api.config.failure_reward and result.s_if is None and result.s_nat is None
    assert all(text.strip() for text in result.raw_sc + result.raw_pq)
    # vLLM built the same prompts as the in-process model: chat template, image order and image sizes
    expected = _in_process_prompt_tokens(export, edit, api.config)
    served = {("sc" if len(m[0]["content"]) > 2 else "pq"): a.prompt_tokens for m, a in client.calls}
    assert served == expected and expected["sc"] > expected["pq"] > 0
    # the random model never stops by itself: each answer was cut at max_new_tokens, flagged and counted
    assert all(a.completion_tokens == api.config.max_new_tokens and a.finish_reason == "length" for _, a in client.calls)
    assert api.stats[CUT_ISSUE] == 2 and CUT_ISSUE in result.issues["sc"] and CUT_ISSUE in result.issues["pq"]


def _spatialreward_cli(server, export, record, *extra, instruction=None, model=None):
    sources = sum((["--source", s] for s in record["sources"]), [])
    return main(["spatialreward", "--api-base", server.url, "--model", model or server.name, "--config", str(export),
                 *sources, "--edited", record["edited"], "--instruction", instruction or record["instruction"],
                 "--json", *extra])


def test_spatialreward_cli_against_vllm(server, export, records, capsys):
    assert _spatialreward_cli(server, export, records[0]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["failed"] and result["reward"] == 0.0 and result["backend"] == "openai"
    assert result["failure_reasons"] == ["sc:parse_failed", "pq:parse_failed"] and result["raw_sc"][0]
    assert "could not be used" in captured.err and "Traceback" not in captured.err


def test_a_model_name_the_server_does_not_serve_is_one_line(server, export, records, capsys):
    assert _spatialreward_cli(server, export, records[0], model="spatialreward-8b") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HTTP 404" in err and "does not exist" in err and "tiny" in err
    assert "/v1/models lists the names it serves" in err


def test_more_images_than_the_servers_limit(server, export, records, capsys):
    assert len(records[2]["sources"]) + 1 > MAX_IMAGES  # three sources and the edited image
    assert _spatialreward_cli(server, export, records[2]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["failure_reasons"] == ["sc:api_error:http", "pq:parse_failed"] and result["s_if"] is None
    assert f"At most {MAX_IMAGES} image(s) may be provided in one prompt" in captured.err
    assert "--limit-mm-per-prompt" in captured.err and "Traceback" not in captured.err


def test_a_prompt_longer_than_the_context(server, export, records, capsys):
    long_instruction = "put the cat on the table " * 160  # 4,000 characters (our limit: 4,096), ~1,000 tokens
    assert _spatialreward_cli(server, export, records[0], instruction=long_instruction) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["failure_reasons"] == ["sc:api_error:http", "pq:parse_failed"] and result["s_con"] is None
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in captured.err and "--max-model-len" in captured.err
    api = SpatialRewardAPI(server.url, server.name, config=str(export), max_new_tokens=2 * MAX_MODEL_LEN)
    result, = api.evaluate_edits([records[0]])  # an answer budget over the context: refused, explained
    assert api.refusal() and "cannot be greater than max_model_len" in api.refusal() and result.failed


def test_judge_backend_openai_against_vllm(server, records, tmp_path, capsys):
    edits = tmp_path / "edits.jsonl"
    edits.write_text("".join(json.dumps({"id": f"e{i}", **r}) + "\n" for i, r in enumerate([records[0], records[1]])))
    output = tmp_path / "preds.jsonl"
    code = main(["judge", "--backend", "openai", "--base-url", server.url, "--model", server.name, "--input",
                 str(edits), "--output", str(output), "--max-tokens", "24", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    predictions = [json.loads(line) for line in output.read_text().splitlines()]
    assert [p["id"] for p in predictions] == ["e0", "e1"]
    for prediction in predictions:  # random text: flagged, no invented score
        assert prediction["failed"] and prediction["overall"] is None and prediction["visual_quality"] is None
    usage = json.loads(output.with_name(output.name + ".usage.jsonl").read_text().splitlines()[-1])["usage"]["totals"]
    assert usage["sent"] == 2 and usage["ok"] == 2 and usage["prompt_tokens"] > 500  # real prompts, real tokens


@pytest.mark.parametrize("bench_name", ["gedit", "imgedit"])
def test_editor_benchmark_judges_against_vllm(bench_name, server, tmp_path, capsys):
    from editor_bench_helpers import converted, edit_image

    gedit = bench_name == "gedit"
    dataset, truth = converted("gedit-bench" if gedit else "imgedit-bench", tmp_path,
                               **({"tasks": {"subject-add": 2}, "languages": ("en",)} if gedit else {"per_type": 1}))
    edits = tmp_path / "outputs"
    for code, row in enumerate(truth):
        edit_image(edits / "fullset" / row["task_type"] / "en" / f"{row['key']}.png" if gedit
                   else edits / f"{row['key']}.png", code)
    out = tmp_path / "report"
    code = main(["benchmark", bench_name, "--dataset", str(dataset), "--edits", str(edits), "--out", str(out),
                 "--backend", "openai", "--base-url", server.url, "--model", server.name, "--max-tokens", "24",
                 "--no-progress", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    report = json.loads((out / "report.json").read_text())
    counts = report["counts"]
    # every edit was sent and answered (no request failed: nothing left unjudged), and every random answer was
    # flagged: no row gets a score
    assert (counts["edits"], counts["missing_edits"], counts["not_judged"]) == (len(truth), 0, 0)
    assert counts["flagged"] == len(truth) and counts["judged"] == 0 and report["per_row"] == []
