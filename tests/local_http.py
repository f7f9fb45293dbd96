"""Throwaway threaded HTTP servers on 127.0.0.1 for tests that need a real endpoint (canned answers):
:class:`LocalHTTPServer` (any handler), :class:`RoutedChatServer` (chat-completions answers chosen by what was
asked), :class:`ScriptedHTTPServer` (answers in arrival order), and the body helpers :func:`chat_completion` and
:func:`request_text`, :func:`request_images`, and :func:`score_groups_answer` (a ``miescore serve``
``/v1/score_groups`` answer, for scripted stand-ins of the reward server)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
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
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw or b"null")
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                           "time": time.monotonic()})
                    index = len(outer.requests) - 1
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
