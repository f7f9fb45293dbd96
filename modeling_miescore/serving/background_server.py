"""A reward server on a background thread of this process (tests, notebooks, a reward server inside a
training job): :func:`serve_in_background` and :class:`BackgroundServer`."""

from __future__ import annotations

import math
import threading
import time

from .app import create_app
from .connection_guard import uvicorn_options
from .log_rate_limit import install_log_rate_limit
from .settings import ServerSettings

__all__ = ["BackgroundServer", "serve_in_background"]


class BackgroundServer:
    """A uvicorn server on a background thread; a context manager (start on enter, graceful stop on exit).

    For an app from :func:`~modeling_miescore.serving.app.create_app`, the connection guard of its settings
    (header timeout, connection cap, keep-alive timeout) applies, as in ``miescore serve``.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, **config_kwargs):
        import uvicorn

        config_kwargs.setdefault("log_level", "warning")
        config_kwargs.setdefault("access_log", False)
        settings = getattr(app.state, "settings", None)
        if settings is not None:
            config_kwargs.setdefault("timeout_graceful_shutdown", int(math.ceil(settings.drain_timeout_s)) + 1)
            service = getattr(app.state, "service", None)
            for key, value in uvicorn_options(settings, getattr(service, "metrics", None)).items():
                config_kwargs.setdefault(key, value)
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", **config_kwargs))
        install_log_rate_limit()  # after uvicorn.Config, which (re)configures uvicorn's loggers
        self.thread = threading.Thread(target=self.server.run, name="miescore-uvicorn", daemon=True)
        self.host = host
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the reward server failed to start (see the log above)")
            if time.monotonic() > deadline:
                self.server.should_exit = True
                raise RuntimeError(f"the reward server did not start within {timeout} s")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout: float = 60.0):
        """Graceful: stop accepting, let in-flight requests finish, then stop (like SIGTERM)."""
        service = getattr(self.app.state, "service", None)
        if service is not None:
            service.begin_drain()
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve_in_background(backend_or_app, settings: ServerSettings | None = None, host: str = "127.0.0.1",
                        port: int = 0, **config_kwargs) -> BackgroundServer:
    """A reward server on a thread, started by ``with`` (or :meth:`BackgroundServer.start`); ``port=0`` picks a
    free port.

    ``backend_or_app``: a :class:`~modeling_miescore.serving.backends.ScorerBackend` (served with ``settings``)
    or an app from :func:`~modeling_miescore.serving.app.create_app`.
    """
    app = backend_or_app if hasattr(backend_or_app, "state") else create_app(backend_or_app, settings)
    return BackgroundServer(app, host=host, port=port, **config_kwargs)
