"""A throwaway threaded HTTP server on 127.0.0.1 for tests that need a real endpoint (canned answers)."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class LocalHTTPServer:
    """Serves ``handler`` on an ephemeral 127.0.0.1 port while used as a context manager; ``url`` ends in /v1."""

    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
