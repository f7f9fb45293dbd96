"""Reward server: correctness against the model, batching, limits and validation, auth, 429/504/503, metrics,
load with faults mixed in, and a SIGTERM drain of a real ``miescore serve`` process.

Servers run in-process on 127.0.0.1 with an ephemeral port; every network wait is bounded.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from prometheus_text import metric_families, metric_series, metric_value

from modeling_miescore.serving.backends import CallableBackend, MIEScoreBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.serving.settings import ServerSettings

# ---------------------------------------------------------------------------------------------- helpers


def png_bytes(seed: int, size=(24, 20), fmt="PNG") -> bytes:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def image_mean(data: bytes) -> float:
    return float(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64).mean())


class FakeScorer:
    """Deterministic, fast backend: the result identifies the sample (mean of the edited image, #sources,
    instruction), so a mixed-up response is detected. Records every batch; can sleep or fail on demand."""

    def __init__(self, delay: float = 0.0, slow_instruction: str | None = None, slow_delay: float = 0.0):
        self.delay, self.slow_instruction, self.slow_delay = delay, slow_instruction, slow_delay
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, samples):
        with self.lock:
            self.batches.append([s.instruction for s in samples])
        if any(s.instruction == "boom" for s in samples):
            raise RuntimeError("model exploded")
        time.sleep(self.delay)
        if self.slow_instruction and any(s.instruction == self.slow_instruction for s in samples):
            time.sleep(self.slow_delay)
        return [{"edited_mean": float(np.asarray(s.edited, dtype=np.float64).mean()),
                 "num_sources": len(s.sources), "instruction": s.instruction,
                 "overall": float(np.asarray(s.edited, dtype=np.float64).mean()) / 2.55} for s in samples]


def fake_server(settings=None, **scorer_kwargs):
    scorer = FakeScorer(**scorer_kwargs)
    server = serve_in_background(CallableBackend(scorer, name="fake"), settings or ServerSettings())
    server.scorer = scorer
    return server


def one_payload(seed: int, instruction: str = "make it red", sources: int = 2) -> dict:
    return {"sources": [b64(png_bytes(1000 + seed * 7 + k)) for k in range(sources)],
            "edited": b64(png_bytes(seed)), "instruction": instruction}


# ---------------------------------------------------------------------------------------------- the model


def pil_to_b64(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return b64(buffer.getvalue())


def test_server_results_equal_model_score(tiny_miescore, examples):
    """JSON, multipart and group requests give what ``model.score`` gives for the same inputs (to 1e-4)."""
    edits = examples[:2]
    expected = [tiny_miescore.score(e["sources"], e["edited"], e["instruction"]) for e in edits]
    assert set(expected[0]) == {"visual_quality", "instruction_following", "attribute_preservation", "overall"}
    backend = MIEScoreBackend(tiny_miescore)
    assert backend.accepts_group_ids  # score_batch takes prefix-reuse groups: the server passes them
    with serve_in_background(backend, ServerSettings(max_wait_ms=50)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            for edit, want in zip(edits, expected):
                got = client.post("/v1/score", json={"sources": [pil_to_b64(s) for s in edit["sources"]],
                                                     "edited": pil_to_b64(edit["edited"]),
                                                     "instruction": edit["instruction"]})
                assert got.status_code == 200, got.text
                assert got.json() == pytest.approx(want, abs=1e-4)
            edit = edits[0]
            files = [("sources", (f"s{i}.png", base64.b64decode(pil_to_b64(s)), "image/png"))
                     for i, s in enumerate(edit["sources"])]
            files.append(("edited", ("e.png", base64.b64decode(pil_to_b64(edit["edited"])), "image/png")))
            got = client.post("/v1/score", files=files, data={"instruction": edit["instruction"]})
            assert got.status_code == 200, got.text
            assert got.json() == pytest.approx(expected[0], abs=1e-4)
            # one group: the first edit's sources and instruction with all three edited images
            group = {"sources": [pil_to_b64(s) for s in edit["sources"]], "instruction": edit["instruction"],
                     "edited": [pil_to_b64(e["edited"]) for e in edits]}
            got = client.post("/v1/score_groups", json={"groups": [group]})
            assert got.status_code == 200, got.text
            results = got.json()["results"]
            assert [(r["group"], r["index"]) for r in results] == [(0, 0), (0, 1)]
            wants = [expected[0], tiny_miescore.score(edit["sources"], edits[1]["edited"], edit["instruction"])]
            for result, want in zip(results, wants):
                assert {k: result[k] for k in want} == pytest.approx(want, abs=1e-4)


# ---------------------------------------------------------------------------------------------- batching


def test_concurrent_requests_are_batched_and_routed_back():
    """12 concurrent single-sample requests end up in few model calls; each gets its own result; samples
    with the same sources + instruction sit next to each other in a batch."""
    settings = ServerSettings(max_batch=16, max_wait_ms=300)
    with fake_server(settings) as server:
        payloads = [one_payload(i % 2, instruction=f"group {i % 2}") for i in range(6)]
        payloads += [one_payload(100 + i, instruction=f"solo {i}") for i in range(6)]

        def send(payload):
            with httpx.Client(base_url=server.url, timeout=30) as c:
                return c.post("/v1/score", json=payload)

        with ThreadPoolExecutor(12) as pool:
            responses = list(pool.map(send, payloads))
        for payload, response in zip(payloads, responses):
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["instruction"] == payload["instruction"]
            assert body["edited_mean"] == pytest.approx(image_mean(base64.b64decode(payload["edited"])))
        batches = server.scorer.batches
        assert sum(len(b) for b in batches) == 12
        assert len(batches) < 12 and max(len(b) for b in batches) > 1
        for batch in batches:  # a prefix's samples are contiguous inside the batch
            seen = []
            for instruction in batch:
                if not seen or seen[-1] != instruction:
                    assert instruction not in seen, batch
                    seen.append(instruction)
        metrics = httpx.get(server.url + "/metrics").text
        assert metric_value(metrics, "miescore_batch_size_count") == len(batches)
        assert metric_value(metrics, "miescore_batch_size_sum") == 12


def test_backends_that_accept_group_ids_get_one_id_per_shared_prefix():
    from modeling_miescore.serving.backends import ScorerBackend

    class Recording(ScorerBackend):
        accepts_group_ids = True

        def __init__(self):
            self.calls = []

        def score_samples(self, samples, group_ids=None):
            self.calls.append((list(group_ids), [s.instruction for s in samples]))
            return [{"overall": 1.0} for _ in samples]

    backend = Recording()
    with serve_in_background(backend, ServerSettings(max_wait_ms=50)) as server:
        shared = [b64(png_bytes(1)), b64(png_bytes(2))]
        body = {"groups": [{"sources": shared, "instruction": "a", "edited": [b64(png_bytes(10 + i)) for i in range(3)]}],
                "samples": [{"sources": shared, "instruction": "b", "edited": b64(png_bytes(20))},
                            {"sources": shared, "instruction": "a", "edited": b64(png_bytes(21))}]}
        assert httpx.post(server.url + "/v1/score_groups", json=body).status_code == 200
    [(ids, instructions)] = backend.calls
    # same sources + instruction -> same id, and kept adjacent: the late "a" sample joins its group
    assert instructions == ["a", "a", "a", "a", "b"]
    assert len(set(ids[:4])) == 1 and ids[4] != ids[0]


def test_a_burst_fills_one_batch_while_its_requests_are_still_being_decoded(monkeypatch):
    """Eight requests arrive together and take 50 ms each to decode on two decode threads; max_wait_ms is 1 ms.
    The batch waits for the requests that arrived in time instead of starting with the first two decoded."""
    from modeling_miescore.serving import request_parsing

    decoded = request_parsing._UndecodedSample.decoded

    def slow_decoded(self, target_pixels):
        time.sleep(0.05)
        return decoded(self, target_pixels)

    monkeypatch.setattr(request_parsing._UndecodedSample, "decoded", slow_decoded)
    with fake_server(ServerSettings(max_batch=8, max_wait_ms=1, decode_workers=2)) as server:
        payloads = [one_payload(i, instruction=f"burst {i}") for i in range(8)]
        bodies = [json.dumps(p).encode() for p in payloads]
        barrier = threading.Barrier(8)

        def send(body):
            with httpx.Client(base_url=server.url, timeout=30) as client:
                client.get("/health")  # connect first, so that the eight requests arrive together
                barrier.wait()
                return client.post("/v1/score", content=body, headers={"content-type": "application/json"})

        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(send, bodies))
    assert [r.json()["instruction"] for r in responses] == [p["instruction"] for p in payloads]
    assert max(len(batch) for batch in server.scorer.batches) >= 6, server.scorer.batches


def test_samples_that_share_a_prefix_are_scored_apart_from_the_others():
    """The backend asks the model for prefix reuse only for samples that share sources and instruction; the
    others run with reuse_prefix=False (no pixel hashing on the model thread). Results keep the input order."""
    from modeling_miescore.hub.processing_miescore import EditSample
    from modeling_miescore.serving.backends import score_by_shared_prefix

    calls = []

    def score_batch(samples, batch_size, groups=None, reuse_prefix=True):
        calls.append(([s.instruction for s in samples], batch_size, groups, reuse_prefix))
        return [{"instruction": s.instruction} for s in samples]

    samples = [EditSample(sources=[], edited=None, instruction=name) for name in ["a1", "b", "a2", "c", "a3"]]
    results = score_by_shared_prefix(score_batch, samples, ["A", "B", "A", "C", "A"])
    assert [r["instruction"] for r in results] == ["a1", "b", "a2", "c", "a3"]
    assert calls == [(["a1", "a2", "a3"], 3, ["A", "A", "A"], True), (["b", "c"], 2, None, False)]
    calls.clear()
    score_by_shared_prefix(score_batch, samples[:2], ["A", "B"], batch_size=4)
    assert calls == [(["a1", "b"], 4, None, False)]  # nothing shared: one call, no prefix reuse


def test_a_failing_sample_does_not_fail_its_batch_mates():
    with fake_server(ServerSettings(max_batch=8, max_wait_ms=300)) as server:
        payloads = [one_payload(i, instruction="fine") for i in range(3)] + [one_payload(9, instruction="boom")]

        def send(payload):
            return httpx.post(server.url + "/v1/score", json=payload, timeout=30)

        with ThreadPoolExecutor(4) as pool:
            responses = list(pool.map(send, payloads))
        assert [r.status_code for r in responses] == [200, 200, 200, 500]
        assert responses[3].json()["error"]["kind"] == "model_error"
        assert "model exploded" in responses[3].json()["error"]["message"]
        assert httpx.get(server.url + "/health").status_code == 200


def test_a_sample_the_model_fails_on_is_named_and_other_requests_in_its_batch_are_scored():
    """One batch holds a two-sample score_groups request whose second sample makes the model raise, and two
    plain requests: the group request gets a 500 naming samples[1]; the plain ones get their scores."""
    with fake_server(ServerSettings(max_batch=8, max_wait_ms=300)) as server:
        bad = {"samples": [one_payload(1, instruction="fine"), one_payload(2, instruction="boom")]}

        def send(args):
            path, payload = args
            return httpx.post(server.url + path, json=payload, timeout=30)

        with ThreadPoolExecutor(3) as pool:
            responses = list(pool.map(send, [("/v1/score_groups", bad), ("/v1/score", one_payload(3)),
                                             ("/v1/score", one_payload(4))]))
        assert [r.status_code for r in responses] == [500, 200, 200]
        error = responses[0].json()["error"]
        assert (error["kind"], error["field"]) == ("model_error", "samples[1]")
        assert "samples[1]" in error["message"] and "model exploded" in error["message"]
        assert [r.json()["edited_mean"] for r in responses[1:]] == pytest.approx(
            [image_mean(png_bytes(3)), image_mean(png_bytes(4))])
        assert max(len(b) for b in server.scorer.batches) == 4  # they did share one batch first


def test_an_aspect_ratio_the_model_cannot_take_gets_422_before_the_model(tiny_miescore, examples):
    """A 1x10000 strip makes Qwen-VL's smart_resize raise ValueError (a 500 before); now it is refused with 422
    naming the image, and a request batched with it is scored."""
    edit = examples[0]
    strip = Image.new("RGB", (1, 10000), (90, 10, 10))
    good = {"sources": [pil_to_b64(s) for s in edit["sources"]], "edited": pil_to_b64(edit["edited"]),
            "instruction": edit["instruction"]}
    bad = {**good, "sources": [good["sources"][0], pil_to_b64(strip)]}
    with serve_in_background(MIEScoreBackend(tiny_miescore), ServerSettings(max_wait_ms=200)) as server:
        with ThreadPoolExecutor(2) as pool:
            refused, scored = pool.map(lambda p: httpx.post(server.url + "/v1/score", json=p, timeout=120), [bad, good])
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["kind"], error["field"]) == ("invalid_request", "sources[1]")
    assert "200:1" in error["message"]
    assert scored.status_code == 200 and set(scored.json()) >= {"overall"}


# ---------------------------------------------------------------------------------------------- validation


def _truncated_png() -> bytes:
    data = png_bytes(5, size=(64, 64))
    return data[: len(data) // 2]


@pytest.mark.parametrize("mutate, status, field, kind", [
    (lambda p: "{not json", 422, "body", "malformed_json"),
    (lambda p: {**p, "sources": [p["sources"][0], "@@not-base64@@"]}, 422, "sources[1]", "bad_base64"),
    (lambda p: {**p, "edited": b64(b"this is not an image")}, 422, "edited", "corrupt_image"),
    (lambda p: {**p, "edited": b64(_truncated_png())}, 422, "edited", "corrupt_image"),
    (lambda p: {**p, "sources": []}, 422, "sources", "invalid_request"),
    (lambda p: {k: v for k, v in p.items() if k != "instruction"}, 422, "instruction", "invalid_request"),
    (lambda p: {**p, "instruction": "   "}, 422, "instruction", "invalid_request"),
    (lambda p: {**p, "instruction": "x" * 300}, 413, "instruction", "too_large"),
    (lambda p: {**p, "sources": [p["sources"][0]] * 5}, 413, "sources", "too_large"),
    (lambda p: {**p, "edited": b64(png_bytes(3, size=(120, 100)))}, 413, "edited", "too_large"),
    (lambda p: {**p, "sources": [p["sources"][0], 7]}, 422, "sources[1]", "invalid_request"),
    (lambda p: [p], 422, "body", "invalid_request"),
])
def test_bad_requests_get_4xx_naming_the_field(mutate, status, field, kind):
    settings = ServerSettings(max_instruction_chars=200, max_sources_per_sample=4, max_image_pixels=5000)
    with fake_server(settings) as server:
        payload = mutate(one_payload(1))
        body = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        response = httpx.post(server.url + "/v1/score", content=body,
                              headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert (error["field"], error["kind"]) == (field, kind)
        assert error["message"]
        assert server.scorer.batches == []  # nothing bad reached the model
        metrics = httpx.get(server.url + "/metrics").text
        assert metric_value(metrics, "miescore_failures_total", kind=kind) == 1
        assert metric_value(metrics, "miescore_requests_total", endpoint="/v1/score", status=str(status)) == 1


def test_body_size_limit_and_content_type():
    settings = ServerSettings(max_request_bytes=4000)
    with fake_server(settings) as server:
        big = json.dumps(one_payload(1) | {"instruction": "y" * 5000}).encode()
        response = httpx.post(server.url + "/v1/score", content=big, headers={"content-type": "application/json"})
        assert response.status_code == 413 and response.json()["error"]["field"] == "body"

        def chunks():  # no Content-Length: the limit must hold while streaming
            for _ in range(10):
                yield b" " * 1000

        response = httpx.post(server.url + "/v1/score", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413 and response.json()["error"]["field"] == "body"
        response = httpx.post(server.url + "/v1/score", content=b"\x89PNG", headers={"content-type": "image/png"})
        assert response.status_code == 415 and response.json()["error"]["field"] == "Content-Type"
        assert httpx.get(server.url + "/v1/score").status_code == 405
        assert httpx.get(server.url + "/nope").json()["error"]["kind"] == "not_found"


def test_score_groups_validation_and_order():
    with fake_server(ServerSettings(max_samples_per_request=6)) as server:
        group = {"sources": [b64(png_bytes(50))], "instruction": "g",
                 "edited": [b64(png_bytes(60 + i)) for i in range(3)]}
        samples = [dict(one_payload(70 + i, instruction=f"s{i}"), group="rl-7") for i in range(2)]
        response = httpx.post(server.url + "/v1/score_groups", json={"groups": [group], "samples": samples})
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert [(r["group"], r["index"]) for r in results] == [(0, 0), (0, 1), (0, 2), ("rl-7", 0), ("rl-7", 1)]
        expected = [image_mean(png_bytes(60 + i)) for i in range(3)] + [image_mean(png_bytes(70 + i)) for i in range(2)]
        assert [r["edited_mean"] for r in results] == pytest.approx(expected)

        bad = dict(group, edited=[group["edited"][0], "%%%"])
        response = httpx.post(server.url + "/v1/score_groups", json={"groups": [bad]})
        assert response.status_code == 422 and response.json()["error"]["field"] == "groups[0].edited[1]"
        response = httpx.post(server.url + "/v1/score_groups", json={"groups": [group, group, group]})
        assert response.status_code == 413 and response.json()["error"]["kind"] == "too_large"
        response = httpx.post(server.url + "/v1/score_groups", json={"group": [group]})
        assert response.status_code == 422 and response.json()["error"]["field"] == "group"


# ---------------------------------------------------------------------------------------------- overload, auth, timeouts


def test_full_queue_answers_429_with_retry_after():
    settings = ServerSettings(max_batch=1, max_wait_ms=0, max_queue=2, retry_after_s=3)
    with fake_server(settings, delay=0.4) as server:
        def send(i):
            return httpx.post(server.url + "/v1/score", json=one_payload(i), timeout=30)

        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(send, range(8)))
        codes = sorted(r.status_code for r in responses)
        assert 429 in codes and 200 in codes and set(codes) <= {200, 429}
        rejected = [r for r in responses if r.status_code == 429]
        assert all(r.headers["retry-after"] == "3" for r in rejected)
        assert all(r.json()["error"]["kind"] == "queue_full" for r in rejected)
        metrics = httpx.get(server.url + "/metrics").text
        assert metric_value(metrics, "miescore_requests_total", endpoint="/v1/score", status="429") == len(rejected)


def test_api_key_is_required_when_configured():
    with fake_server(ServerSettings(api_key="s3cret")) as server:
        url = server.url + "/v1/score"
        missing = httpx.post(url, json=one_payload(1))
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["error"]["field"] == "Authorization"
        wrong = httpx.post(url, json=one_payload(1), headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = httpx.post(url, json=one_payload(1), headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert httpx.get(server.url + "/health").status_code == 200
        assert server.scorer.batches and len(server.scorer.batches) == 1  # only the authorised one was scored


def test_with_an_api_key_health_says_only_ok_and_metrics_need_the_key():
    key = {"Authorization": "Bearer s3cret"}
    with fake_server(ServerSettings(api_key="s3cret")) as server:
        anonymous = httpx.get(server.url + "/health")
        assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}  # no model, device, queue
        full = httpx.get(server.url + "/health", headers=key).json()
        assert full["status"] == "ok" and full["backend"] == "fake" and "max_batch" in full
        assert httpx.get(server.url + "/health", headers={"Authorization": "Bearer nope"}).json() == {"status": "ok"}
        refused = httpx.get(server.url + "/metrics")
        assert refused.status_code == 401 and refused.json()["error"]["field"] == "Authorization"
        assert "miescore_" not in refused.text
        metrics = httpx.get(server.url + "/metrics", headers=key)
        assert metrics.status_code == 200
        assert metric_value(metrics.text, "miescore_failures_total", kind="unauthorized") == 1
    with fake_server(ServerSettings(api_key="s3cret", public_metrics=True)) as server:
        assert httpx.get(server.url + "/metrics").status_code == 200
        assert httpx.post(server.url + "/v1/score", json=one_payload(1)).status_code == 401  # scoring still needs it
    with fake_server() as server:  # no key configured: everything is open, as before
        assert httpx.get(server.url + "/health").json()["backend"] == "fake"
        assert httpx.get(server.url + "/metrics").status_code == 200


def test_request_timeout_gives_504_and_server_recovers():
    settings = ServerSettings(request_timeout_s=0.3, max_wait_ms=0)
    with fake_server(settings, slow_instruction="slow", slow_delay=1.0) as server:
        response = httpx.post(server.url + "/v1/score", json=one_payload(1, instruction="slow"), timeout=30)
        assert response.status_code == 504 and response.json()["error"]["kind"] == "timeout"
        time.sleep(1.0)  # the slow model call still holds the model thread; let it finish
        response = httpx.post(server.url + "/v1/score", json=one_payload(2), timeout=30)
        assert response.status_code == 200


def test_drain_refuses_new_work_with_503_and_finishes_in_flight():
    """What SIGTERM does, in-process: begin the drain (new requests 503, /health 503), then stop uvicorn
    while three requests are still queued or running; all three are answered with scores."""
    settings = ServerSettings(max_batch=1, max_wait_ms=0, drain_timeout_s=10)
    server = fake_server(settings, delay=0.5).start()
    try:
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(httpx.post, server.url + "/v1/score", json=one_payload(i), timeout=30)
                       for i in range(3)]
            scheduler = server.app.state.service.scheduler
            deadline = time.monotonic() + 20
            while not (server.scorer.batches and scheduler.depth == 2) and time.monotonic() < deadline:
                time.sleep(0.005)  # until one is running and two are queued
            assert scheduler.depth == 2
            server.app.state.service.begin_drain()
            time.sleep(0.05)
            late = httpx.post(server.url + "/v1/score", json=one_payload(9), timeout=30)
            health = httpx.get(server.url + "/health")
            stopper = threading.Thread(target=server.stop, kwargs={"timeout": 20})
            stopper.start()
            results = [f.result(timeout=30) for f in futures]
            stopper.join(30)
        assert late.status_code == 503 and "retry-after" in late.headers
        assert health.status_code == 503 and health.json()["status"] == "draining"
        assert [r.status_code for r in results] == [200, 200, 200]
        assert [r.json()["edited_mean"] for r in results] == pytest.approx(
            [image_mean(png_bytes(i)) for i in range(3)])
    finally:
        server.stop(timeout=20)
    assert not server.thread.is_alive()


# ---------------------------------------------------------------------------------------------- metrics format


def test_metrics_registry_starts_at_zero_and_escapes_labels():
    from modeling_miescore.serving.monitoring import FAILURE_KINDS, ServerMetrics

    registry = ServerMetrics()
    text = registry.render().decode()
    assert metric_value(text, "miescore_samples_scored_total") == 0  # visible before the first sample
    assert {labels["kind"]: value for labels, value in metric_series(text, "miescore_failures_total")} == \
        dict.fromkeys(FAILURE_KINDS, 0.0)
    registry.requests.labels(endpoint='/a"b\\c', status="200").inc()
    registry.batch_size.observe(3)
    registry.batch_size.observe(40)
    text = registry.render().decode()
    assert 'miescore_requests_total{endpoint="/a\\"b\\\\c",status="200"} 1.0' in text  # escaped on the wire
    assert metric_value(text, "miescore_requests_total", endpoint='/a"b\\c', status="200") == 1
    assert metric_value(text, "miescore_batch_size_bucket", le="2.0") == 0
    assert metric_value(text, "miescore_batch_size_bucket", le="4.0") == 1
    assert metric_value(text, "miescore_batch_size_bucket", le="64.0") == 2
    assert metric_value(text, "miescore_batch_size_bucket", le="+Inf") == 2
    assert metric_value(text, "miescore_batch_size_sum") == 43
    with pytest.raises(ValueError):
        registry.requests.labels(endpoint="/x")  # a missing label is a bug, not a new series
    # each server has its own registry: a second one starts from zero and does not clash
    other = ServerMetrics()
    other.samples.inc(2)
    assert metric_value(other.render().decode(), "miescore_samples_scored_total") == 2
    assert metric_value(registry.render().decode(), "miescore_samples_scored_total") == 0


def test_metrics_exposition_is_well_formed():
    from prometheus_client import CONTENT_TYPE_LATEST

    with fake_server() as server:
        for i in range(3):
            httpx.post(server.url + "/v1/score", json=one_payload(i))
        response = httpx.get(server.url + "/metrics")
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    text = response.text
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eInf]+', line), line
    families = metric_families(text)
    assert families["miescore_requests"] == "counter"
    assert families["miescore_batch_size"] == "histogram"
    assert families["miescore_request_duration_seconds"] == "histogram"
    assert families["miescore_queue_depth"] == "gauge"
    assert families["miescore_failures"] == "counter"
    buckets = [(labels["le"], value) for labels, value in metric_series(text, "miescore_request_duration_seconds_bucket")
               if labels["endpoint"] == "/v1/score"]
    counts = [value for _, value in buckets]
    assert counts == sorted(counts) and buckets[-1] == ("+Inf", 3)  # cumulative, +Inf == count
    assert metric_value(text, "miescore_request_duration_seconds_count", endpoint="/v1/score") == 3
    assert metric_value(text, "miescore_requests_total", endpoint="/v1/score", status="200") == 3
    assert metric_value(text, "miescore_samples_scored_total") == 3
    assert metric_value(text, "miescore_queue_depth") == 0


# ---------------------------------------------------------------------------------------------- load with faults


def _raw_request(port: int, body: bytes, *, chunks=1, pause=0.0, close_after: float | None = None,
                 declared: int | None = None, timeout=20.0) -> bytes:
    """A hand-written HTTP/1.1 request on a raw socket: lets a client send slowly or hang up early."""
    head = (f"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared if declared is not None else len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head)
        size = max(1, len(body) // chunks)
        for start in range(0, len(body), size):
            sock.sendall(body[start:start + size])
            if pause:
                time.sleep(pause)
        if close_after is not None:
            time.sleep(close_after)
            return b""
        received = b""
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not data:
                break
            received += data
        return received


def test_load_with_faults_mixed_in():
    """Concurrent valid and broken traffic: the server stays up, valid requests all succeed with their own
    result, every request gets exactly one answer, and /metrics counts match what was sent."""
    settings = ServerSettings(max_batch=8, max_wait_ms=10, max_request_bytes=200_000, body_timeout_s=2.0,
                              max_queue=512)
    server = fake_server(settings, delay=0.01, slow_instruction="slow", slow_delay=0.8).start()
    port = server.port
    valid = [one_payload(i, instruction=f"edit {i % 4}") for i in range(40)]
    big_body = json.dumps(one_payload(1) | {"instruction": "z" * 250_000}).encode()
    jobs = [("valid", p) for p in valid]
    jobs += [("malformed", None)] * 4 + [("bad_b64", None)] * 4 + [("corrupt", None)] * 4
    jobs += [("oversized", None)] * 3 + [("slow_ok", None)] * 2 + [("stalled", None)] * 2
    jobs += [("disconnect", None)] * 3
    expected_status = {"valid": 200, "malformed": 422, "bad_b64": 422, "corrupt": 422, "oversized": 413,
                       "slow_ok": 200, "stalled": 408, "disconnect": 499}
    rng = np.random.default_rng(0)
    order = rng.permutation(len(jobs))

    def run(job):
        kind, payload = job
        if kind == "valid":
            with httpx.Client(timeout=30) as c:
                r = c.post(server.url + "/v1/score", json=payload)
            return kind, r.status_code, r.json(), payload
        if kind == "malformed":
            r = httpx.post(server.url + "/v1/score", content=b'{"sources": [', timeout=30)
            return kind, r.status_code, r.json(), None
        if kind == "bad_b64":
            r = httpx.post(server.url + "/v1/score", json={**one_payload(3), "edited": "!!!"}, timeout=30)
            return kind, r.status_code, r.json(), None
        if kind == "corrupt":
            r = httpx.post(server.url + "/v1/score", json={**one_payload(3), "edited": b64(_truncated_png())},
                           timeout=30)
            return kind, r.status_code, r.json(), None
        if kind == "oversized":
            r = httpx.post(server.url + "/v1/score", content=big_body, timeout=30)
            return kind, r.status_code, r.json(), None
        if kind == "slow_ok":  # trickles its body in 4 pieces within the body timeout
            raw = _raw_request(port, json.dumps(one_payload(5)).encode(), chunks=4, pause=0.05)
            return kind, _status_lines(raw), raw, None
        if kind == "stalled":  # promises more body than it sends
            raw = _raw_request(port, b'{"sources": ', declared=5000)
            return kind, _status_lines(raw), raw, None
        # disconnect: a request whose scoring takes long; the client hangs up before the answer
        _raw_request(port, json.dumps(one_payload(6, instruction="slow")).encode(), close_after=0.2)
        return kind, None, None, None

    try:
        with ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(run, [jobs[i] for i in order]))
        sent = {}
        for kind, status, body, payload in outcomes:
            sent[expected_status[kind]] = sent.get(expected_status[kind], 0) + 1
            if kind == "disconnect":
                continue
            if isinstance(status, list):  # raw socket: exactly one HTTP response on the wire
                assert len(status) == 1, (kind, body[:300])
                status = status[0]
            assert status == expected_status[kind], (kind, status, body)
            if kind == "valid":
                assert body["instruction"] == payload["instruction"]
                assert body["edited_mean"] == pytest.approx(image_mean(base64.b64decode(payload["edited"])))
        assert httpx.get(server.url + "/health").status_code == 200
        deadline = time.monotonic() + 10  # the disconnected requests are recorded once the server notices
        while True:
            text = httpx.get(server.url + "/metrics").text
            counted = {int(labels["status"]): value for labels, value in metric_series(text, "miescore_requests_total")
                       if labels["endpoint"] == "/v1/score"}
            if counted == sent or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert counted == sent
        assert metric_value(text, "miescore_failures_total", kind="client_disconnected") == 3
        assert metric_value(text, "miescore_failures_total", kind="body_timeout") == 2
        assert metric_value(text, "miescore_inflight_requests") == 1  # only this /metrics request
        assert metric_value(text, "miescore_queue_depth") == 0
    finally:
        server.stop(timeout=20)


def _status_lines(raw: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


# ---------------------------------------------------------------------------------------------- the CLI process


def test_serve_cli_user_errors(tmp_path, capsys, monkeypatch):
    from modeling_miescore.cli.main import main

    monkeypatch.delenv("MIESCORE_TEST_KEY", raising=False)
    assert main(["serve", "--model", str(tmp_path / "missing"), "--port", "0"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["serve", "--model", str(tmp_path), "--api-key-env", "MIESCORE_TEST_KEY"]) == 2
    assert "MIESCORE_TEST_KEY" in capsys.readouterr().err
    assert main(["serve", "--model", str(tmp_path), "--max-instruction-chars", "100000"]) == 2
    assert "model's limit" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--model", str(tmp_path), "--port", str(port)]) == 2
        err = capsys.readouterr().err
        assert f"127.0.0.1:{port}" in err and "Traceback" not in err


def test_serve_flags_reach_the_settings_and_help_shows_their_defaults(monkeypatch, capsys):
    from modeling_miescore.cli.main import build_parser
    from modeling_miescore.utils.declared_settings import settings_from_options

    args = build_parser().parse_args([
        "serve", "--model", "m", "--max-request-pixels", "5000000", "--header-timeout", "2.5",
        "--max-connections", "64", "--decode-workers", "3", "--public-metrics", "--keep-alive-timeout", "1",
        "--api-key-env", "MIESCORE_TEST_KEY"])
    settings = settings_from_options(ServerSettings, args, environ={"MIESCORE_TEST_KEY": "k"})
    assert settings.api_key == "k"
    assert (settings.max_request_pixels, settings.header_timeout_s, settings.max_connections) == (5_000_000, 2.5, 64)
    assert (settings.decode_workers, settings.public_metrics, settings.keep_alive_timeout_s) == (3, True, 1.0)
    assert settings.max_sample_pixels == ServerSettings().max_sample_pixels  # untouched flags keep the defaults
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in [("--max-request-pixels", "128,000,000"), ("--header-timeout", "10"),
                          ("--max-connections", "1000"), ("--max-sample-pixels", "96,000,000")]:
        assert flag in text and f"(default {default})" in text.split(flag, 2)[-1].split("--", 1)[0]


@pytest.mark.slow  # a fresh process imports torch + transformers: 10-60 s on a loaded 2-core machine
def test_sigterm_drains_a_real_uvicorn_process(tiny_miescore_path, examples):
    """``miescore serve`` in a subprocess: requests in flight when SIGTERM arrives all complete with scores,
    then the process exits by itself."""
    env = dict(os.environ, MIESCORE_TEST_KEY="k3y", PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "modeling_miescore.cli", "serve", "--model", str(tiny_miescore_path),
               "--port", "0", "--device", "cpu", "--max-batch", "1", "--max-wait-ms", "0",
               "--api-key-env", "MIESCORE_TEST_KEY", "--log-level", "warning", "--drain-timeout", "60"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = ""
        start = time.monotonic()
        while "http://" not in line and time.monotonic() - start < 90:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                pytest.fail(f"server exited early: {process.stderr.read()[-2000:]}")
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        edit = examples[0]
        payload = {"sources": [pil_to_b64(s) for s in edit["sources"]], "edited": pil_to_b64(edit["edited"]),
                   "instruction": edit["instruction"]}
        headers = {"Authorization": "Bearer k3y"}
        assert httpx.post(url + "/v1/score", json=payload, timeout=60).status_code == 401
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(httpx.post, url + "/v1/score", json=payload, headers=headers, timeout=120)
                       for _ in range(4)]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # wait until all four are inside the server
                text = httpx.get(url + "/metrics", headers=headers, timeout=10).text
                if metric_value(text, "miescore_inflight_requests") >= 5:  # four scoring requests + this one
                    break
                time.sleep(0.02)
            assert metric_value(text, "miescore_inflight_requests") >= 5
            assert metric_value(text, "miescore_samples_scored_total") < 4
            process.send_signal(signal.SIGTERM)
            responses = [f.result(timeout=120) for f in futures]
        assert [r.status_code for r in responses] == [200] * 4
        assert all(set(r.json()) == {"visual_quality", "instruction_following", "attribute_preservation", "overall"}
                   for r in responses)
        process.wait(timeout=60)
        assert process.returncode in (0, -signal.SIGTERM)
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.slow  # building the tiny SpatialReward checkpoint and generating on CPU: ~30-60 s loaded
def test_spatialreward_backend_serves_evaluate_edits(tmp_path, examples):
    """A SpatialReward checkpoint is served through the same API; results equal ``evaluate_edits``."""
    from modeling_miescore.serving.backends import load_backend
    from modeling_miescore.serving.reward_client import RewardClient
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    path = build_tiny_spatialreward(tmp_path / "tiny-sr")
    backend = load_backend(str(path), device="cpu", dtype="float32")
    assert backend.name == "spatialreward"
    edits = [{k: e[k] for k in ("sources", "edited", "instruction")} for e in examples[:2]]
    direct = [r.to_dict() for r in backend.model.evaluate_edits(edits, batch_size=len(edits))]
    with serve_in_background(backend, ServerSettings(max_wait_ms=50)) as server:
        with RewardClient(server.url) as client:
            served = client.score_batch(edits)
            assert client.health()["backend"] == "spatialreward"
    for got, want in zip(served, direct):
        assert got["raw_sc"] == want["raw_sc"] and got["raw_pq"] == want["raw_pq"]
        assert got["failed"] == want["failed"]
        assert (got["reward"] is None and want["reward"] is None) or got["reward"] == pytest.approx(want["reward"])


def test_multipart_uploads_and_their_errors():
    with fake_server() as server:
        url = server.url + "/v1/score"
        sources = [("sources", ("a.png", png_bytes(1), "image/png")), ("sources", ("b.png", png_bytes(2), "image/png"))]
        ok = httpx.post(url, files=sources + [("edited", ("e.png", png_bytes(3), "image/png"))],
                        data={"instruction": "swap them"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["num_sources"] == 2 and ok.json()["edited_mean"] == pytest.approx(image_mean(png_bytes(3)))
        corrupt = httpx.post(url, files=sources + [("edited", ("e.png", b"GIF89a-nope", "image/gif"))],
                             data={"instruction": "swap them"})
        assert corrupt.status_code == 422 and corrupt.json()["error"]["field"] == "edited"
        bad_source = httpx.post(url, files=[sources[0], ("sources", ("x.png", b"", "image/png")),
                                            ("edited", ("e.png", png_bytes(3), "image/png"))],
                                data={"instruction": "swap them"})
        assert bad_source.status_code == 422 and bad_source.json()["error"]["field"] == "sources[1]"
        as_text = httpx.post(url, files=sources, data={"instruction": "swap", "edited": "not a file"})
        assert as_text.status_code == 422 and as_text.json()["error"]["field"] == "edited"
        missing = httpx.post(url, files=sources, data={"instruction": "swap"})
        assert missing.status_code == 422 and missing.json()["error"]["field"] == "edited"
        unknown = httpx.post(url, files=sources + [("edited", ("e.png", png_bytes(3), "image/png"))],
                             data={"instruction": "swap", "extra": "1"})
        assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "extra"
        assert len(server.scorer.batches) == 1
