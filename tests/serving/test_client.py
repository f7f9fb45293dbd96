"""RewardClient and make_reward_fn: image encodings, grouping and order, retries on 429/503 with Retry-After,
connection reuse, errors naming the field. Servers run in-process on 127.0.0.1 with a fake backend."""

from __future__ import annotations

import email.utils
import io
import json
import time

import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from local_http import ScriptedHTTPServer
from prometheus_text import metric_value

from modeling_miescore.serving.backends import CallableBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.rewards.callables import make_reward_fn
from modeling_miescore.serving.reward_client import RewardClient, RewardServerError, encode_image
from modeling_miescore.serving.settings import ServerSettings


def _scorer(samples):
    return [{"edited_mean": float(np.asarray(s.edited, dtype=np.float64).mean()),
             "sources_mean": [float(np.asarray(x, dtype=np.float64).mean()) for x in s.sources],
             "instruction": s.instruction,
             "overall": float(np.asarray(s.edited, dtype=np.float64).mean()) / 2.55} for s in samples]


@pytest.fixture()
def server():
    with serve_in_background(CallableBackend(_scorer), ServerSettings(max_wait_ms=5)) as running:
        yield running


def _rgb(seed: int, size=(20, 16)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)


def test_every_image_kind_reaches_the_server_unchanged(server, tmp_path):
    array = _rgb(1)
    path = tmp_path / "edit.png"
    Image.fromarray(array).save(path)
    tensor_chw = torch.from_numpy(array).permute(2, 0, 1).float() / 255.0
    kinds = {"path": path, "str": str(path), "pil": Image.fromarray(array), "numpy": array,
             "float numpy": array.astype(np.float32) / 255.0, "tensor chw": tensor_chw,
             "bytes": path.read_bytes()}
    want = float(array.astype(np.float64).mean())
    with RewardClient(server.url) as client:
        for name, image in kinds.items():
            result = client.score([Image.fromarray(_rgb(2))], image, "edit it")
            assert result["edited_mean"] == pytest.approx(want, abs=1e-9), name
        # a JPEG path goes as its own bytes: the server decodes the same pixels the file holds
        jpeg = tmp_path / "edit.jpg"
        Image.fromarray(array).save(jpeg, quality=80)
        result = client.score(str(jpeg), jpeg, "edit it")  # a single source is accepted as-is
        decoded = float(np.asarray(Image.open(jpeg).convert("RGB"), dtype=np.float64).mean())
        assert result["edited_mean"] == pytest.approx(decoded) and len(result["sources_mean"]) == 1


def test_encode_image_is_lossless_png():
    array = _rgb(3)
    data = io.BytesIO(__import__("base64").b64decode(encode_image(array)))
    assert Image.open(data).format == "PNG"
    assert np.array_equal(np.asarray(Image.open(data).convert("RGB")), array)


def test_score_groups_and_score_batch_keep_order_across_split_requests(server):
    sources = [Image.fromarray(_rgb(10)), Image.fromarray(_rgb(11))]
    groups = [{"sources": sources, "instruction": f"group {g}", "edited": [_rgb(100 + 10 * g + e) for e in range(n)]}
              for g, n in enumerate([3, 1, 4])]
    with RewardClient(server.url, max_samples_per_request=3) as client:
        results = client.score_groups(groups)
        assert [len(r) for r in results] == [3, 1, 4]
        for g, group in enumerate(groups):
            for e, result in enumerate(results[g]):
                assert result["instruction"] == f"group {g}"
                assert result["edited_mean"] == pytest.approx(float(group["edited"][e].astype(np.float64).mean()))
                assert "group" not in result and "index" not in result
        samples = [(sources, _rgb(200 + i), "same") for i in range(4)] + [
            {"sources": [_rgb(300)], "edited": _rgb(301), "instruction": "other"}]
        batch = client.score_batch(samples)
        assert [r["instruction"] for r in batch] == ["same"] * 4 + ["other"]
        assert batch[4]["edited_mean"] == pytest.approx(float(_rgb(301).astype(np.float64).mean()))
    metrics = httpx.get(server.url + "/metrics").text
    # 8 edits in requests of <= 3 (groups are split only when larger than the limit): 3 | 1 | 3 | 1, then 3 | 2
    assert metric_value(metrics, "miescore_requests_total", endpoint="/v1/score_groups", status="200") == 6


def test_batches_are_split_to_fit_the_servers_pixel_budget(tmp_path):
    """A server allowing 30,000 decoded pixels per request; five 100x100 edits with their own source each
    (20,000 pixels per sample) and a group of three sharing one source. The client sizes its requests to the
    budget instead of sending one request the server refuses."""
    settings = ServerSettings(max_wait_ms=5, max_request_pixels=30_000)
    path = tmp_path / "source.png"
    Image.fromarray(_rgb(50, size=(100, 100))).save(path)
    samples = [(str(path), _rgb(60 + i, size=(100, 100)), f"edit {i}") for i in range(5)]
    group = {"sources": [path.read_bytes()], "instruction": "g", "edited": [_rgb(70 + e, size=(100, 100))
                                                                            for e in range(3)]}
    with serve_in_background(CallableBackend(_scorer), settings) as running:
        with RewardClient(running.url) as default_client:  # sized for the default 128 Mpx: one request, refused
            with pytest.raises(RewardServerError) as info:
                default_client.score_batch(samples)
            assert info.value.status == 413 and "per-request budget" in info.value.message
        with RewardClient(running.url, max_pixels_per_request=30_000) as client:
            results = client.score_batch(samples)
            assert [r["instruction"] for r in results] == [f"edit {i}" for i in range(5)]
            [grouped] = client.score_groups([group])
            assert [r["edited_mean"] for r in grouped] == pytest.approx(
                [float(e.astype(np.float64).mean()) for e in group["edited"]])
        metrics = httpx.get(running.url + "/metrics").text
    # 5 requests of one sample (2 x 10,000 px), then the group as 2 edits + 1 edit (its source in both)
    assert metric_value(metrics, "miescore_requests_total", endpoint="/v1/score_groups", status="200") == 7


def test_connections_are_reused(server):
    with RewardClient(server.url) as client:
        for i in range(5):
            client.score([_rgb(1)], _rgb(i), "x")
        assert len(server.server.server_state.connections) == 1
        # uvicorn counts a request once its response is written, which may be just after the client read it
        deadline = time.monotonic() + 2.0
        while server.server.server_state.total_requests < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.server.server_state.total_requests == 5


def _mock_client(statuses, retry_after="0.2", **kwargs):
    calls = []

    def handler(request):
        calls.append(time.monotonic())
        status = statuses[min(len(calls) - 1, len(statuses) - 1)]
        if status == 200:
            return httpx.Response(200, json={"overall": 50.0})
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return httpx.Response(status, headers=headers,
                              json={"error": {"field": None, "message": "busy", "kind": "queue_full"}})

    client = RewardClient("http://reward.test", transport=httpx.MockTransport(handler), **kwargs)
    return client, calls


def test_retries_honour_retry_after_and_are_bounded():
    client, calls = _mock_client([429, 503, 200], retry_after="0.2", max_retries=3)
    assert client.score([_rgb(1)], _rgb(2), "x") == {"overall": 50.0}
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 0.19 and calls[2] - calls[1] >= 0.19

    # a huge Retry-After is capped by max_retry_wait; after max_retries the error surfaces with its status
    client, calls = _mock_client([429], retry_after="3600", max_retries=2, max_retry_wait=0.05)
    started = time.monotonic()
    with pytest.raises(RewardServerError) as info:
        client.score([_rgb(1)], _rgb(2), "x")
    assert info.value.status == 429 and info.value.kind == "queue_full"
    assert len(calls) == 3 and time.monotonic() - started < 2.0

    client, calls = _mock_client([422], max_retries=5)  # client errors are not retried
    with pytest.raises(RewardServerError):
        client.score([_rgb(1)], _rgb(2), "x")
    assert len(calls) == 1


def test_retry_after_as_an_http_date_is_honoured_and_capped():
    client, calls = _mock_client([429], retry_after=email.utils.formatdate(time.time() + 3600, usegmt=True),
                                 max_retries=1, max_retry_wait=0.05)
    started = time.monotonic()
    with pytest.raises(RewardServerError) as info:
        client.score([_rgb(1)], _rgb(2), "x")
    assert info.value.status == 429 and len(calls) == 2 and time.monotonic() - started < 2.0


def test_retry_after_in_both_forms_against_a_real_server():
    """A real HTTP server answers 503 with an HTTP-date Retry-After, then 429 with delta-seconds, then scores."""
    busy = {"error": {"field": None, "message": "busy", "kind": "queue_full"}}
    # whole seconds: 1.6-2.6 s after now, minus the time the server and client take to start (under load up to ~1 s)
    when = email.utils.formatdate(time.time() + 2.6, usegmt=True)
    script = [(503, busy, {"Retry-After": when}, 0), (429, busy, {"Retry-After": "0.3"}, 0),
              (200, {"overall": 50.0}, None, 0)]
    with ScriptedHTTPServer(script) as server, RewardClient(server.origin, max_retries=3, backoff=0.0) as client:
        assert client.score([_rgb(1)], _rgb(2), "x") == {"overall": 50.0}
    requests = server.requests
    assert [r["path"] for r in requests] == ["/v1/score"] * 3
    assert 0.5 <= requests[1]["time"] - requests[0]["time"] < 4.0  # the date, not the zero backoff
    assert 0.28 <= requests[2]["time"] - requests[1]["time"] < 1.5


def test_server_errors_name_the_field(server):
    with RewardClient(server.url) as client:
        with pytest.raises(RewardServerError) as info:
            client.score([_rgb(1)], _rgb(2), "   ")
    assert info.value.status == 422 and info.value.field == "instruction"
    assert "instruction" in str(info.value)


def test_api_key_is_sent():
    with serve_in_background(CallableBackend(_scorer), ServerSettings(api_key="abc")) as running:
        with RewardClient(running.url, api_key="abc") as client:
            assert client.score([_rgb(1)], _rgb(2), "x")["instruction"] == "x"
        with RewardClient(running.url) as client, pytest.raises(RewardServerError) as info:
            client.score([_rgb(1)], _rgb(2), "x")
        assert info.value.status == 401


def test_make_reward_fn_shapes_and_scale(server):
    reward_fn = make_reward_fn(server.url, key="overall", scale=0.01)
    batch = np.stack([_rgb(i) for i in range(4)])  # (N, H, W, C)
    shared_sources = [Image.fromarray(_rgb(50)), Image.fromarray(_rgb(51))]
    rewards = reward_fn(batch, "make it pop", [shared_sources] * 4)
    want = [float(_rgb(i).astype(np.float64).mean()) / 255.0 for i in range(4)]
    assert rewards == pytest.approx(want)
    assert all(0.0 <= r <= 1.0 for r in rewards)
    # a torch batch (N, C, H, W) in [0, 1], one source per image given as a flat list, keyword call
    tensor = torch.from_numpy(batch).permute(0, 3, 1, 2).float() / 255.0
    rewards = reward_fn(images=tensor, instructions=["a", "b", "c", "d"], sources=[_rgb(60 + i) for i in range(4)])
    assert rewards == pytest.approx(want, abs=1e-6)
    with pytest.raises(ValueError, match="3 instructions"):
        reward_fn(batch, ["a", "b", "c"], [shared_sources] * 4)
    with pytest.raises(KeyError, match="not_a_key"):
        make_reward_fn(server.url, key="not_a_key")(batch[:1], "x", [shared_sources])
    reward_fn.client.close()


def test_reward_fn_when_the_server_is_unreachable():
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    strict = make_reward_fn(dead, max_retries=1, max_retry_wait=0.01)
    with pytest.raises(RewardServerError, match="cannot reach"):
        strict([_rgb(1)], "x", [[_rgb(2)]])
    lenient = make_reward_fn(dead, max_retries=0, on_error=0.0)
    assert lenient([_rgb(1), _rgb(2)], "x", [[_rgb(3)]] * 2) == [0.0, 0.0]


def test_requests_are_plain_json():
    """The wire format is JSON with base64 strings (never pickle)."""
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"results": [{"overall": 1.0, "group": 0, "index": 0}]})

    client = RewardClient("http://reward.test", transport=httpx.MockTransport(handler))
    client.score_batch([([_rgb(1)], _rgb(2), "x")])
    body = seen[0]
    assert set(body) == {"groups"} and set(body["groups"][0]) == {"sources", "instruction", "edited"}
    assert all(isinstance(v, str) for v in body["groups"][0]["sources"] + body["groups"][0]["edited"])


def test_groups_are_assigned_to_replicas_stably_and_in_balance():
    from modeling_miescore.serving.reward_client import assign_groups

    urls = [f"http://gpu-{i}:8000" for i in range(4)]
    keys = [f"group-{g}" for g in range(48)]
    everyone = [list(range(4))] * 48
    chosen = assign_groups(keys, [12] * 48, everyone, urls)  # the paper's 48 groups x 12 (B.2.1)
    assert chosen == assign_groups(keys, [12] * 48, everyone, urls)  # the same groups go to the same replicas
    assert max(chosen.count(r) for r in range(4)) * 12 <= 1.1 * 576 / 4 + 12
    plain = assign_groups(keys, [12] * 48, everyone, urls, slack=10.0)  # no load bound: plain rendezvous
    assert max(plain.count(r) for r in range(4)) > max(chosen.count(r) for r in range(4))
    # a replica going away moves only its own groups (without a load bound)
    without = assign_groups(keys, [12] * 48, [[0, 1, 3]] * 48, urls, slack=10.0)
    assert all(after == before for before, after in zip(plain, without) if before != 2)


def test_a_client_takes_several_urls_and_refuses_bad_ones():
    with RewardClient("http://a:1, http://b:2/") as client:
        assert client.base_urls == ["http://a:1", "http://b:2"] and client.base_url == "http://a:1"
    for bad, message in (("", "no reward server URL"), ("a:1", "must start with http"),
                         (["http://a:1", "http://a:1/"], "repeat")):
        with pytest.raises(ValueError, match=message):
            RewardClient(bad)
