"""ChatClient against a real HTTP server on 127.0.0.1 that plays a script of canned answers."""

from __future__ import annotations

import email.utils
import json
import threading
import time

import pytest
from local_http import ScriptedHTTPServer
from PIL import Image

from modeling_miescore.judges.chat_client import ChatClient, ChatError, image_to_data_url, user_message


def completion(text: str) -> dict:
    return {"id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


OK = (200, completion("hello"), None, 0)


def test_canned_answer_request_body_and_no_auth_without_key(monkeypatch):
    monkeypatch.delenv("MIE_TEST_KEY", raising=False)
    with ScriptedHTTPServer([OK]) as server, ChatClient(server.url, "judge-1", api_key_env="MIE_TEST_KEY") as client:
        text = client.chat([{"role": "user", "content": "hi"}], temperature=0.3, max_tokens=7, top_p=0.9)
    assert text == "hello"
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["body"] == {"model": "judge-1", "messages": [{"role": "user", "content": "hi"}],
                               "temperature": 0.3, "max_tokens": 7, "top_p": 0.9}
    assert "authorization" not in {k.lower() for k in request["headers"]}


def test_api_key_sent_as_bearer_but_never_shown(monkeypatch, caplog):
    monkeypatch.setenv("MIE_TEST_KEY", "sk-secret-123")
    script = [(500, {"error": "boom"}, None, 0), OK]
    with ScriptedHTTPServer(script) as server:
        client = ChatClient(server.url + "/", "m", api_key_env="MIE_TEST_KEY", backoff=0.01)
        with caplog.at_level("DEBUG"):
            assert client.chat([{"role": "user", "content": "hi"}]) == "hello"
        client.close()
    assert [r["headers"].get("Authorization") for r in server.requests] == ["Bearer sk-secret-123"] * 2
    assert "sk-secret" not in repr(client) and "api_key=set" in repr(client)
    assert "sk-secret" not in caplog.text


def test_429_honours_retry_after_then_succeeds():
    script = [(429, {"error": "slow down"}, {"Retry-After": "0.3"}, 0), OK]
    with ScriptedHTTPServer(script) as server, ChatClient(server.url, "m", backoff=0.0) as client:
        start = time.perf_counter()
        assert client.chat([{"role": "user", "content": "x"}]) == "hello"
        elapsed = time.perf_counter() - start
    assert len(server.requests) == 2
    assert 0.28 <= elapsed < 3.0  # waited the server's 0.3 s although backoff is 0


def test_429_honours_retry_after_as_an_http_date():
    """``Retry-After: <HTTP date>`` (RFC 9110 sec. 10.2.3): the client waits until that time, not its backoff."""
    when = time.time() + 1.6  # an HTTP date has whole seconds: the wait is between 0.6 and 1.6 s
    script = [(503, {"error": "busy"}, {"Retry-After": email.utils.formatdate(when, usegmt=True)}, 0), OK]
    with ScriptedHTTPServer(script) as server, ChatClient(server.url, "m", backoff=0.0) as client:
        assert client.chat([{"role": "user", "content": "x"}]) == "hello"
    first, second = server.requests
    assert 0.5 <= second["time"] - first["time"] < 3.0


def test_retry_after_is_capped_by_max_backoff():
    script = [(503, {"error": "busy"}, {"Retry-After": "120"}, 0), OK]
    with ScriptedHTTPServer(script) as server, ChatClient(server.url, "m", max_backoff=0.05) as client:
        start = time.perf_counter()
        assert client.chat([{"role": "user", "content": "x"}]) == "hello"
        assert time.perf_counter() - start < 2.0


def test_persistent_500_raises_http_error_after_retries():
    with ScriptedHTTPServer([(500, {"error": "internal"}, None, 0)]) as server, \
            ChatClient(server.url, "m", max_retries=2, backoff=0.01) as client:
        with pytest.raises(ChatError) as info:
            client.chat([{"role": "user", "content": "x"}])
    assert info.value.kind == "http" and info.value.status == 500 and info.value.attempts == 3
    assert "internal" in str(info.value)
    assert len(server.requests) == 3


def test_400_is_not_retried():
    with ScriptedHTTPServer([(400, {"error": "bad image"}, None, 0)]) as server, \
            ChatClient(server.url, "m", max_retries=3, backoff=0.01) as client:
        with pytest.raises(ChatError) as info:
            client.chat([{"role": "user", "content": "x"}])
    assert (info.value.kind, info.value.status, len(server.requests)) == ("http", 400, 1)


@pytest.mark.parametrize("body", [b"{not json", json.dumps({"choices": []}).encode(),
                                  json.dumps({"choices": [{"message": {"content": None}}]}).encode()])
def test_malformed_body_is_bad_response_without_retry(body):
    with ScriptedHTTPServer([(200, body, None, 0)]) as server, \
            ChatClient(server.url, "m", max_retries=2, backoff=0.01) as client:
        with pytest.raises(ChatError) as info:
            client.chat([{"role": "user", "content": "x"}])
    assert (info.value.kind, info.value.status, len(server.requests)) == ("bad_response", 200, 1)


def test_slow_answer_times_out_and_is_retried_boundedly():
    with ScriptedHTTPServer([(200, completion("late"), None, 1.5)]) as server, \
            ChatClient(server.url, "m", timeout=0.3, max_retries=1, backoff=0.01) as client:
        start = time.perf_counter()
        with pytest.raises(ChatError) as info:
            client.chat([{"role": "user", "content": "x"}])
        elapsed = time.perf_counter() - start
    assert info.value.kind == "timeout" and info.value.status is None and info.value.attempts == 2
    assert len(server.requests) == 2
    assert elapsed < 1.5  # two 0.3 s timeouts, not the server's 1.5 s


def test_connection_refused_is_connection_error():
    with ScriptedHTTPServer([OK]) as server:
        url = server.url
    with ChatClient(url, "m", max_retries=1, backoff=0.01, timeout=2.0) as client:
        with pytest.raises(ChatError) as info:
            client.chat([{"role": "user", "content": "x"}])
    assert info.value.kind == "connection" and info.value.attempts == 2


def test_content_parts_answer_and_concurrent_use():
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}
    with ScriptedHTTPServer([(200, parts, None, 0.05)]) as server, ChatClient(server.url, "m") as client:
        results = []
        threads = [threading.Thread(target=lambda: results.append(client.chat([{"role": "user", "content": "x"}])))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
    assert results == ["ab"] * 6 and len(server.requests) == 6


def test_user_message_and_data_url_roundtrip():
    import base64
    import io

    rgba = Image.new("RGBA", (40, 30), (255, 0, 0, 128))
    msg = user_message(["Source image:", rgba, {"type": "text", "text": "done"}])
    assert msg["role"] == "user"
    assert [p["type"] for p in msg["content"]] == ["text", "image_url", "text"]
    url = msg["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (40, 30) and decoded.mode == "RGB"
    small = image_to_data_url(Image.new("RGB", (400, 300)), format="jpeg", max_pixels=1200)
    assert small.startswith("data:image/jpeg;base64,")
    im = Image.open(io.BytesIO(base64.b64decode(small.split(",", 1)[1])))
    assert im.width * im.height <= 1200 and abs(im.width / im.height - 4 / 3) < 0.1
    with pytest.raises(TypeError):
        user_message(["ok", 3])


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="http"):
        ChatClient("127.0.0.1:8000", "m")
    with pytest.raises(ValueError, match="model"):
        ChatClient("http://127.0.0.1:1/v1", "")
