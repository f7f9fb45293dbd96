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
    from ..serving.settings import ServerSettings

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
    parser.add_argument("--max-request-bytes", type=_positive_int, default=defaults.max_request_bytes,
                        help=f"largest request body (default {defaults.max_request_bytes // MiB} MiB)")
    parser.add_argument("--max-samples-per-request", type=_positive_int, default=defaults.max_samples_per_request)
    parser.add_argument("--max-images-per-request", type=_positive_int, default=defaults.max_images_per_request)
    parser.add_argument("--max-image-pixels", type=_positive_int, default=defaults.max_image_pixels,
                        help="largest image (width x height) accepted; larger ones get 413")
    parser.add_argument("--max-instruction-chars", type=_positive_int, default=defaults.max_instruction_chars)
    parser.add_argument("--request-timeout", type=_positive_float, default=defaults.request_timeout_s,
                        help="seconds a request may wait for its scores before a 504")
    parser.add_argument("--drain-timeout", type=_positive_float, default=defaults.drain_timeout_s,
                        help="seconds queued work gets to finish on shutdown")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="require 'Authorization: Bearer <key>' on /v1/*, the key read from this environment "
                             "variable (never from the command line, where other users could read it)")
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


def cmd_serve(args) -> int:
    import uvicorn

    from ..serving.app import create_app
    from ..serving.backends import load_backend
    from ..serving.settings import ServerSettings

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
    try:
        settings = ServerSettings(
            max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
            max_request_bytes=args.max_request_bytes, max_samples_per_request=args.max_samples_per_request,
            max_images_per_request=args.max_images_per_request, max_image_pixels=args.max_image_pixels,
            max_instruction_chars=args.max_instruction_chars, request_timeout_s=args.request_timeout,
            drain_timeout_s=args.drain_timeout, api_key=api_key)
    except ValueError as err:
        raise MIEScoreInputError(str(err)) from None

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

        config = uvicorn.Config(app, lifespan="on", log_level=args.log_level, access_log=False,
                                # a little above our own drain deadline, so that our 503s go out first
                                timeout_graceful_shutdown=int(settings.drain_timeout_s) + 2)
        server = DrainingServer(config)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"miescore serve: {backend.describe().get('backend')} model '{args.model}' on http://{shown}:{port} "
              f"(max batch {settings.max_batch}, max wait {settings.max_wait_ms:g} ms)", flush=True)
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
