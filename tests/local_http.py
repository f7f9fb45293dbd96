"""Throwaway threaded HTTP servers on 127.0.0.1 for tests that need a real endpoint (canned answers)."""

from __future__ import annotations

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


class ScriptedHTTPServer(LocalHTTPServer):
    """Answers every POST from a script: each entry is ``(status, body, headers, delay_s)``; ``body`` is bytes
    or a JSON-serialisable value, ``headers`` a dict or None.

    The last entry repeats once the script is exhausted. Every request is recorded in ``requests`` as
    ``{"path", "headers", "body" (parsed JSON), "time" (time.monotonic() on arrival)}``.
    """

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                           "body": json.loads(raw or b"null"), "time": time.monotonic()})
                    index = min(len(outer.requests) - 1, len(outer.script) - 1)
                    status, body, headers, delay = outer.script[index]
                if delay:
                    time.sleep(delay)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

        super().__init__(Handler)
