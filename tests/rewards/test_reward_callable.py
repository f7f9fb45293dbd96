"""The RL reward callable (batched, failures counted, never raising) and the OpenAI-compatible backend against
a real HTTP server on 127.0.0.1 (canned answers, HTTP 500, malformed body, timeout)."""

import base64
import io
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from modeling_miescore.hub.spatialreward_aggregation import spatial_reward
from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
from modeling_miescore.judges.spatialreward_api import SpatialRewardAPI
from modeling_miescore.rewards.callables import SpatialRewardFunction

SC_OK = ('{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [100, 100, 600, 900]}], '
         '"reasoning": "<|bbox_0|> The cat was added. <|global|> The rest is unchanged.", "score": [20, 15]}')
PQ_OK = '{"reasoning": "Natural.", "score": [22, 18]}'
EXPECTED = spatial_reward(20, 15, 22, 18)


@pytest.fixture(scope="module")
def model(tiny_qwen3vl_path):
    # generation is replaced in these tests, so the plain tiny checkpoint is enough
    return SpatialRewardModel.from_pretrained(tiny_qwen3vl_path).eval()


def _garbage_for(instruction_marker):
    """`_generate_texts` stand-in: valid JSON, except SC garbage for prompts whose instruction has the marker."""

    def fake(prompts, processor):
        out = []
        for images, messages in prompts:
            text = messages[0]["content"][-1]["text"]
            if "Editing instruction:" in text:
                out.append(["<think>hmm" if instruction_marker in text else SC_OK])
            else:
                out.append([PQ_OK])
        return out

    return fake


def test_reward_callable_counts_forced_failures(model, examples, monkeypatch):
    monkeypatch.setattr(model, "_generate_texts", _garbage_for("BREAK"))
    fn = SpatialRewardFunction(model, batch_size=2)
    images = [e["edited"] for e in examples[:4]]
    sources = [e["sources"] for e in examples[:4]]
    instructions = [e["instruction"] for e in examples[:4]]
    instructions[2] = "BREAK " + instructions[2]
    rewards, details = fn(images, instructions, sources)
    assert len(rewards) == 4 and all(isinstance(r, float) for r in rewards)
    assert rewards[2] == 0.0 and all(r == pytest.approx(EXPECTED) for i, r in enumerate(rewards) if i != 2)
    assert details["n"] == 4 and details["n_failed"] == 1 and details["failure_rate"] == 0.25
    assert details["failure_reasons"] == {"sc:parse_failed": 1}
    assert details["issues"]["sc:unclosed_think_block"] == 1
    assert details["results"][2].failed and details["results"][2].raw_sc == ["<think>hmm"]
    assert details["mean_reward"] == pytest.approx(EXPECTED)
    # the statistics accumulate over calls
    fn(images[:1], instructions[2:3], sources[:1])
    assert fn.totals["n"] == 5 and fn.totals["n_failed"] == 2


def test_reward_callable_flags_unusable_samples_instead_of_raising(model, examples, monkeypatch, tmp_path):
    monkeypatch.setattr(model, "_generate_texts", _garbage_for("never"))
    fn = SpatialRewardFunction(model, batch_size=8, failure_reward=-1.0)
    example = examples[0]
    rewards, details = fn([example["edited"], str(tmp_path / "missing.png"), example["edited"]],
                          [example["instruction"], example["instruction"], "  "],
                          [example["sources"], example["sources"], example["sources"]])
    assert rewards[0] == pytest.approx(EXPECTED) and rewards[1:] == [-1.0, -1.0]
    assert details["n_failed"] == 2 and details["failure_reasons"] == {"input_error": 2}
    assert "does not exist" in details["input_errors"][1] and "empty instruction" in details["input_errors"][2]
    with pytest.raises(ValueError, match="same length"):
        fn([example["edited"]], [], [])


def test_trl_adapter_reads_columns_and_logs(model, examples, monkeypatch):
    monkeypatch.setattr(model, "_generate_texts", _garbage_for("BREAK"))
    reward_func = SpatialRewardFunction(model).as_trl_reward_func()
    metrics, extra = {}, {}
    rewards = reward_func(
        prompts=["p1", "p2"], completions=["c1", "c2"], completion_ids=[[1], [2]],
        edited_image=[examples[0]["edited"], examples[1]["edited"]],
        source_images=[examples[0]["sources"], examples[1]["sources"]],
        instruction=[examples[0]["instruction"], "BREAK it"],
        trainer_state=None, log_metric=metrics.__setitem__, log_extra=extra.__setitem__)
    assert rewards[0] == pytest.approx(EXPECTED) and rewards[1] == 0.0
    assert metrics == {"spatialreward/failed_fraction": 0.5} and extra == {"spatialreward_failed": [False, True]}
    assert reward_func.__name__ == "spatialreward"


# ----------------------------------------------------------------------------------------------- API backend


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        state = self.server.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][0]["content"]
        text = content[-1]["text"]
        images = []
        for part in content[:-1]:
            url = part["image_url"]["url"]
            assert url.startswith("data:image/png;base64,")
            images.append(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size)
        is_sc = "Editing instruction:" in text
        with state["lock"]:
            state["requests"].append({"sc": is_sc, "images": images, "path": self.path, "text": text,
                                      "temperature": body["temperature"], "max_tokens": body["max_tokens"]})
        if is_sc and "STATUS500" in text:
            return self._send(500, b'{"error": "boom"}')
        if is_sc and "MALFORMED" in text:
            return self._send(200, b"this is not json {")
        if is_sc and "SLOW" in text:
            time.sleep(4.0)  # well past the client's timeout
        answer = PQ_OK if not is_sc else ("no JSON at all" if "GARBAGE" in text else SC_OK)
        payload = {"id": "x", "object": "chat.completion",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": answer + "<|im_end|>"}}]}
        self._send(200, json.dumps(payload).encode())

    def _send(self, status, data):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.state = {"lock": threading.Lock(), "requests": []}
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_api_backend_against_a_local_server(server, examples, monkeypatch):
    import modeling_miescore.judges.spatialreward_api as backend

    encoded = []
    to_url = backend.image_to_data_url
    monkeypatch.setattr(backend, "image_to_data_url", lambda image, **kw: encoded.append(image) or to_url(image, **kw))
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    api = SpatialRewardAPI(base_url, "spatialreward-test", api_key_env="MIESCORE_TEST_NO_KEY", timeout=2.0,
                           max_retries=0, max_new_tokens=300)
    example = examples[0]
    marks = ["", "STATUS500 ", "MALFORMED ", "SLOW ", "GARBAGE "]
    samples = [{"sources": example["sources"], "edited": example["edited"], "instruction": m + example["instruction"]}
               for m in marks]
    started = time.perf_counter()
    results = api.evaluate_edits(samples, batch_size=5)
    elapsed = time.perf_counter() - started
    assert elapsed < 12  # the timeout (2 s, room for a loaded machine) bounds the 4-s request
    ok, http, malformed, slow, garbage = results
    assert not ok.failed and ok.reward == pytest.approx(EXPECTED) and ok.backend == "openai"
    assert ok.regions[0]["bbox_pixels"] == [round(0.1 * example["edited"].width), round(0.1 * example["edited"].height),
                                            round(0.6 * example["edited"].width), round(0.9 * example["edited"].height)]
    assert ok.raw_sc == [SC_OK]  # the chat-control token was stripped
    assert http.failed and http.failure_reasons == ["sc:api_error:http"] and http.reward == 0.0
    assert malformed.failure_reasons == ["sc:api_error:bad_response"]
    assert slow.failure_reasons == ["sc:api_error:timeout"] and "api_error:timeout" in slow.issues["sc"]
    assert garbage.failure_reasons == ["sc:parse_failed"] and garbage.s_nat == 22.0
    for result in results[1:]:
        assert result.pq_parse_ok and math.isfinite(result.reward)
    assert api.stats["requests"] == 10 and api.stats["failed_requests"] == 3
    assert api.stats["errors_by_kind"] == {"http": 1, "bad_response": 1, "timeout": 1}
    requests = server.state["requests"]
    sc = [r for r in requests if r["sc"]]
    pq = [r for r in requests if not r["sc"]]
    assert len(sc) == 5 and len(pq) == 5 and all(r["path"] == "/v1/chat/completions" for r in requests)
    assert all(len(r["images"]) == len(example["sources"]) + 1 for r in sc)  # sources + edited, as data URLs
    assert len(encoded) == len(example["sources"]) + 1  # the five edits share their images: each encoded once
    assert all("The first 2 images are the original input images" in r["text"] for r in sc)  # D.1.2
    assert all(r["text"].endswith("Put the score in a list such that output score = [naturalness, artifacts]")
               for r in pq)  # D.1.3
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    width, height = example["edited"].size  # sent at the size the Qwen-VL processor gives it (65,536..589,824 px)
    sized = smart_resize(height, width, factor=32, min_pixels=65_536, max_pixels=589_824)[::-1]
    assert sized != (width, height) and all(r["images"] == [sized] for r in pq)  # PQ sees the edited image only
    assert all(r["temperature"] == 0.0 and r["max_tokens"] == 300 for r in requests)  # greedy by default
    # the reward callable on top of the API counts the failures the same way
    rewards, details = SpatialRewardFunction(api, batch_size=5)(
        [s["edited"] for s in samples[:2]], [s["instruction"] for s in samples[:2]],
        [s["sources"] for s in samples[:2]])
    assert rewards == [pytest.approx(EXPECTED), 0.0] and details["failure_reasons"] == {"sc:api_error:http": 1}


def test_api_backend_connection_refused_is_flagged(examples):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = SpatialRewardAPI(f"http://127.0.0.1:{port}/v1", "m", timeout=0.5, max_retries=0)
    example = examples[0]
    rewards = api.score_candidates(example["sources"], example["instruction"], [example["edited"]] * 2)
    assert rewards == [0.0, 0.0]
    assert api.stats["errors_by_kind"] == {"connection": 4}


def test_cli_with_api_base(server, examples, tmp_path, capsys):
    from modeling_miescore.cli.main import main

    example = examples[0]
    paths = []
    for k, image in enumerate([*example["sources"], example["edited"]]):
        paths.append(tmp_path / f"{k}.png")
        image.save(paths[-1])
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    out = tmp_path / "boxes.png"
    argv = ["spatialreward", "--api-base", base_url, "--model", "m", "--edited", str(paths[-1]),
            "--instruction", "Put the cat on the table.", "--json", "--draw", str(out), "--timeout", "5"]
    for path in paths[:-1]:
        argv += ["--source", str(path)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["reward"] == pytest.approx(EXPECTED) and result["backend"] == "openai"
    assert result["regions"][0]["label"] == "cat" and out.is_file()
    assert main(argv[:2] + ["ftp://nowhere"] + argv[3:]) == 2  # a bad URL is a user error
    assert "http://" in capsys.readouterr().err
