"""The reward server's limits and batching knobs (one :class:`ServerSettings` per server)."""

from __future__ import annotations

import dataclasses

__all__ = ["ServerSettings"]


@dataclasses.dataclass
class ServerSettings:
    """Limits and batching knobs of the reward server.

    Size limits answer 413 and malformed content 422, always naming the offending field.
    """

    max_batch: int = 16  # samples per model call
    max_wait_ms: float = 20.0  # longest a sample waits for others to join its batch
    max_queue: int = 256  # samples waiting for a model call; beyond it requests get 429
    max_request_bytes: int = 64 * 1024 * 1024
    max_samples_per_request: int = 256
    max_images_per_request: int = 512  # sources shared by a group count once
    max_sources_per_sample: int = 16
    # 40 Mpx is ~40x the MIEScore paper's 1,048,576-pixel budget per image: no real photo is refused, but a
    # decompression bomb is refused from its header, before decoding.
    max_image_pixels: int = 40_000_000
    max_instruction_chars: int = 4096
    request_timeout_s: float = 300.0  # enqueue -> result; beyond it 504
    body_timeout_s: float = 30.0  # reading the request body; beyond it 408 (slow or stalled clients)
    drain_timeout_s: float = 30.0  # on shutdown, queued work gets this long to finish before 503s
    retry_after_s: int = 1
    api_key: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        positive = ("max_batch", "max_queue", "max_request_bytes", "max_samples_per_request",
                    "max_images_per_request", "max_sources_per_sample", "max_image_pixels",
                    "max_instruction_chars", "request_timeout_s", "body_timeout_s", "drain_timeout_s")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"ServerSettings.{name} must be > 0, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise ValueError(f"ServerSettings.max_wait_ms must be >= 0, got {self.max_wait_ms}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServerSettings.api_key is empty; pass None to disable authentication")
