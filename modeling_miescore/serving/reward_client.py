"""Client for the MIEScore reward server (``miescore serve``)::

    from modeling_miescore.serving.reward_client import RewardClient

    with RewardClient("http://127.0.0.1:8000") as client:
        client.score(["src.png"], "edited.png", "Put the cat from image 1 on the sofa")   # -> dict of scores

For RL loops, :func:`modeling_miescore.serving.editor_rewards.make_reward_fn` wraps a client as a reward callable.

Images may be file paths, ``PIL.Image`` objects, numpy arrays (H, W[, C]) or torch tensors ((C, H, W) or
(H, W, C), floats in [0, 1] or uint8). Paths are sent as their file bytes; everything else is encoded as PNG.
One ``httpx.Client`` is kept open, so connections are reused. 429 and 503 answers are retried after their
``Retry-After`` (delta-seconds or an HTTP date; bounded by ``max_retry_wait``), and so are connection
failures (:mod:`modeling_miescore.utils.http_retry`).
"""

from __future__ import annotations

import base64
import io
import logging
import os
from typing import Any, Sequence

import numpy as np

from ..utils.http_retry import RetryPolicy, send_with_retries
from .settings import ServerSettings

__all__ = ["RewardClient", "RewardServerError", "encode_image", "as_image_list"]

logger = logging.getLogger(__name__)

# The server answers 429 (queue full) and 503 (draining) with a Retry-After; other errors do not go away when
# the same request is sent again (a 500 is the model failing on this sample, a 504 an overloaded model).
RETRY_STATUSES = frozenset({429, 503})


class RewardServerError(RuntimeError):
    """The server answered with an error (after retries); ``status``, ``field`` and ``kind`` say which."""

    def __init__(self, status: int, message: str, field: str | None = None, kind: str | None = None):
        where = f" (field {field})" if field else ""
        super().__init__(f"reward server error {status}{where}: {message}")
        self.status, self.field, self.kind, self.message = status, field, kind, message


def _tensor_to_numpy(image) -> np.ndarray:
    array = image.detach().float().cpu().numpy() if hasattr(image, "detach") else np.asarray(image)
    if array.ndim == 3 and array.shape[0] in (1, 3, 4) and array.shape[2] not in (1, 3, 4):
        array = np.transpose(array, (1, 2, 0))  # (C, H, W) -> (H, W, C)
    if np.issubdtype(array.dtype, np.floating):
        array = np.clip(array, 0.0, 1.0)  # samplers overshoot [0, 1] slightly
    return array


def encode_image(image) -> str:
    """One image -> base64 of its bytes (a path's file bytes unchanged, anything else as PNG)."""
    return _encoded_with_pixels(image)[0]


def _header_pixels(data: bytes) -> int:
    """Width x height from an image file's header (0 when Pillow cannot read it: the server will say why)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as opened:
            return opened.size[0] * opened.size[1]
    except Exception:  # noqa: BLE001 - any unreadable file: the server answers with the precise error
        return 0


def _encoded_with_pixels(image) -> tuple[str, int]:
    """``(base64, width x height)`` of one image; the pixel count sizes requests to the server's budget."""
    if isinstance(image, (str, os.PathLike, bytes, bytearray)):
        if isinstance(image, (bytes, bytearray)):
            data = bytes(image)
        else:
            with open(image, "rb") as handle:
                data = handle.read()
        return base64.b64encode(data).decode("ascii"), _header_pixels(data)
    from ..image_io import load_image

    if hasattr(image, "detach"):  # torch tensor
        image = _tensor_to_numpy(image)
    pil = load_image(image)  # RGB, upright; raises ImageLoadError naming the problem
    buffer = io.BytesIO()
    pil.save(buffer, format="PNG", compress_level=1)  # lossless; level 1 keeps encoding cheap
    return base64.b64encode(buffer.getvalue()).decode("ascii"), pil.size[0] * pil.size[1]


def as_image_list(images) -> list:
    """A batch of images as a list: lists/tuples as they are, a 4-D array/tensor split along its first axis."""
    if isinstance(images, (list, tuple)):
        return list(images)
    if hasattr(images, "ndim") and images.ndim == 4:
        return [images[i] for i in range(images.shape[0])]
    return [images]


def _source_list(sources) -> list:
    """One source image (a path, an image, an array) or a list/tuple of them -> a list."""
    if isinstance(sources, (list, tuple)):
        return list(sources)
    return [sources]


class _EncodeCache:
    """Encodes each distinct image object once per call (the G candidates of a prompt share their sources) and
    remembers each encoding's pixel count (``pixels[encoded]``)."""

    def __init__(self):
        self._by_id: dict[int, tuple[Any, str]] = {}
        self.pixels: dict[str, int] = {}

    def __call__(self, image) -> str:
        key = id(image)
        hit = self._by_id.get(key)
        if hit is not None and hit[0] is image:
            return hit[1]
        encoded, pixels = _encoded_with_pixels(image)
        self._by_id[key] = (image, encoded)  # keeps the object alive, so its id is not reused
        self.pixels[encoded] = pixels
        return encoded


class RewardClient:
    """Talks to ``miescore serve`` over HTTP (JSON with base64 images; never pickle).

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        api_key: sent as ``Authorization: Bearer <key>`` (for servers started with ``--api-key-env``).
        timeout: seconds for one HTTP call (connect + send + wait for scores).
        max_retries: extra attempts after a 429 / 503 answer or a connection failure.
        max_retry_wait: upper bound (s) on one wait between attempts, whatever ``Retry-After`` says.
        backoff: first wait (s) when the server sends no ``Retry-After``; doubles per attempt.
        max_samples_per_request: larger batches are split into several requests.
        max_pixels_per_request: so are batches whose images (width x height, a group's sources once) add up to
            more: the server's ``--max-request-pixels`` (its default here); a group is split only if it alone
            is larger.
        transport: an ``httpx`` transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 300.0, max_retries: int = 5,
                 max_retry_wait: float = 30.0, max_samples_per_request: int = 64, transport=None,
                 backoff: float = 0.1,
                 max_pixels_per_request: int = ServerSettings.model_fields["max_request_pixels"].default):
        import httpx

        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_samples_per_request < 1 or max_pixels_per_request < 1:
            raise ValueError("max_samples_per_request and max_pixels_per_request must be >= 1, got "
                             f"{max_samples_per_request} and {max_pixels_per_request}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        # timeouts are not retried: the server may still be scoring, and a retry would double its load
        self.retry_policy = RetryPolicy(
            max_retries=max_retries, backoff=backoff, max_backoff=max_retry_wait, statuses=RETRY_STATUSES,
            exceptions=(httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))
        self.max_samples_per_request = max_samples_per_request
        self.max_pixels_per_request = max_pixels_per_request
        self._httpx = httpx
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    # -- plumbing

    def close(self):
        self._client.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, method: str, path: str, **kwargs):
        httpx = self._httpx

        def on_retry(outcome, wait: float):
            what = outcome.error if outcome.error is not None else f"HTTP {outcome.response.status_code}"
            logger.info("reward server %s%s: %s; retry %d/%d in %.2f s", self.base_url, path, what,
                        outcome.attempts, self.retry_policy.max_retries, wait)

        try:
            outcome = send_with_retries(lambda: self._client.request(method, path, **kwargs), self.retry_policy,
                                        on_retry=on_retry)
        except httpx.TimeoutException:
            raise RewardServerError(0, f"no answer from {self.base_url}{path} within the client timeout; raise "
                                       "timeout= or lower the load") from None
        if outcome.error is not None:
            err = outcome.error
            raise RewardServerError(0, f"cannot reach {self.base_url} ({type(err).__name__}: {err}); is "
                                       "`miescore serve` running?") from None
        response = outcome.response
        if response.status_code >= 400:
            raise _server_error(response)
        return response

    # -- API

    def health(self) -> dict:
        return self._request("GET", "/health").json()

    def score(self, sources, edited, instruction: str) -> dict:
        """Score one edit -> the server's result dict (MIEScore: the four score keys on the 0-100 scale)."""
        payload = {"sources": [encode_image(s) for s in _source_list(sources)], "edited": encode_image(edited),
                   "instruction": instruction}
        return self._request("POST", "/v1/score", json=payload).json()

    def score_batch(self, samples: Sequence) -> list[dict]:
        """Score many edits (dicts ``{"sources", "edited", "instruction"}`` or 3-tuples) -> results in order.

        Consecutive samples with the same sources objects and instruction are sent as one group, so their
        sources are encoded and uploaded once.
        """
        encode = _EncodeCache()
        groups: list[dict] = []
        positions: list[tuple[int, int]] = []  # sample -> (group, index in group)
        previous_key = None
        for i, sample in enumerate(samples):
            if isinstance(sample, dict):
                sources, edited, instruction = sample["sources"], sample["edited"], sample["instruction"]
            else:
                sources, edited, instruction = sample
            sources = _source_list(sources)
            key = (tuple(id(s) for s in sources), instruction)
            if key != previous_key:
                groups.append({"sources": [encode(s) for s in sources], "instruction": instruction, "edited": [],
                               "_objects": sources})
                previous_key = key
            positions.append((len(groups) - 1, len(groups[-1]["edited"])))
            groups[-1]["edited"].append(encode(edited))
        for group in groups:
            group.pop("_objects")
        grouped = self._score_encoded_groups(groups, encode.pixels)
        return [grouped[g][e] for g, e in positions]

    def score_groups(self, groups: Sequence[dict]) -> list[list[dict]]:
        """Score groups ``{"sources", "instruction", "edited": [images]}`` (e.g. the G candidates of one RL
        prompt) -> one list of results per group, in the order of its edited images."""
        encode = _EncodeCache()
        encoded = []
        for g, group in enumerate(groups):
            missing = [k for k in ("sources", "instruction", "edited") if k not in group]
            if missing:
                raise ValueError(f"group {g} is missing {', '.join(missing)}")
            encoded.append({"sources": [encode(s) for s in _source_list(group["sources"])],
                            "instruction": group["instruction"],
                            "edited": [encode(e) for e in as_image_list(group["edited"])]})
        return self._score_encoded_groups(encoded, encode.pixels)

    def _group_parts(self, group: dict, pixels: dict[str, int]) -> list[tuple[dict, int]]:
        """A group as ``(part, pixels)`` pieces within the per-request limits (one piece unless it is larger)."""
        source_pixels = sum(pixels.get(s, 0) for s in group["sources"])
        parts: list[tuple[dict, int]] = []
        edited: list[str] = []
        size = source_pixels
        for image in group["edited"]:
            cost = pixels.get(image, 0)
            if edited and (len(edited) >= self.max_samples_per_request or size + cost > self.max_pixels_per_request):
                parts.append(({**group, "edited": edited}, size))
                edited, size = [], source_pixels
            edited.append(image)
            size += cost
        parts.append(({**group, "edited": edited}, size))
        return parts

    def _score_encoded_groups(self, groups: list[dict], pixels: dict[str, int]) -> list[list[dict]]:
        """Send encoded groups in requests of at most ``max_samples_per_request`` edits and
        ``max_pixels_per_request`` pixels (a group is split only if it alone is larger)."""
        out: list[list[dict]] = [[] for _ in groups]
        batch: list[tuple[int, dict]] = []
        size = request_pixels = 0

        def flush():
            nonlocal batch, size, request_pixels
            if not batch:
                return
            response = self._request("POST", "/v1/score_groups", json={"groups": [g for _, g in batch]}).json()
            results = iter(response["results"])
            for g, group in batch:
                for _ in group["edited"]:
                    result = dict(next(results))
                    result.pop("group", None)
                    result.pop("index", None)
                    out[g].append(result)
            batch, size, request_pixels = [], 0, 0

        for g, group in enumerate(groups):
            for part, part_pixels in self._group_parts(group, pixels):
                if (size + len(part["edited"]) > self.max_samples_per_request
                        or request_pixels + part_pixels > self.max_pixels_per_request):
                    flush()
                batch.append((g, part))
                size += len(part["edited"])
                request_pixels += part_pixels
        flush()
        return out


def _server_error(response) -> RewardServerError:
    """The server's JSON error (``{"error": {"field", "message", "kind"}}``) as an exception."""
    field = kind = None
    message = response.text[:500]
    try:
        error = response.json().get("error", {})
        field, kind, message = error.get("field"), error.get("kind"), error.get("message", message)
    except (ValueError, AttributeError):
        pass
    return RewardServerError(response.status_code, message, field, kind)
