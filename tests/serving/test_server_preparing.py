"""The reward server's preparing step: a backend's work before the model (``ScorerBackend.prepare``) runs on
the preparing thread, overlapping the previous batch's model call; the model thread runs only the model.

Servers run in-process on 127.0.0.1 with an ephemeral port; every network wait is bounded.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from modeling_miescore.serving.backends import MIEScoreBackend, ScorerBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.serving.settings import ServerSettings
from test_server import pil_to_b64, one_payload


class PreparingBackend(ScorerBackend):
    """Records where and when each batch is prepared and scored; the model call takes ``delay`` seconds.
    Preparing a batch that holds "boom" fails; scoring "boom" alone fails too."""

    prepares = True

    def __init__(self, delay: float):
        self.delay = delay
        self.events: list[tuple[str, tuple, str, float]] = []
        self.alone: list[str] = []

    def _record(self, what: str, names: tuple):
        self.events.append((what, names, threading.current_thread().name, time.monotonic()))

    def prepare(self, samples, group_ids=None):
        names = tuple(s.instruction for s in samples)
        self._record("prepare", names)
        if "boom" in names:
            raise ValueError("cannot prepare boom")

        def call():
            self._record("start", names)
            time.sleep(self.delay)
            self._record("end", names)
            return [{"instruction": name} for name in names]

        return call

    def score_samples(self, samples):
        [sample] = samples  # only the fallback scores samples one by one
        self.alone.append(sample.instruction)
        if sample.instruction == "boom":
            raise RuntimeError("boom alone")
        return [{"instruction": sample.instruction}]


def _post_all(url: str, payloads: list[dict]) -> list[httpx.Response]:
    def send(payload):
        return httpx.post(url + "/v1/score", json=payload, timeout=60)

    with ThreadPoolExecutor(len(payloads)) as pool:
        return list(pool.map(send, payloads))


def test_a_full_batch_is_prepared_while_the_model_runs_the_previous_one():
    backend = PreparingBackend(delay=0.6)
    settings = ServerSettings(max_batch=2, max_wait_ms=1)
    with serve_in_background(backend, settings) as server:
        payloads = [one_payload(i, instruction=f"edit {i}") for i in range(6)]
        responses = _post_all(server.url, payloads)
    assert [r.json()["instruction"] for r in responses] == [p["instruction"] for p in payloads]
    events = backend.events
    assert {thread for what, _, thread, _ in events if what == "prepare"} <= {"miescore-prepare_0"}
    assert {thread for what, _, thread, _ in events if what != "prepare"} == {"miescore-model_0"}
    calls = [(names, when) for what, names, _, when in events if what in ("start", "end")]
    starts, ends = calls[0::2], calls[1::2]
    assert [names for names, _ in starts] == [names for names, _ in ends]  # one model call at a time
    assert all(start >= end for (_, start), (_, end) in zip(starts[1:], ends))
    prepared_at = {names: when for what, names, _, when in events if what == "prepare"}
    # some batch was prepared before the model finished the batch before it
    overlapped = [names for (names, _), (_, previous_end) in zip(starts[1:], ends) if prepared_at[names] < previous_end]
    assert overlapped, events
    assert sum(len(names) for names, _ in starts) == 6 and max(len(names) for names, _ in starts) == 2


def test_a_batch_whose_preparation_fails_is_scored_sample_by_sample():
    backend = PreparingBackend(delay=0.0)
    with serve_in_background(backend, ServerSettings(max_batch=8, max_wait_ms=300)) as server:
        payloads = [one_payload(i, instruction="fine") for i in range(2)] + [one_payload(9, instruction="boom")]
        responses = _post_all(server.url, payloads)
    assert [r.status_code for r in responses] == [200, 200, 500]
    assert "boom alone" in responses[2].json()["error"]["message"]
    assert sorted(backend.alone) == ["boom", "fine", "fine"]


def test_miescore_backend_prepares_off_the_model_thread(tiny_miescore, examples, monkeypatch):
    """With a MIEScore checkpoint the model thread runs forward passes only: tokenising and image
    preprocessing (``prepare_inputs``) run on the preparing thread, and the scores are the model's."""
    from modeling_miescore.hub import modeling_miescore

    threads = {"prepare_inputs": set(), "forward": set()}
    prepare_inputs, forward = modeling_miescore.prepare_inputs, tiny_miescore.backbone.forward

    def recording_prepare_inputs(*args, **kwargs):
        threads["prepare_inputs"].add(threading.current_thread().name)
        return prepare_inputs(*args, **kwargs)

    def recording_forward(*args, **kwargs):
        threads["forward"].add(threading.current_thread().name)
        return forward(*args, **kwargs)

    monkeypatch.setattr(modeling_miescore, "prepare_inputs", recording_prepare_inputs)
    monkeypatch.setattr(tiny_miescore.backbone, "forward", recording_forward)
    edit = examples[0]
    expected = tiny_miescore.score(edit["sources"], edit["edited"], edit["instruction"])
    threads["prepare_inputs"].clear()
    threads["forward"].clear()
    backend = MIEScoreBackend(tiny_miescore)
    assert backend.prepares
    with serve_in_background(backend, ServerSettings(max_wait_ms=20)) as server:
        got = httpx.post(server.url + "/v1/score", timeout=120, json={
            "sources": [pil_to_b64(s) for s in edit["sources"]], "edited": pil_to_b64(edit["edited"]),
            "instruction": edit["instruction"]})
    assert got.status_code == 200, got.text
    assert got.json() == pytest.approx(expected, abs=1e-4)
    assert threads == {"prepare_inputs": {"miescore-prepare_0"}, "forward": {"miescore-model_0"}}
