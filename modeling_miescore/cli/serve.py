"""``miescore serve``: the HTTP reward server (see :mod:`modeling_miescore.serving.app`).

On SIGTERM / Ctrl-C the server drains: new requests get 503, queued work finishes (up to
``--drain-timeout`` s), every accepted request is answered, then the process exits.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys

from .main import add_device_args, number_arg
from ..image_io import MIEScoreInputError
from ..serving.settings import MAX_INSTRUCTION_CHARS, ServerSettings

_positive_int = number_arg(int, minimum=1)
_positive_float = number_arg(float, minimum=0.0)


# (flag, ServerSettings field, type, help); every flag's help ends with its default, read from ServerSettings.
_SETTING_FLAGS = (
    ("--max-batch", "max_batch", _positive_int, "samples per model call"),
    ("--max-wait-ms", "max_wait_ms", _positive_float, "longest a sample waits for others to fill its batch"),
    ("--max-queue", "max_queue", _positive_int, "samples waiting before new requests get 429"),
    ("--decode-workers", "decode_workers", _positive_int,
     "threads that parse and decode requests while the model runs; each decodes one request at a time"),
    ("--max-request-bytes", "max_request_bytes", _positive_int, "largest request body, in bytes"),
    ("--max-samples-per-request", "max_samples_per_request", _positive_int, "samples in one request"),
    ("--max-images-per-request", "max_images_per_request", _positive_int,
     "images in one request (a group's shared sources count once)"),
    ("--max-image-pixels", "max_image_pixels", _positive_int,
     "largest image (width x height, read from its header) accepted; larger ones get 413"),
    ("--max-sample-pixels", "max_sample_pixels", _positive_int,
     "pixel budget of one sample's images (sources + edited), from their headers before decoding; beyond it 413"),
    ("--max-request-pixels", "max_request_pixels", _positive_int,
     "pixel budget of one request's images (shared sources once); beyond it 413. With the defaults the worst "
     "accepted request needs about 1.1 GB"),
    ("--max-instruction-chars", "max_instruction_chars", _positive_int,
     f"longest instruction; at most the model's limit ({MAX_INSTRUCTION_CHARS})"),
    ("--request-timeout", "request_timeout_s", _positive_float, "seconds a request may wait for its scores (504)"),
    ("--body-timeout", "body_timeout_s", _positive_float, "seconds to receive a request body (408)"),
    ("--header-timeout", "header_timeout_s", _positive_float,
     "seconds from connecting (or from the first byte of the next request) to the end of the request headers; "
     "slower connections are closed"),
    ("--keep-alive-timeout", "keep_alive_timeout_s", _positive_float,
     "seconds an idle connection stays open between requests"),
    ("--max-connections", "max_connections", _positive_int,
     "open connections; new ones beyond it get 503 and are closed. The open-file limit is raised to fit it "
     "where allowed, otherwise the cap is lowered to fit the limit"),
    ("--drain-timeout", "drain_timeout_s", _positive_float, "seconds queued work gets to finish on shutdown"),
)


def register(subparsers) -> None:
    defaults = ServerSettings()
    parser = subparsers.add_parser(
        "serve", help="run the HTTP reward server (dynamic batching, JSON API, Prometheus metrics)",
        description="Serve a MIEScore (or SpatialReward) checkpoint over HTTP: POST /v1/score, "
                    "POST /v1/score_groups, GET /health, GET /metrics.")
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub repo id")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; use 0.0.0.0 with --api-key-env)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one; default 8000)")
    add_device_args(parser)
    for flag, field, kind, text in _SETTING_FLAGS:
        default = getattr(defaults, field)
        shown = f"{default:,}" if isinstance(default, int) and default >= 100_000 else f"{default:g}"
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default {shown})")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="require 'Authorization: Bearer <key>' on /v1/* and /metrics, the key read from this "
                             "environment variable (never from the command line, where other users could read "
                             "it); without the key /health says only ok / draining")
    parser.add_argument("--public-metrics", action="store_true",
                        help="with --api-key-env: serve /metrics without the key (e.g. to a Prometheus scraper "
                             "on a private network)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
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


def _settings_from_args(args, api_key: str | None) -> ServerSettings:
    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field, _, _ in _SETTING_FLAGS}
    try:
        return ServerSettings(**values, api_key=api_key, public_metrics=args.public_metrics)
    except ValueError as err:
        raise MIEScoreInputError(str(err)) from None


def cmd_serve(args) -> int:
    import uvicorn

    from ..serving.app import create_app
    from ..serving.backends import load_backend
    from ..serving.connection_guard import raise_fd_limit, uvicorn_options
    from ..serving.log_rate_limit import install_log_rate_limit

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise MIEScoreInputError(f"--api-key-env {args.api_key_env}: that environment variable is unset or "
                                     "empty; export it with the key clients will send")
    elif not _is_loopback(args.host):
        print(f"miescore serve: warning: listening on {args.host} without --api-key-env: anyone who can reach "
              "this port can use the model", file=sys.stderr)
    if not 0 <= args.port <= 65535:
        raise MIEScoreInputError(f"--port {args.port} is not a valid port (0-65535)")
    settings = _settings_from_args(args, api_key)

    sock = _bind(args.host, args.port)  # before loading the model: a busy port fails in a second, not minutes
    try:
        from .main import _quiet_transformers

        _quiet_transformers()
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
