"""The call engine against a real local HTTP server speaking the chat-completions protocol (scripted answers)."""

from __future__ import annotations

import pytest
from local_http import RoutedChatServer, chat_completion, request_text
from PIL import Image

from modeling_miescore.judges.call_cache import CallCache, CallCacheError
from modeling_miescore.judges.call_engine import CallEngine, ChatRequest, UsageLog, request_key
from modeling_miescore.judges.chat_backends import OpenAIChatBackend, parse_judge_spec
from modeling_miescore.hub.errors import MIEScoreInputError


def _backend(url, **kw):
    kw.setdefault("max_retries", 1)
    kw.setdefault("backoff", 0.01)
    return OpenAIChatBackend(url, "judge-m", api_key_env="NO_SUCH_KEY_ENV", timeout=kw.pop("timeout", 5.0), **kw)


def _echo(body, repeat):
    """Answers 'echo: <last line of the prompt>' with usage 10 + 3 tokens, after 50 ms."""
    return 200, chat_completion("echo: " + request_text(body).splitlines()[-1], 10, 3), None, 0.05


def test_answers_in_order_concurrently_cached_and_counted(tmp_path):
    image = Image.new("RGB", (32, 24), (200, 10, 10))
    requests = [ChatRequest(["look", image, f"item {i}"], max_tokens=20, stage="s1") for i in range(12)]
    with RoutedChatServer(_echo) as server:
        with CallCache(tmp_path / "calls.sqlite") as cache:
            engine = CallEngine(_backend(server.url, max_concurrency=4), cache=cache,
                                usage=UsageLog(prices={"judge-m": (1.0, 2.0)}))
            results = engine.run(requests)
            again = engine.run(requests)
            engine.close()
        sent = len(server.requests)
        peak = server.peak
    assert [r.text for r in results] == [f"echo: item {i}" for i in range(12)]
    assert all(r.ok and not r.cached and r.prompt_tokens == 10 for r in results)
    assert sent == 12 and 2 <= peak <= 4  # concurrent, bounded
    assert [r.text for r in again] == [r.text for r in results] and all(r.cached for r in again)
    body = server.requests[0]["body"]
    assert body["model"] == "judge-m" and body["max_tokens"] == 20 and body["temperature"] == 0.0
    assert [p["type"] for p in body["messages"][0]["content"]] == ["text", "image_url", "text"]
    totals = engine.usage.as_dict()["totals"]
    assert (totals["requests"], totals["sent"], totals["cache_hits"], totals["ok"]) == (24, 12, 12, 12)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (120, 36)
    assert totals["cost_usd"] == pytest.approx(120 / 1000 * 1.0 + 36 / 1000 * 2.0)
    with CallCache(tmp_path / "calls.sqlite") as cache:  # a new process would see the same answers
        assert len(cache) == 12
        assert cache.totals() == {"judge-m / s1": {"answers": 12, "prompt_tokens": 120, "completion_tokens": 36}}


def test_failures_are_results_not_cached_and_retried_on_the_next_run(tmp_path):
    def script(body, repeat):
        text = request_text(body)
        if "rate" in text:  # 429 with Retry-After, then fine
            return (429, {"error": "slow down"}, {"Retry-After": "0.2"}, 0) if repeat == 0 else \
                (200, chat_completion("after 429", 5, 1), None, 0)
        if "slow" in text:
            return 200, chat_completion("late"), None, 1.0
        if "refuse" in text:
            return 200, chat_completion("", refusal="I can't help with that."), None, 0
        if "garbage" in text:
            return 200, b"{not json", None, 0
        if "broken" in text:
            return 500, {"error": "internal"}, None, 0
        return 200, chat_completion("fine"), None, 0

    prompts = ["rate", "slow", "refuse", "garbage", "broken", "plain"]
    with RoutedChatServer(script) as server, CallCache(tmp_path / "c.sqlite") as cache:
        engine = CallEngine(_backend(server.url, timeout=0.3, max_concurrency=6), cache=cache)
        results = engine.run([ChatRequest([p]) for p in prompts])
        first = len(server.requests)
        rerun = engine.run([ChatRequest([p]) for p in prompts])
        second = len(server.requests) - first
    by = dict(zip(prompts, results))
    assert by["rate"].text == "after 429" and by["plain"].text == "fine"
    assert (by["slow"].error_kind, by["refuse"].error_kind, by["garbage"].error_kind, by["broken"].error_kind) == \
        ("timeout", "refusal", "bad_response", "http")
    assert by["refuse"].error.startswith("ChatError[refusal]") and "can't help" in by["refuse"].error
    assert all(by[p].text is None for p in ("slow", "refuse", "garbage", "broken"))
    # rate: 2 requests; slow: 2 (one retry after the timeout); broken: 2; refuse, garbage, plain: 1 each
    assert first == 9
    usage = engine.usage.as_dict()["totals"]
    assert usage["retries"] >= 3 and usage["failed_by_kind"]["timeout"] == 2  # counted in both runs
    # the rerun sends only the failed requests again (answers, including the one after a 429, are cached)
    assert second == 6 and [r.cached for r in rerun] == [True, False, False, False, False, True]


def test_identical_requests_are_sent_once():
    with RoutedChatServer(_echo) as server:
        engine = CallEngine(_backend(server.url, max_concurrency=3))
        results = engine.run([ChatRequest(["same"]), ChatRequest(["other"]), ChatRequest(["same"])])
        assert len(server.requests) == 2
    assert [r.text for r in results] == ["echo: same", "echo: other", "echo: same"]
    assert results[2].cached and engine.usage.as_dict()["totals"]["duplicates"] == 1


def test_request_key_hashes_pixels_and_settings_not_stage_or_url():
    identity = {"kind": "openai", "model": "m", "image_format": "PNG", "max_pixels": 100}
    a = Image.new("RGB", (8, 8), (1, 2, 3))
    b = Image.new("RGB", (8, 8), (1, 2, 3))  # another object, same pixels
    c = Image.new("RGB", (8, 8), (1, 2, 4))
    key = request_key(identity, ChatRequest(["x", a], stage="one"))
    assert key == request_key(identity, ChatRequest(["x", b], stage="two"))
    assert key != request_key(identity, ChatRequest(["x", c]))
    assert key != request_key(identity, ChatRequest(["x", a], max_tokens=7))
    assert key != request_key(identity, ChatRequest(["x", a], extra={"seed": 1}))
    assert key != request_key({**identity, "image_format": "JPEG"}, ChatRequest(["x", a]))
    assert key != request_key({**identity, "model": "m2"}, ChatRequest(["x", a]))
    with pytest.raises(TypeError, match="request part"):
        request_key(identity, ChatRequest(["x", 3]))


def test_a_file_that_is_not_a_cache_is_a_clear_error(tmp_path):
    bad = tmp_path / "calls.sqlite"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(CallCacheError, match="not a usable call cache"):
        CallCache(bad)
    with pytest.raises(CallCacheError, match="is a directory"):
        CallCache(tmp_path)


def test_judge_specs():
    spec = parse_judge_spec("gpt-5@https://api.openai.com/v1#OPENAI_KEY")
    assert (spec.kind, spec.model, spec.base_url, spec.api_key_env) == \
        ("openai", "gpt-5", "https://api.openai.com/v1", "OPENAI_KEY")
    assert parse_judge_spec("Qwen/Qwen3-VL-8B@http://127.0.0.1:8000/v1").model == "Qwen/Qwen3-VL-8B"
    assert parse_judge_spec("transformers:/ckpt/qwen").model == "/ckpt/qwen"
    for bad in ("gpt-5", "gpt-5@127.0.0.1:8000", "transformers:", "@http://x/v1"):
        with pytest.raises(MIEScoreInputError, match="MODEL@URL|names no model"):
            parse_judge_spec(bad)


def test_transformers_backend_batches_counts_tokens_and_caches(tiny_qwen3vl_path, tmp_path):
    from modeling_miescore.judges.chat_backends import TransformersChatBackend

    backend = TransformersChatBackend(str(tiny_qwen3vl_path), device="cpu", dtype="float32", batch_size=2,
                                      max_pixels=64 * 64 * 4)
    image = Image.new("RGB", (64, 48), (30, 120, 200))
    requests = [ChatRequest(["Source image 1:", image, "Rate it."], max_tokens=4),
                ChatRequest(["Hello"], max_tokens=4), ChatRequest(["Hi", image], max_tokens=3)]
    with CallCache(tmp_path / "t.sqlite") as cache:
        engine = CallEngine(backend, cache=cache)
        results = engine.run(requests)
        again = engine.run(requests)
    assert all(r.ok for r in results)
    # each answer keeps its own request's budget (the third's is 3 in a batch of budget-4 requests)
    assert all(1 <= r.completion_tokens <= q.max_tokens and r.prompt_tokens > 3 for r, q in zip(results, requests))
    assert results[0].prompt_tokens > results[1].prompt_tokens  # the image's tokens are counted
    assert [r.text for r in again] == [r.text for r in results] and all(r.cached for r in again)
    assert engine.usage.as_dict()["totals"]["sent"] == 3


def test_run_together_merges_the_jobs_of_one_engine():
    from modeling_miescore.judges.call_engine import run_together

    calls = []

    class Recording:
        model, batch_size, max_concurrency = "rec", 2, 1

        def identity(self):
            return {"kind": "test", "model": self.model}

        def complete_batch(self, requests):
            from modeling_miescore.judges.chat_client import ChatCompletion

            calls.append([r.parts[0] for r in requests])
            return [ChatCompletion(f"answer to {r.parts[0]}") for r in requests]

    shared, other = CallEngine(Recording()), CallEngine(Recording())
    out = run_together([(shared, [ChatRequest(["a"]), ChatRequest(["b"])]), (other, [ChatRequest(["c"])]),
                        (shared, [ChatRequest(["d"])]), (other, [])])
    assert [[r.text for r in job] for job in out] == [["answer to a", "answer to b"], ["answer to c"],
                                                      ["answer to d"], []]
    assert sorted(map(tuple, calls)) == [("a", "b"), ("c",), ("d",)]  # the shared engine: one run, batches of 2
