"""Serving SpatialReward with vLLM, the parts that need no engine (fast, default suite): ``miescore export-vllm``,
the torchvision guard and the refusals of ``scripts/vllm_cpu.sh``, and how the OpenAI-compatible client handles
what a real vLLM answers (refusals with their messages, answers cut at ``max_tokens``, images sized as the
processor sizes them), against scripted servers. The same paths against a real vLLM: ``tests/test_engines_*.py``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from local_http import RoutedChatServer, chat_completion, request_images
from PIL import Image

from modeling_miescore.cli import main
from modeling_miescore.judges.spatialreward_api import CUT_ISSUE, SpatialRewardAPI, processor_sized_image

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "vllm_cpu.sh"
SC_OK = ('{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [100, 100, 600, 900]}], "reasoning": '
         '"<|bbox_0|> The cat is there. <|global|> Fine.", "score": [20, 15]}')
PQ_OK = '{"reasoning": "natural", "score": [22, 18]}'
# vLLM 0.32's refusals, as measured against `python -m vllm.entrypoints.openai.api_server`
IMAGE_LIMIT = {"error": {"message": "At most 2 image(s) may be provided in one prompt. (parameter=image)",
                         "type": "BadRequestError", "param": "image", "code": 400}}
UNKNOWN_MODEL = {"error": {"message": "The model `spatialreward-8b` does not exist. Valid aliases: spatialreward.",
                           "type": "NotFoundError", "param": "model", "code": 404}}


def _is_sc(body) -> bool:
    return len(request_images(body)) > 1


# ------------------------------------------------------------------------------------------------ the export


@pytest.fixture(scope="module")
def exported(tiny_spatialreward_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "plain"
    assert main(["export-vllm", str(tiny_spatialreward_path), str(out)]) == 0
    return out


def test_export_is_a_plain_qwen3vl_checkpoint_with_the_reward_settings(tiny_spatialreward_path, exported):
    source = json.loads((tiny_spatialreward_path / "config.json").read_text())
    config = json.loads((exported / "config.json").read_text())
    assert source["model_type"] == "spatialreward" and "auto_map" in source
    assert config["model_type"] == "qwen3_vl" and config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert "auto_map" not in config and "custom_pipelines" not in config
    assert {k: config[k] for k in ("sc_prompt", "max_new_tokens", "min_pixels", "max_pixels")} == \
        {k: source[k] for k in ("sc_prompt", "max_new_tokens", "min_pixels", "max_pixels")}
    assert not list(exported.glob("*.py"))  # nothing in the export runs code
    assert (exported / "model.safetensors").read_bytes() == (tiny_spatialreward_path / "model.safetensors").read_bytes()
    processor = json.loads((exported / "processor_config.json").read_text())["image_processor"]
    assert processor["size"] == {"shortest_edge": source["min_pixels"], "longest_edge": source["max_pixels"]}
    generation = json.loads((exported / "generation_config.json").read_text())
    tokenizer = json.loads((exported / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    assert generation["eos_token_id"] == [ids["<|im_end|>"], ids["<|endoftext|>"]]
    assert not {"temperature", "top_k", "top_p"} & set(generation)  # no sampling defaults for vLLM to apply


def test_export_judges_as_the_source_checkpoint(tiny_spatialreward_path, exported, examples):
    from modeling_miescore.judges.spatialreward_api import spatialreward_settings
    from modeling_miescore.scoring.loading import load_spatialreward

    edits = [{"sources": e["sources"], "edited": e["edited"], "instruction": e["instruction"]} for e in examples[:2]]
    texts = [[(r.raw_sc, r.raw_pq) for r in load_spatialreward(str(path), device="cpu", dtype="float32")
              .evaluate_edits(edits)] for path in (tiny_spatialreward_path, exported)]
    assert texts[0] == texts[1] and texts[0][0] != texts[0][1]  # the same generations, which depend on the edit
    settings = spatialreward_settings(exported)  # what --config / SpatialRewardAPI(config=) read back
    assert (settings.max_new_tokens, settings.min_pixels, settings.max_pixels) == (8, 16_384, 65_536)


def test_miescore_export_is_the_plugins_layout(tiny_miescore_path, tmp_path):
    from safetensors import safe_open

    out = tmp_path / "miescore-vllm"
    assert main(["export-vllm", str(tiny_miescore_path), str(out)]) == 0
    source = json.loads((tiny_miescore_path / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl" and config["architectures"] == ["MIEScoreForImageScoring"]
    assert (config["num_labels"], config["head_hidden_size"]) == (3, source["head_hidden_size"])
    assert config["text_config"] == source["backbone_config"]["text_config"]
    assert json.loads((out / "miescore_config.json").read_text()) == source  # the client's settings
    with safe_open(str(tiny_miescore_path / "model.safetensors"), "pt") as before, \
            safe_open(str(out / "model.safetensors"), "pt") as after:
        renamed = {("model." + k[len("backbone."):]) if k.startswith("backbone.") else "score." + k[len("head."):]: k
                   for k in before.keys()}
        assert sorted(after.keys()) == sorted(renamed)
        assert all((after.get_tensor(new) == before.get_tensor(old)).all() for new, old in renamed.items())
    assert not list(out.glob("*.py")) and not (out / "generation_config.json").exists()


@pytest.mark.parametrize("case", ["lm_digits", "adapter", "exists", "plain", "missing"])
def test_export_refusals_are_one_line(case, tiny_checkpoints, tiny_qwen3vl_path, tiny_spatialreward_path, exported,
                                      tmp_path, capsys):
    checkpoint, out = str(tiny_spatialreward_path), tmp_path / "out"
    if case == "lm_digits":
        checkpoint = str(tiny_checkpoints("miescore", "qwen3_vl", score_head="lm_digits"))
    elif case == "adapter":
        (tmp_path / "adapter").mkdir()
        (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
        checkpoint = str(tmp_path / "adapter")
    elif case == "exists":
        out = exported
    elif case == "plain":
        checkpoint = str(tiny_qwen3vl_path)
    else:
        checkpoint = str(tmp_path / "nowhere")
    capsys.readouterr()  # what building a fixture printed
    assert main(["export-vllm", checkpoint, str(out)]) == 2
    err = capsys.readouterr().err.strip()
    expected = {"lm_digits": "digit logits", "adapter": "merged", "exists": "exists already",
                "plain": "serves it as it is", "missing": "does not exist"}[case]
    assert len(err.splitlines()) == 1 and expected in err and "Traceback" not in err
    assert not out.exists() or case == "exists"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no half-written staging folder


# ------------------------------------------------------------------------------------- the provisioning script


def test_torchvision_guard_on_this_torchvision_file(tmp_path):
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import torchvision_cpu_guard as guard
    finally:
        sys.path.remove(str(REPO / "scripts"))
    text = (Path(importlib.util.find_spec("torchvision").submodule_search_locations[0])
            / "_meta_registrations.py").read_text()
    fixed = guard.guarded_source(text)
    assert text.count(guard.UNGUARDED) == 2 and guard.UNGUARDED not in fixed  # nms and qnms
    assert fixed.count(guard.GUARDED) == 2 and guard.guarded_source(fixed) == fixed  # idempotent
    compile(fixed, "_meta_registrations.py", "exec")
    folder = tmp_path / "torchvision"
    folder.mkdir()
    (folder / "_meta_registrations.py").write_text(text)
    assert guard.main([str(folder)]) == 0 and (folder / "_meta_registrations.py").read_text() == fixed
    (folder / "_meta_registrations.py").write_text("import torch\n")
    assert guard.main([str(folder)]) == 2  # another layout: left alone, one line


def _script(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_script_refuses_what_vllm_cannot_serve(tiny_spatialreward_path, tmp_path):
    import os

    env = {**os.environ, "MIESCORE_VLLM_VENV": str(tmp_path / "no-venv"), "MIESCORE_VLLM_RUNS": str(tmp_path)}
    done = _script("start", str(tiny_spatialreward_path), "--port", "18999", env=env)
    assert done.returncode == 2 and "miescore export-vllm" in done.stderr and len(done.stderr.splitlines()) == 1
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{")
    done = _script("start", str(tmp_path / "broken"), env=env)
    assert done.returncode == 2 and "cannot be read" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text('{"model_type": "qwen3_vl"}')
    done = _script("start", str(tmp_path / "plain"), env=env)
    assert done.returncode == 2 and "scripts/vllm_cpu.sh provision" in done.stderr  # no venv: says how to make one
    for args, words in ((("frob",), "unknown command"), (("start", str(tmp_path / "plain"), "--port", "x"), "--port"),
                        (("check",), "provision")):
        done = _script(*args, env=env)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.splitlines()) == 1
    assert _script("stop", "--port", "18999", env=env).returncode == 0  # nothing recorded there: nothing to stop


# --------------------------------------------------------------------------------- the client, scripted servers


def test_images_are_sent_as_the_processor_resizes_them(tiny_spatialreward_path):
    from modeling_miescore.hub.processing_miescore import load_checkpoint_processor

    processor = load_checkpoint_processor(str(tiny_spatialreward_path)).image_processor
    size = {"shortest_edge": 16_384, "longest_edge": 65_536}
    for image in (Image.effect_mandelbrot((150, 90), (-2, -1.2, 1, 1.2), 60).convert("RGB"),  # upscaled
                  Image.radial_gradient("L").convert("RGB").resize((700, 300))):  # downscaled
        sized = processor_sized_image(image, 16_384, 65_536)
        assert sized.size != image.size and processor_sized_image(sized, 16_384, 65_536) is sized  # a fixed point
        direct = processor(images=[image], size=size, return_tensors="pt")
        resent = processor(images=[sized], size=size, return_tensors="pt")  # what a server computes from it
        assert direct["image_grid_thw"].tolist() == resent["image_grid_thw"].tolist()
        assert (direct["pixel_values"] == resent["pixel_values"]).all()  # the same pixels, bit for bit
    # min == max: 96x64 goes up to 160x128 (sides rounded up, 20,480 px), which the processor would shrink again
    # to 128x96: such an image is sent as it is, for the server to resize once, like the in-process model
    small = Image.effect_mandelbrot((96, 64), (-2, -1.2, 1, 1.2), 60).convert("RGB")
    assert processor_sized_image(small, 16_384, 16_384) is small
    assert processor(images=[small], size={"shortest_edge": 16_384, "longest_edge": 16_384},
                     return_tensors="pt")["image_grid_thw"].tolist() == [[1, 8, 10]]


def _edit(examples, sources=2, instruction=None):
    example = examples[0]
    return {"sources": example["sources"][:sources], "edited": example["edited"],
            "instruction": instruction or example["instruction"]}


def test_refusals_are_flagged_counted_and_explained(examples):
    def answer(body, repeat):
        if _is_sc(body) and len(request_images(body)) > 2:
            return 400, IMAGE_LIMIT, None, 0
        return 200, chat_completion(SC_OK if _is_sc(body) else PQ_OK), None, 0

    with RoutedChatServer(answer) as server:
        api = SpatialRewardAPI(server.url, "spatialreward", max_retries=1, timeout=10)
        two, one = api.evaluate_edits([_edit(examples, 2), _edit(examples, 1)])
    assert two.failed and two.failure_reasons == ["sc:api_error:http"] and two.reward == api.config.failure_reward
    assert two.s_if is None and two.pq_parse_ok  # no invented score; the PQ answer is kept
    assert not one.failed and one.s_if == 20.0  # one source: two images, under the limit
    message = api.stats["error_messages"]["http"]
    assert "HTTP 400: At most 2 image(s)" in message and "--limit-mm-per-prompt" in message
    assert "BadRequestError" not in message  # the server's message, not its raw JSON body
    assert api.stats["errors_by_status"] == {400: 1} and len(server.requests) == 4  # a 400 is not retried
    assert api.refusal() is None  # other requests were answered: not a configuration error


def test_unknown_model_is_one_line_from_the_cli_and_stops_an_rl_reward(examples, tmp_path, capsys):
    from modeling_miescore.data.example_edits import save_example_files
    from modeling_miescore.rewards.backends import build_spatialreward_api_reward
    from modeling_miescore.rewards.groups import EditGroup, RewardUnavailableError

    record = save_example_files(examples[:1], tmp_path)[0]
    with RoutedChatServer(lambda body, repeat: (404, UNKNOWN_MODEL, None, 0)) as server:
        code = main(["spatialreward", "--api-base", server.url, "--model", "spatialreward-8b", "--edited",
                     record["edited"], "--instruction", "add a cat", *sum((["--source", s] for s in record["sources"]),
                                                                          [])])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
        assert "does not exist" in err and "/v1/models lists the names it serves" in err
        reward = build_spatialreward_api_reward(f"spatialreward-8b@{server.url}", max_retries=0)
        group = EditGroup(key="k", sources=tuple(examples[0]["sources"]), instruction="add a cat",
                          edits=(examples[0]["edited"],) * 2)
        with pytest.raises(RewardUnavailableError, match="does not exist"):
            reward.score_groups([group])


def test_an_answer_cut_at_max_tokens_is_flagged_and_never_scored(examples):
    cut_sc = SC_OK[: SC_OK.index('"score"') + 12]  # the budget ran out inside the score list
    def answer(body, repeat):
        return 200, chat_completion(cut_sc if _is_sc(body) else PQ_OK,
                                    finish_reason="length" if _is_sc(body) else "stop"), None, 0

    with RoutedChatServer(answer) as server:
        api = SpatialRewardAPI(server.url, "spatialreward", max_new_tokens=40)
        result, = api.evaluate_edits([_edit(examples)])
    assert result.failed and result.failure_reasons == ["sc:parse_failed"] and result.s_con is None
    assert CUT_ISSUE in result.issues["sc"] and CUT_ISSUE not in result.issues["pq"]
    assert api.stats[CUT_ISSUE] == 1 and api.stats["failed_requests"] == 0  # answered, flagged, counted


def test_config_from_a_checkpoint_sets_prompts_sizes_and_budget(exported, examples):
    seen = []

    def answer(body, repeat):
        seen.append((body["max_tokens"], [im.size for im in request_images(body)]))
        return 200, chat_completion(SC_OK if _is_sc(body) else PQ_OK), None, 0

    with RoutedChatServer(answer) as server:
        api = SpatialRewardAPI(server.url, "spatialreward", config=str(exported))
        api.evaluate_edits([_edit(examples, 1)])
    tokens, sizes = zip(*seen)
    assert set(tokens) == {8}  # the checkpoint's max_new_tokens, not the paper's 512
    assert all(16_384 <= w * h <= 65_536 and w % 32 == 0 and h % 32 == 0 for s in sizes for w, h in s)
    with pytest.raises(Exception, match="no config.json"):
        SpatialRewardAPI("http://127.0.0.1:9/v1", "m", config=str(exported / "nowhere"))
