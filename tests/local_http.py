"""Throwaway threaded HTTP servers on 127.0.0.1 for tests that need a real endpoint (canned answers):
:class:`LocalHTTPServer` (any handler), :class:`RoutedChatServer` (chat-completions answers chosen by what was
asked), :class:`ScriptedHTTPServer` (answers in arrival order), :class:`BadChatServer` (a deliberately bad
OpenAI-compatible server: compression bombs, trickling bodies, slow headers, huge chunked bodies and any raw
bytes; the replies are built by :func:`raw_reply`, :func:`text_reply`, :func:`bomb_reply`,
:func:`chunked_reply`, :func:`trickle_reply`, :func:`slow_headers_reply`, :func:`echo_auth_reply`), the
body helpers :func:`chat_completion` and :func:`request_text`, :func:`request_images`, and
:func:`score_groups_answer` (a ``miescore serve`` ``/v1/score_groups`` answer, for scripted stand-ins of the
reward server)."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalHTTPServer:
    """Serves ``handler`` on an ephemeral 127.0.0.1 port while used as a context manager; ``url`` ends in /v1,
    ``origin`` is the same server without a path."""

    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.origin + "/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def chat_completion(text: str, prompt_tokens: int | None = None, completion_tokens: int | None = None,
                    finish_reason: str = "stop", refusal: str | None = None) -> dict:
    """An OpenAI chat-completions response body with one choice (``usage`` only when token counts are given;
    ``refusal`` gives a refusal message without content)."""
    message = {"role": "assistant", "content": None if refusal else text}
    if refusal:
        message["refusal"] = refusal
    body = {"id": "chatcmpl-test", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    if prompt_tokens is not None or completion_tokens is not None:
        body["usage"] = {"prompt_tokens": prompt_tokens or 0, "completion_tokens": completion_tokens or 0,
                         "total_tokens": (prompt_tokens or 0) + (completion_tokens or 0)}
    return body


def request_text(body: dict) -> str:
    """All text parts of a chat-completions request body, joined with newlines."""
    texts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        else:
            texts += [p.get("text", "") for p in content if p.get("type") == "text"]
    return "\n".join(texts)


def request_images(body: dict) -> list:
    """The images of a chat-completions request body (``image_url`` parts with data URLs), as PIL images."""
    import base64
    import io

    from PIL import Image

    images = []
    for message in body.get("messages", []):
        for part in message.get("content") if isinstance(message.get("content"), list) else []:
            if part.get("type") == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                images.append(Image.open(io.BytesIO(data)))
    return images


def score_groups_answer(body: dict, result_for) -> dict:
    """The ``{"results": [...]}`` a ``miescore serve`` replica answers to a ``/v1/score_groups`` body: one
    ``result_for(group, edited_image)`` dict per edited image (``group``: the request's group dict, the image
    decoded to PIL), in order, labelled like the server's (``group`` = the group's position, ``index``)."""
    import base64
    import io

    from PIL import Image

    results = []
    for g, group in enumerate(body.get("groups", [])):
        for e, blob in enumerate(group["edited"]):
            image = Image.open(io.BytesIO(base64.b64decode(blob))).convert("RGB")
            results.append({**result_for(group, image), "group": g, "index": e})
    return {"results": results}


def read_json_body(handler) -> tuple[bytes, object]:
    """The raw bytes of a POST body (Content-Length) and their JSON (None for an empty body)."""
    raw = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
    return raw, json.loads(raw or b"null")


def record_request(requests: list, handler, body) -> int:
    """Append one request's path, headers, JSON body and arrival time (monotonic) to ``requests``; its index."""
    requests.append({"path": handler.path, "headers": dict(handler.headers), "body": body, "time": time.monotonic()})
    return len(requests) - 1


class RoutedChatServer(LocalHTTPServer):
    """Answers every POST with ``answer(body, repeat)`` -> ``(status, body, headers, delay_s)``, where ``body`` is
    the request's parsed JSON and ``repeat`` counts earlier requests with the same body (0 the first time: lets a
    script answer 429 first and 200 on the retry). Unlike :class:`ScriptedHTTPServer` the answer depends on what
    was asked, not on arrival order, so concurrent clients get deterministic answers.

    Records ``requests`` (``{"path", "headers", "body", "time"}``) and ``peak``: the most requests received and not
    yet answered at once (a request whose client timed out counts until its delay is over).
    """

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[dict] = []
        self.seen: dict[str, int] = {}
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw, body = read_json_body(self)
                with outer.lock:
                    index = record_request(outer.requests, self, body)
                    digest = hashlib.sha256(raw).hexdigest()
                    repeat = outer.seen.get(digest, 0)
                    outer.seen[digest] = repeat + 1
                    outer.active += 1
                    outer.peak = max(outer.peak, outer.active)
                try:
                    status, answer, headers, delay = outer.pick(body, repeat, index)
                    if delay:
                        time.sleep(delay)
                    data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                finally:  # before the answer goes out: a client never sees a request of its own still "active"
                    with outer.lock:
                        outer.active -= 1
                try:
                    self.send_response(status)
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        super().__init__(Handler)

    def pick(self, body, repeat: int, index: int):
        """The answer to a request (``index``: its arrival order, from 0); subclasses may pick otherwise."""
        return self.answer(body, repeat)


class ScriptedHTTPServer(RoutedChatServer):
    """Answers every POST from a script: each entry is ``(status, body, headers, delay_s)``; ``body`` is bytes
    or a JSON-serialisable value, ``headers`` a dict or None.

    The last entry repeats once the script is exhausted. Every request is recorded in ``requests`` as
    ``{"path", "headers", "body" (parsed JSON), "time" (time.monotonic() on arrival)}``.
    """

    def __init__(self, script):
        self.script = list(script)
        super().__init__(None)

    def pick(self, body, repeat, index):
        return self.script[min(index, len(self.script) - 1)]


# ------------------------------------------------------------------------------------------ the bad server
#
# A reply is a callable ``reply(handler, stop)`` that writes a whole HTTP response on ``handler.wfile`` (status
# line, headers, body) and returns early once the ``stop`` event is set (the server is shutting down).

_HEAD = b'{"id": "chatcmpl-bad", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": ' \
        b'"assistant", "content": "'
_TAIL = b'"}, "finish_reason": "stop"}]}'


def _write_head(handler, status: int, headers: dict) -> None:
    handler.wfile.write(f"HTTP/1.1 {status} X\r\n".encode())
    for key, value in {"Content-Type": "application/json", **headers}.items():
        handler.wfile.write(f"{key}: {value}\r\n".encode())
    handler.wfile.write(b"\r\n")


def raw_reply(body: bytes, status: int = 200, headers: dict | None = None):
    """``body`` as it is (any bytes: lone-surrogate escapes, 100k-deep nesting, a 400-digit integer...)."""
    def reply(handler, stop):
        _write_head(handler, status, {"Content-Length": str(len(body)), **(headers or {})})
        handler.wfile.write(body)
    return reply


def text_reply(text: str, status: int = 200, **usage):
    """A chat completion whose content is ``text`` (``usage``: prompt_tokens=, completion_tokens=)."""
    return raw_reply(json.dumps(chat_completion(text, **usage)).encode(), status)


@functools.lru_cache(maxsize=4)
def compressed_answer(inflated_bytes: int, encoding: str = "gzip") -> bytes:
    """A chat completion whose content is ``inflated_bytes`` of "A", compressed with ``encoding`` (gzip,
    deflate or br) without ever holding the inflated body (a 400 MiB gzip answer is ~408 KB)."""
    block = b"A" * (1 << 20)
    if encoding == "br":
        import brotli

        packer = brotli.Compressor(quality=5)
        feed, finish = packer.process, packer.finish
    else:
        packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
        feed, finish = packer.compress, packer.flush
    parts = [feed(_HEAD)]
    left = inflated_bytes
    while left > 0:
        parts.append(feed(block[:min(left, len(block))]))
        left -= len(block)
    parts += [feed(_TAIL), finish()]
    return b"".join(parts)


def bomb_reply(inflated_bytes: int, encoding: str = "gzip"):
    """A compression bomb: :func:`compressed_answer` with its ``Content-Encoding``."""
    body = compressed_answer(inflated_bytes, encoding)
    return raw_reply(body, headers={"Content-Encoding": encoding})


def chunked_reply(total_bytes: int, chunk: int = 1 << 16):
    """A chat completion of ``total_bytes`` sent with ``Transfer-Encoding: chunked`` (no length announced)."""
    block = b"A" * chunk

    def reply(handler, stop):
        def send(piece: bytes) -> None:
            handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")

        _write_head(handler, 200, {"Transfer-Encoding": "chunked"})
        send(_HEAD)
        left = total_bytes
        while left > 0 and not stop.is_set():
            send(block[:min(chunk, left)])
            left -= chunk
        send(_TAIL)
        handler.wfile.write(b"0\r\n\r\n")
    return reply


def trickle_reply(bytes_per_second: float = 1.0, text: str = "a slow answer"):
    """A correct answer whose body (its length announced) comes ``bytes_per_second`` bytes a second."""
    body = json.dumps(chat_completion(text)).encode()

    def reply(handler, stop):
        _write_head(handler, 200, {"Content-Length": str(len(body))})
        for i in range(len(body)):
            if stop.wait(1.0 / bytes_per_second):
                return
            handler.wfile.write(body[i:i + 1])
    return reply


def slow_headers_reply(seconds_per_byte: float = 1.0, header_bytes: int = 4000):
    """A status line, then ``header_bytes`` of header sent one byte every ``seconds_per_byte`` (never a body)."""
    def reply(handler, stop):
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(header_bytes):
            if stop.wait(seconds_per_byte):
                return
            handler.wfile.write(b"a")
    return reply


def echo_auth_reply(status: int = 401):
    """An error naming the credentials it was sent, as some APIs do ("Incorrect API key provided: ...")."""
    def reply(handler, stop):
        told = handler.headers.get("Authorization", "")
        body = json.dumps({"error": {"message": f"Incorrect API key provided: {told}; "
                                                f"host {handler.headers.get('Host')}"}}).encode()
        raw_reply(body, status)(handler, stop)
    return reply


class BadChatServer(LocalHTTPServer):
    """A deliberately bad OpenAI-compatible server: every POST is answered by ``answer(body, index)`` -> a reply
    (see the ``*_reply`` builders; ``body`` is the parsed request, ``index`` its arrival order from 0).

    Records ``requests`` (``{"path", "headers", "body", "time"}``) and ``finished``: the replies written to the
    end. Leaving the context sets ``stop``, so that trickling replies end with the server.
    """

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[dict] = []
        self.finished = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                _, body = read_json_body(self)
                with outer.lock:
                    index = record_request(outer.requests, self, body)
                try:
                    outer.answer(body, index)(self, outer.stop)
                    self.wfile.flush()
                    with outer.lock:
                        outer.finished += 1
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        super().__init__(Handler)

    def __exit__(self, *exc):
        self.stop.set()
        super().__exit__(*exc)
