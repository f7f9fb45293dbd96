"""The reward server's limits, timeouts and batching knobs (one :class:`ServerSettings` per server).

Memory of the worst accepted request, with the defaults (``max_request_bytes`` 64 MiB, ``max_image_pixels``
40 Mpx, ``max_request_pixels`` 128 Mpx), stays well under 2 GB:

- body: at most 64 MiB of JSON, held as bytes, as the parsed base64 strings and as the decoded image files
  (3/4 of the text): under 256 MB together;
- decoding one image: Pillow holds it in its own mode (at most 4 bytes/pixel) plus the copies made on the way
  to RGB. Reduced towards the model's ``max_pixels`` (every real backend has one) that is at most 9 bytes/pixel
  (palette -> RGBA -> premultiplied RGBa), 360 MB for 40 Mpx; decoded at full size (a backend without
  ``max_pixels``) alpha over white takes up to 16 bytes/pixel, 640 MB. One image at a time per decode worker;
- the decoded images kept until the request is answered: RGB is 4 bytes/pixel in Pillow and no image keeps
  more pixels than its header says, so at most 4 B x 128 Mpx = 512 MB.

That is about 1.1 GB per request (1.4 GB without ``max_pixels``). Measured with ``tests/fake_reward_server.py``:
a 40 Mpx transparent palette PNG and 22 images of 4 Mpx in one group (128 Mpx) raised the server's peak RSS by
406 MB with a 1 Mpx target and by 803 MB at full size. ``decode_workers`` bounds how many requests decode at
the same time. The pixel budgets are checked from the image headers before anything is decoded.
"""

from __future__ import annotations

import dataclasses

from ..processing_miescore import MAX_INSTRUCTION_CHARS

__all__ = ["ServerSettings"]

# MAX_INSTRUCTION_CHARS (derived from the model's token budget in processing_miescore) is the one instruction
# limit of the server, the Python API, the CLI and the Space. The server may be configured lower, never higher.


@dataclasses.dataclass
class ServerSettings:
    """Limits, timeouts and batching knobs of the reward server.

    Size limits answer 413 and malformed content 422, always naming the offending field.
    """

    max_batch: int = 16  # samples per model call
    # longest a sample waits for others to join its batch (and then, for requests that arrived by then but are
    # still being decoded, up to about one model call more: batch_scheduler.DECODE_GRACE_S)
    max_wait_ms: float = 20.0
    max_queue: int = 256  # samples waiting for a model call; beyond it requests get 429
    max_request_bytes: int = 64 * 1024 * 1024
    max_samples_per_request: int = 256
    max_images_per_request: int = 512  # sources shared by a group count once
    max_sources_per_sample: int = 16
    # 40 Mpx is ~40x the MIEScore paper's 1,048,576-pixel budget per image: no real photo is refused, but a
    # decompression bomb is refused from its header, before decoding.
    max_image_pixels: int = 40_000_000
    # Decoded-pixel budgets (header width x height, summed; a group's shared sources count once), checked
    # before decoding: they bound the memory and CPU one request can take (see the module docstring).
    max_sample_pixels: int = 96_000_000
    max_request_pixels: int = 128_000_000
    decode_workers: int = 2  # threads that parse and decode requests while the model runs
    max_instruction_chars: int = MAX_INSTRUCTION_CHARS
    request_timeout_s: float = 300.0  # enqueue -> result; beyond it 504
    body_timeout_s: float = 30.0  # reading the request body; beyond it 408 (slow or stalled clients)
    header_timeout_s: float = 10.0  # from connecting (or the first byte of the next request) to its last header
    keep_alive_timeout_s: float = 5.0  # an idle connection between requests is closed after this
    # Open connections; beyond it new ones get 503 and are closed. Also kept below the process's file limit.
    max_connections: int = 1000
    drain_timeout_s: float = 30.0  # on shutdown, queued work gets this long to finish before 503s
    retry_after_s: int = 1
    api_key: str | None = dataclasses.field(default=None, repr=False)
    public_metrics: bool = False  # with an api_key: serve /metrics without it (e.g. to a Prometheus scraper)

    def __post_init__(self):
        positive = ("max_batch", "max_queue", "max_request_bytes", "max_samples_per_request",
                    "max_images_per_request", "max_sources_per_sample", "max_image_pixels", "max_sample_pixels",
                    "max_request_pixels", "decode_workers", "max_instruction_chars", "request_timeout_s",
                    "body_timeout_s", "header_timeout_s", "keep_alive_timeout_s", "max_connections",
                    "drain_timeout_s")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"ServerSettings.{name} must be > 0, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise ValueError(f"ServerSettings.max_wait_ms must be >= 0, got {self.max_wait_ms}")
        if self.max_instruction_chars > MAX_INSTRUCTION_CHARS:
            raise ValueError(f"ServerSettings.max_instruction_chars is {self.max_instruction_chars}, above the model's "
                             f"limit of {MAX_INSTRUCTION_CHARS} characters; use at most that")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServerSettings.api_key is empty; pass None to disable authentication")
