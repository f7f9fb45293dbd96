"""``miescore serve``: the HTTP reward server (:mod:`modeling_miescore.serving.app`). Its limits, timeouts and
batching options are generated from :class:`~modeling_miescore.serving.settings.ServerSettings`, so a setting added
there is an option here without editing this module.
"""

from __future__ import annotations

import ipaddress
import socket
import sys

from .main import COMMAND_HELP, add_device_args, defer_options, quiet_transformers
from ..hub.errors import MIEScoreInputError
from ..serving.backends import load_backend


def _add_settings_options(parser) -> None:
    """One option per field of the declaration, :class:`~modeling_miescore.serving.settings.ServerSettings`."""
    from ..serving.settings import ServerSettings  # deferred: loads pydantic
    from ..utils.declared_settings import add_setting_options, env_name  # deferred: loads pydantic

    limits = parser.add_argument_group(
        "server settings", "Limits, timeouts and batching (ServerSettings). An option not given is read from the "
                           f"environment variable {ServerSettings.ENV_PREFIX}<OPTION> when set (e.g. "
                           f"{env_name(ServerSettings, 'max_batch')}=32 for --max-batch 32), else it takes its "
                           "default.")
    add_setting_options(limits, ServerSettings)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help=COMMAND_HELP["serve"],
        description="Serve a MIEScore (or SpatialReward) checkpoint over HTTP: POST /v1/score, "
                    "POST /v1/score_groups, GET /health, GET /metrics.")
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub repo id")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; use 0.0.0.0 with --api-key-env)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one; default 8000)")
    add_device_args(parser)
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    defer_options(parser, _add_settings_options)  # pydantic is imported only when `serve` is parsed
    parser.set_defaults(func=cmd_serve)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise MIEScoreInputError(f"cannot listen on {host}:{port} ({err.strerror}); pick another --port "
                                 "(0 picks a free one) or stop the process using it") from None
    sock.set_inheritable(True)
    return sock


def cmd_serve(args) -> int:
    from ..serving.settings import ServerSettings  # deferred: loads pydantic
    from ..utils.declared_settings import SettingsError, env_name, settings_from_options  # deferred: loads pydantic

    try:  # bad values fail first, before the server's imports
        settings = settings_from_options(ServerSettings, args)
    except SettingsError as err:
        raise MIEScoreInputError(str(err)) from None
    if settings.api_key is None and not _is_loopback(args.host):
        print(f"miescore serve: warning: listening on {args.host} without --api-key-env (or "
              f"{env_name(type(settings), 'api_key')}): anyone who can reach this port can use the model",
              file=sys.stderr)
    if not 0 <= args.port <= 65535:
        raise MIEScoreInputError(f"--port {args.port} is not a valid port (0-65535)")
    import uvicorn

    from ..serving.app import create_app  # deferred: loads prometheus_client, pydantic
    from ..serving.app import raise_fd_limit, uvicorn_options  # deferred: start-up
    from ..serving.monitoring import install_log_rate_limit  # deferred: loads prometheus_client

    sock = _bind(args.host, args.port)  # before loading the model: a busy port fails in a second, not minutes
    try:
        quiet_transformers()
        backend = load_backend(args.model, device=args.device, dtype=args.dtype)
        app = create_app(backend, settings)
        service = app.state.service

        class DrainingServer(uvicorn.Server):
            def handle_exit(self, sig, frame):
                service.begin_drain()  # new requests now get 503 while uvicorn waits for in-flight ones
                super().handle_exit(sig, frame)

        raise_fd_limit(settings.max_connections)
        config = uvicorn.Config(app, lifespan="on", log_level=args.log_level, access_log=False,
                                # a little above our own drain deadline, so that our 503s go out first
                                timeout_graceful_shutdown=int(settings.drain_timeout_s) + 2,
                                **uvicorn_options(settings, service.metrics))
        install_log_rate_limit()  # after uvicorn.Config, which (re)configures uvicorn's loggers
        server = DrainingServer(config)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"miescore serve: {backend.describe().get('backend')} model '{args.model}' on http://{shown}:{port} "
              f"(max batch {settings.max_batch}, max wait {settings.max_wait_ms:g} ms)", flush=True)
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
