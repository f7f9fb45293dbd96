"""``miescore serve``: the HTTP reward server (see :mod:`modeling_miescore.serving.app`).

On SIGTERM / Ctrl-C the server drains: new requests get 503, queued work finishes (up to
``--drain-timeout`` s), every accepted request is answered, then the process exits.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys

from .main import number_arg
from ..image_io import MIEScoreInputError

MiB = 1024 * 1024


_positive_int = number_arg(int, minimum=1)
_positive_float = number_arg(float, minimum=0.0)


def register(subparsers) -> None:
    from ..serving.settings import MAX_INSTRUCTION_CHARS, ServerSettings

    defaults = ServerSettings()
    parser = subparsers.add_parser(
        "serve", help="run the HTTP reward server (dynamic batching, JSON API, Prometheus metrics)",
        description="Serve a MIEScore (or SpatialReward) checkpoint over HTTP: POST /v1/score, "
                    "POST /v1/score_groups, GET /health, GET /metrics.")
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub repo id")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; use 0.0.0.0 with --api-key-env)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one; default 8000)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="weights dtype (default: bfloat16 on GPU, float32 on CPU)")
    parser.add_argument("--max-batch", type=_positive_int, default=defaults.max_batch,
                        help=f"samples per model call (default {defaults.max_batch})")
    parser.add_argument("--max-wait-ms", type=_positive_float, default=defaults.max_wait_ms,
                        help=f"longest a sample waits for others to fill its batch (default {defaults.max_wait_ms:g})")
    parser.add_argument("--max-queue", type=_positive_int, default=defaults.max_queue,
                        help=f"samples waiting before new requests get 429 (default {defaults.max_queue})")
    parser.add_argument("--decode-workers", type=_positive_int, default=defaults.decode_workers,
                        help="threads that parse and decode requests while the model runs; each decodes one "
                             f"request at a time (default {defaults.decode_workers})")
    _add_request_limits(parser, defaults, MAX_INSTRUCTION_CHARS)
    _add_connection_limits(parser, defaults)
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="require 'Authorization: Bearer <key>' on /v1/* and /metrics, the key read from this "
                             "environment variable (never from the command line, where other users could read "
                             "it); without the key /health says only ok / draining")
    parser.add_argument("--public-metrics", action="store_true",
                        help="with --api-key-env: serve /metrics without the key (e.g. to a Prometheus scraper "
                             "on a private network)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=cmd_serve)


def _add_request_limits(parser, defaults, max_instruction_chars: int) -> None:
    parser.add_argument("--max-request-bytes", type=_positive_int, default=defaults.max_request_bytes,
                        help=f"largest request body (default {defaults.max_request_bytes // MiB} MiB)")
    parser.add_argument("--max-samples-per-request", type=_positive_int, default=defaults.max_samples_per_request,
                        help=f"default {defaults.max_samples_per_request}")
    parser.add_argument("--max-images-per-request", type=_positive_int, default=defaults.max_images_per_request,
                        help=f"a group's shared sources count once (default {defaults.max_images_per_request})")
    parser.add_argument("--max-image-pixels", type=_positive_int, default=defaults.max_image_pixels,
                        help="largest image (width x height, read from its header) accepted; larger ones get 413 "
                             f"(default {defaults.max_image_pixels:,})")
    parser.add_argument("--max-sample-pixels", type=_positive_int, default=defaults.max_sample_pixels,
                        help="budget of one sample's images (sources + edited, from their headers, before "
                             f"decoding); beyond it 413 (default {defaults.max_sample_pixels:,})")
    parser.add_argument("--max-request-pixels", type=_positive_int, default=defaults.max_request_pixels,
                        help="budget of one request's images (shared sources once); beyond it 413. With the "
                             "defaults the worst accepted request needs ~1.1 GB (default "
                             f"{defaults.max_request_pixels:,})")
    parser.add_argument("--max-instruction-chars", type=_positive_int, default=defaults.max_instruction_chars,
                        help=f"longest instruction; at most the model's limit of {max_instruction_chars} "
                             f"(default {defaults.max_instruction_chars})")
    parser.add_argument("--request-timeout", type=_positive_float, default=defaults.request_timeout_s,
                        help=f"seconds a request may wait for its scores before a 504 "
                             f"(default {defaults.request_timeout_s:g})")
    parser.add_argument("--body-timeout", type=_positive_float, default=defaults.body_timeout_s,
                        help=f"seconds to receive a request body before a 408 (default {defaults.body_timeout_s:g})")
    parser.add_argument("--drain-timeout", type=_positive_float, default=defaults.drain_timeout_s,
                        help=f"seconds queued work gets to finish on shutdown (default {defaults.drain_timeout_s:g})")


def _add_connection_limits(parser, defaults) -> None:
    parser.add_argument("--header-timeout", type=_positive_float, default=defaults.header_timeout_s,
                        help="seconds from connecting (or from the first byte of the next request) to the end of "
                             "the request headers; slower connections are closed (default "
                             f"{defaults.header_timeout_s:g})")
    parser.add_argument("--keep-alive-timeout", type=_positive_float, default=defaults.keep_alive_timeout_s,
                        help=f"seconds an idle connection stays open between requests "
                             f"(default {defaults.keep_alive_timeout_s:g})")
    parser.add_argument("--max-connections", type=_positive_int, default=defaults.max_connections,
                        help="open connections; new ones beyond it get 503 and are closed. The open-file limit "
                             "is raised to fit it where allowed, or the cap lowered to fit the limit "
                             f"(default {defaults.max_connections})")


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


def _settings_from_args(args, api_key: str | None):
    from ..serving.settings import ServerSettings

    try:
        return ServerSettings(
            max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
            decode_workers=args.decode_workers, max_request_bytes=args.max_request_bytes,
            max_samples_per_request=args.max_samples_per_request, max_images_per_request=args.max_images_per_request,
            max_image_pixels=args.max_image_pixels, max_sample_pixels=args.max_sample_pixels,
            max_request_pixels=args.max_request_pixels, max_instruction_chars=args.max_instruction_chars,
            request_timeout_s=args.request_timeout, body_timeout_s=args.body_timeout,
            header_timeout_s=args.header_timeout, keep_alive_timeout_s=args.keep_alive_timeout,
            max_connections=args.max_connections, drain_timeout_s=args.drain_timeout, api_key=api_key,
            public_metrics=args.public_metrics)
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
