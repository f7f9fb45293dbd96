"""The reward server's limits, timeouts and batching knobs (one :class:`ServerSettings` per server).

With the defaults (``max_request_bytes`` 64 MiB, ``max_image_pixels`` 40 Mpx, ``max_request_pixels`` 128 Mpx) the
worst accepted request stays near 1.1 GB (1.4 GB without a model ``max_pixels``): the body and its decoded files
under 256 MB; one image decoding at most 9 bytes/pixel reduced towards ``max_pixels`` (16 at full size); the kept
RGB images at most 4 B x 128 Mpx = 512 MB. Measured with ``tests/fake_reward_server.py``: 406 MB peak RSS with a
1 Mpx target, 803 MB at full size. ``decode_workers`` bounds how many requests decode at once; the pixel budgets
are checked from the image headers before anything is decoded.

Each setting is declared once, below (:mod:`modeling_miescore.utils.declared_settings`): ``miescore serve`` builds
one option per field (``request_timeout_s`` -> ``--request-timeout``) and reads ``MIESCORE_SERVE_<OPTION>`` for an
option not given; ``ServerSettings(...)`` in Python checks the same bounds and never reads the environment.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..hub.processing_miescore import MAX_INSTRUCTION_CHARS
from ..utils.declared_settings import DeclaredSettings

__all__ = ["ServerSettings"]

# MAX_INSTRUCTION_CHARS (derived from the model's token budget in processing_miescore) is the one instruction
# limit of the server, the Python API, the CLI and the Space. The server may be configured lower, never higher.


class ServerSettings(DeclaredSettings):
    """Limits, timeouts and batching knobs of the reward server (keyword arguments; bad values: ``ValueError``).

    Size limits answer 413 and malformed content 422, always naming the offending field.
    """

    ENV_PREFIX: ClassVar[str] = "MIESCORE_SERVE_"

    max_batch: int = Field(16, gt=0, description="samples per model call")
    # and then, for requests that arrived by then but are still being decoded, up to about one model call more
    # (reward_service.DECODE_GRACE_S)
    max_wait_ms: float = Field(20.0, ge=0, description="longest a sample waits for others to fill its batch")
    max_queue: int = Field(256, gt=0, description="samples waiting for a model call before new requests get 429")
    decode_workers: int = Field(2, gt=0, description="threads that parse and decode requests while the model "
                                                     "runs; each decodes one request at a time")
    max_request_bytes: int = Field(64 * 1024 * 1024, gt=0, description="largest request body, in bytes")
    max_samples_per_request: int = Field(256, gt=0, description="samples in one request")
    max_images_per_request: int = Field(512, gt=0,
                                        description="images in one request (a group's shared sources count once)")
    max_sources_per_sample: int = Field(16, gt=0, description="source images of one sample")
    # 40 Mpx is ~40x the MIEScore paper's 1,048,576-pixel budget per image: no real photo is refused, but a
    # decompression bomb is refused from its header, before decoding.
    max_image_pixels: int = Field(40_000_000, gt=0, description="largest image (width x height, read from its "
                                                                "header) accepted; larger ones get 413")
    # Decoded-pixel budgets (header width x height, summed), checked before decoding: they bound the memory and
    # CPU one request can take (see the module docstring).
    max_sample_pixels: int = Field(96_000_000, gt=0, description="pixel budget of one sample's images (sources + "
                                   "edited), from their headers before decoding; beyond it 413")
    max_request_pixels: int = Field(128_000_000, gt=0, description="pixel budget of one request's images (shared "
                                    "sources once); beyond it 413. With the defaults the worst accepted request "
                                    "needs about 1.1 GB")
    max_instruction_chars: int = Field(MAX_INSTRUCTION_CHARS, gt=0, le=MAX_INSTRUCTION_CHARS, description=(
        f"longest instruction, in characters; at most the model's limit ({MAX_INSTRUCTION_CHARS})"))
    request_timeout_s: float = Field(300.0, gt=0, description="seconds a request may wait for its scores (504)")
    body_timeout_s: float = Field(30.0, gt=0, description="seconds to receive a request body (408; slow or "
                                                          "stalled clients)")
    header_timeout_s: float = Field(10.0, gt=0, description="seconds from connecting (or from the first byte of "
                                    "the next request) to the end of the request headers; slower connections are "
                                    "closed")
    keep_alive_timeout_s: float = Field(5.0, gt=0,
                                        description="seconds an idle connection stays open between requests")
    # also kept below the process's file limit (app.connection_limits)
    max_connections: int = Field(1000, gt=0, description="open connections; new ones beyond it get 503 and are "
                                 "closed. The open-file limit is raised to fit it where allowed, otherwise the "
                                 "cap is lowered to fit the limit")
    drain_timeout_s: float = Field(30.0, gt=0, description="seconds queued work gets to finish on shutdown (then "
                                                           "503s)")
    retry_after_s: int = Field(1, ge=0, description="seconds a client is told to wait (Retry-After) with a 429 "
                                                    "or 503")
    api_key: str | None = Field(None, min_length=1, repr=False, json_schema_extra={"secret": True}, description=(
        "require 'Authorization: Bearer <key>' on /v1/* and /metrics, and without it /health says only ok / "
        "draining (default: no key, no authentication)"))
    public_metrics: bool = Field(False, description="with an API key: serve /metrics without it (e.g. to a "
                                                    "Prometheus scraper on a private network)")
