"""Bounds on endpoint answers (issue 22, items 2, 3 and 10), against the deliberately bad OpenAI-compatible server
of ``tests/local_http.py``: compression bombs and huge chunked bodies stop at the byte limit (never inflated
whole, never cached, not retried), a trickling body or slow headers stop at the total deadline and are retried as
the retry policy says, and credentials never appear in messages. The full-size figures (a 408 KB gzip answer of
400 MiB, a 1 byte/s answer with ``--timeout 3``) are measured by ``benchmarks/endpoint_limits.py``."""

from __future__ import annotations

import json
import re
import time

import pytest
from local_http import (BadChatServer, bomb_reply, chunked_reply, echo_auth_reply, raw_reply, slow_headers_reply,
                        text_reply, trickle_reply)

from modeling_miescore.judges.call_cache import CallCache
from modeling_miescore.judges.call_engine import CallEngine, ChatRequest
from modeling_miescore.judges.chat_backends import OpenAIChatBackend, parse_judge_spec
from modeling_miescore.judges.chat_client import ChatClient, ChatError

MESSAGES = [{"role": "user", "content": "rate it"}]
MiB = 1 << 20


def _memory_kib() -> dict:
    status = open("/proc/self/status").read()
    return {key: int(re.search(rf"{key}:\s+(\d+)", status).group(1)) for key in ("VmRSS", "VmHWM")}


def _peak_extra_mib(call) -> float:
    """MiB of resident memory that ``call()`` needed beyond what the process held before (Linux)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the high-water mark restarts at the current RSS
    before = _memory_kib()["VmRSS"]
    call()
    return (_memory_kib()["VmHWM"] - before) / 1024


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compression_bomb_stops_at_the_limit_and_is_neither_retried_nor_cached(tmp_path, encoding):
    """16 MiB of answer in ~16 KB of gzip: with a 256 KiB limit the client decodes at most ~256 KiB of it."""
    bomb = bomb_reply(16 * MiB, encoding)  # compressed here, outside the measured call
    with BadChatServer(lambda body, index: bomb) as server, \
            CallCache(tmp_path / "calls.sqlite") as cache:
        backend = OpenAIChatBackend(server.url, "m", api_key_env="NO_KEY", max_retries=3, backoff=0.01,
                                    max_answer_bytes=MiB // 4)
        engine = CallEngine(backend, cache=cache)
        results = []
        extra = _peak_extra_mib(lambda: results.extend(engine.run([ChatRequest(["rate it"])])))
        engine.close()
        assert len(cache) == 0
    (result,) = results
    assert result.error_kind == "too_large" and "262144-byte limit after decompression" in result.error
    assert len(server.requests) == 1  # the same request would give the same answer: not retried
    assert engine.usage.as_dict()["totals"]["failed_by_kind"] == {"too_large": 1}
    assert extra < 10, f"decoding the bomb took {extra:.0f} MiB"  # unbounded: > 32 MiB (bytes + str)


def test_a_huge_chunked_body_stops_on_the_wire_and_small_compressed_answers_are_read():
    with BadChatServer(lambda body, index: chunked_reply(16 * MiB)) as server, \
            ChatClient(server.url, "m", api_key_env="NO_KEY", max_answer_bytes=MiB) as client:
        with pytest.raises(ChatError) as info:
            client.complete(MESSAGES)
    assert info.value.kind == "too_large" and "on the wire" in str(info.value)
    for encoding in ("gzip", "deflate", "br"):
        with BadChatServer(lambda body, index: bomb_reply(5000, encoding)) as server, \
                ChatClient(server.url, "m", api_key_env="NO_KEY", max_answer_bytes=MiB) as client:
            assert client.complete(MESSAGES).text == "A" * 5000
    announced = json.dumps({"choices": [{"message": {"content": "x" * 3000}}]}).encode()
    with BadChatServer(lambda body, index: raw_reply(announced)) as server, \
            ChatClient(server.url, "m", api_key_env="NO_KEY", max_answer_bytes=2000) as client:
        with pytest.raises(ChatError, match="by its Content-Length"):
            client.complete(MESSAGES)


def test_a_corrupt_or_unknown_encoding_is_a_bad_response():
    for headers in ({"Content-Encoding": "gzip"}, {"Content-Encoding": "zstd-custom"}):
        with BadChatServer(lambda body, index: raw_reply(b"not compressed", headers=headers)) as server, \
                ChatClient(server.url, "m", api_key_env="NO_KEY", max_retries=2) as client:
            with pytest.raises(ChatError) as info:
                client.complete(MESSAGES)
        assert info.value.kind == "bad_response" and len(server.requests) == 1


def test_a_trickling_body_fails_at_the_total_deadline_and_is_retried_as_the_policy_says():
    """One byte a second: each read returns in time, so a per-read timeout never fires (before: ~200 s)."""
    with BadChatServer(lambda body, index: trickle_reply(bytes_per_second=20)) as server, \
            ChatClient(server.url, "m", api_key_env="NO_KEY", timeout=0.6, max_retries=1, backoff=0.01) as client:
        start = time.monotonic()
        with pytest.raises(ChatError) as info:
            client.complete(MESSAGES)
        elapsed = time.monotonic() - start
    assert info.value.kind == "timeout" and info.value.attempts == 2 and len(server.requests) == 2
    assert 1.1 <= elapsed < 3.0  # two attempts of 0.6 s; the body alone takes ~10 s at 20 bytes/s
    assert "within 0.6 s" in str(info.value)


def test_slow_headers_fail_at_the_total_deadline():
    with BadChatServer(lambda body, index: slow_headers_reply(seconds_per_byte=0.05)) as server, \
            ChatClient(server.url, "m", api_key_env="NO_KEY", timeout=0.6, max_retries=0) as client:
        start = time.monotonic()
        with pytest.raises(ChatError) as info:
            client.complete(MESSAGES)
        elapsed = time.monotonic() - start
    assert info.value.kind == "timeout" and 0.5 <= elapsed < 2.0  # the 4000 header bytes take 200 s


def test_an_unusable_api_key_is_one_clear_error_before_any_request(monkeypatch, tmp_path, capsys):
    from modeling_miescore.cli.main import main

    edits = tmp_path / "edits.jsonl"
    edits.write_text(json.dumps({"id": "a", "sources": ["s.png"], "edited": "e.png", "instruction": "x"}))
    for key, what in (("sk-secret-123\n", "a newline at position 14"), ("sk-sécret", "the character U+00E9")):
        monkeypatch.setenv("MIE_BAD_KEY", key)
        with BadChatServer(lambda body, index: text_reply("{}")) as server:
            with pytest.raises(ValueError) as info:
                ChatClient(server.url, "m", api_key_env="MIE_BAD_KEY")
            if "\n" in key:  # and the command line: exit 2, one line, nothing sent
                status = main(["judge", "--backend", "openai", "--base-url", server.url, "--model", "m", "--input",
                               str(edits), "--output", str(tmp_path / "o.jsonl"), "--api-key-env", "MIE_BAD_KEY"])
                err = capsys.readouterr().err
                assert status == 2 and len(err.strip().splitlines()) == 1 and "$MIE_BAD_KEY" in err
                assert "secret" not in err and not (tmp_path / "o.jsonl").exists()
        assert what in str(info.value) and "$MIE_BAD_KEY" in str(info.value) and "secret" not in str(info.value)
        assert "sécret" not in str(info.value) and server.requests == []


def test_credentials_in_urls_and_keys_never_appear_in_messages(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MIE_GOOD_KEY", "sk-secret-abc")
    with BadChatServer(lambda body, index: echo_auth_reply(401)) as server:
        url = server.url.replace("http://", "http://alice:hunter2@")
        client = ChatClient(server.url, "m", api_key_env="MIE_GOOD_KEY")  # the server echoes the bearer key
        with pytest.raises(ChatError) as info:
            client.complete(MESSAGES)
        client.close()
        anonymous = ChatClient(url, "m", api_key_env="NO_KEY")  # the URL's user:password as Basic auth, echoed
        with pytest.raises(ChatError) as basic:
            anonymous.complete(MESSAGES)
        anonymous.close()
    shown = " ".join([str(info.value), str(basic.value), repr(client), str(parse_judge_spec(f"m@{url}"))])
    assert "Incorrect API key provided: Bearer ***" in str(info.value) and "alice:***@" in shown
    for secret in ("hunter2", "sk-secret-abc", "YWxpY2U6aHVudGVyMg=="):  # the last: base64 of alice:hunter2
        assert secret not in shown
    closed = url.replace(str(server.httpd.server_address[1]), "9")  # nothing listens there
    with ChatClient(closed, "m", max_retries=0, timeout=2) as client:
        with pytest.raises(ChatError) as refused:
            client.complete(MESSAGES)
    assert refused.value.kind == "connection" and "hunter2" not in str(refused.value)
