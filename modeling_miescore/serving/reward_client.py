"""Client for the MIEScore reward server (``miescore serve``), one replica or several::

    from modeling_miescore.serving.reward_client import RewardClient

    with RewardClient("http://127.0.0.1:8000") as client:
        client.score(["src.png"], "edited.png", "Put the cat from image 1 on the sofa")   # -> dict of scores

    with RewardClient(["http://gpu-a:8000", "http://gpu-b:8000"]) as client:          # replicas
        client.score_groups([{"sources": [...], "instruction": "...", "edited": [...]}])  # one list per group

With several replicas each group goes whole to one replica (its shared prompt prefix then runs once there),
chosen by rendezvous hashing of the group's key with bounded loads (each replica capped at ``(1 + slack)`` times
its even share of the edits; Mirrokni, Thorup and Zadimoghaddam, SODA 2018). A replica that is unreachable, too
slow or still overloaded after the retries is skipped for a while; when none is left, :class:`RewardReplicasDown`
names each replica's last error. Images (paths, bytes, PIL, numpy arrays or torch tensors) go as base64 of their
file bytes or as lossless PNG; answers are read within ``utils.http_bounds`` (:class:`BoundedHTTPClient`, no
redirect followed) and matched to edits by their ``group`` / ``index`` labels.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import math
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Set

import httpx
import numpy as np

from ..judges.chat_client import BoundedHTTPClient, endpoint_url
from ..utils import http_bounds
from ..utils.credentials import redacted_url
from ..utils.http_bounds import RetryPolicy
from .settings import ServerSettings
from ..hub.image_io import load_image
from ..hub.spatialreward_relaxed_json import loads_noting_duplicates


class RewardServerError(RuntimeError):
    """The server answered with an error (after retries); ``status``, ``field`` and ``kind`` say which."""

    def __init__(self, status: int, message: str, field: str | None = None, kind: str | None = None):
        where = f" (field {field})" if field else ""
        super().__init__(f"reward server error {status}{where}: {message}")
        self.status, self.field, self.kind, self.message = status, field, kind, message


class RewardReplicasDown(RewardServerError):
    """No replica could take a request: each was unreachable, too slow or overloaded after the retries.
    ``errors`` maps each replica tried to its last :class:`RewardServerError`; ``status`` and ``kind`` are the
    last one's."""

    def __init__(self, errors: dict):
        self.errors = dict(errors)
        last = list(self.errors.values())[-1]
        if len(self.errors) == 1:
            message = last.message
        else:
            message = (f"no reward replica could score the request ({len(self.errors)} tried): "
                       + "; ".join(f"{url}: {error.message}" for url, error in self.errors.items()))
        super().__init__(last.status, message, last.field, last.kind)


def results_by_label(results, batch: list[tuple], where: str) -> list[list[dict]]:
    """``results`` of a ``/v1/score_groups`` answer arranged per request group, in edit order, by their
    ``group`` (the group's position in the request) and ``index`` labels; an answer that does not hold exactly
    one result dict per edit of the request is refused (``bad_response``)."""
    expected = sum(len(positions) for _, _, positions in batch)
    problem = None
    if not isinstance(results, list) or len(results) != expected:
        problem = f"answered {expected} edits with {len(results) if isinstance(results, list) else 'no'} results"
    table: dict = {}
    for result in results if problem is None else ():
        label = (result.get("group"), result.get("index")) if isinstance(result, dict) else None
        if label is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in label):
            problem = "answered a result without integer 'group' and 'index' labels"
        elif label in table:
            problem = f"answered group {label[0]} edit {label[1]} twice"
        else:
            table[label] = result
    if problem is None:
        try:
            return [[table[(k, e)] for e in range(len(positions))] for k, (_, _, positions) in enumerate(batch)]
        except KeyError as missing:
            problem = f"answered no result for group {missing.args[0][0]} edit {missing.args[0][1]}"
    raise RewardServerError(200, f"{where} {problem}; is it `miescore serve`?", kind="bad_response")


def server_error(response, shown=str) -> RewardServerError:
    """The server's JSON error (``{"error": {"field", "message", "kind"}}``) as an exception; ``shown`` masks
    what the message may echo (credentials)."""
    field = kind = None
    message = response.text[:500]
    try:
        error = json.loads(response.content).get("error", {})
        field, kind, message = error.get("field"), error.get("kind"), error.get("message", message)
    except (ValueError, AttributeError):
        pass
    return RewardServerError(response.status_code, shown(message), field, kind)


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
            from ..hub.image_io import read_image_file

            data = read_image_file(image)  # a regular file of a bounded size (never a FIFO or a device)
        return base64.b64encode(data).decode("ascii"), _header_pixels(data)

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


def source_list(sources) -> list:
    """One source image (a path, an image, an array) or a list/tuple of them -> a list."""
    if isinstance(sources, (list, tuple)):
        return list(sources)
    return [sources]


class EncodeCache:
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


def _weight(key: str, url: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{url}\x1f{key}".encode("utf-8", "surrogatepass")).digest()[:8], "big")


def preference_order(key: str, urls: Sequence[str]) -> List[int]:
    """Replica indices from most to least preferred for ``key`` (depends only on the key and the URLs)."""
    return sorted(range(len(urls)), key=lambda i: (-_weight(key, urls[i]), i))


def assign_groups(keys: Sequence[str], sizes: Sequence[int], candidates: Sequence[Sequence[int]],
                  urls: Sequence[str], slack: float = 0.1) -> List[int]:
    """One replica index per group.

    Args:
        keys: a stable key per group (the editor-RL group key, or a content hash of sources + instruction).
        sizes: edits per group (the load a group puts on its replica).
        candidates: per group, the replicas it may go to (the live ones it has not failed on yet); non-empty.
        urls: every replica's URL (the hashing is over URLs, so indices may change, preferences do not).
        slack: each replica takes at most ``ceil((1 + slack) * total / replicas)`` edits (never less than the
            largest group), largest groups placed first; a group that fits nowhere goes to its least-loaded
            candidate.
    """
    if slack < 0:
        raise ValueError(f"slack must be >= 0, got {slack}")
    replicas = sorted({r for allowed in candidates for r in allowed})
    if not replicas:
        return []
    total = sum(int(s) for s in sizes)
    capacity = max(math.ceil((1.0 + slack) * total / len(replicas)), max(int(s) for s in sizes))
    load: Dict[int, int] = {r: 0 for r in replicas}
    chosen: List[Optional[int]] = [None] * len(keys)
    for g in sorted(range(len(keys)), key=lambda g: (-int(sizes[g]), g)):
        allowed = set(candidates[g])
        ranked = [r for r in preference_order(keys[g], urls) if r in allowed]
        fitting = [r for r in ranked if load[r] + int(sizes[g]) <= capacity]
        pick = fitting[0] if fitting else min(ranked, key=lambda r: (load[r], ranked.index(r)))
        chosen[g] = pick
        load[pick] += int(sizes[g])
    return [int(c) for c in chosen]


class ReplicaHealth:
    """Which replicas answered last time. A replica that failed (unreachable, timed out, overloaded after the
    retries) is skipped for ``cooldown_s`` seconds; when every replica a group may still try is cooling down,
    they are tried anyway (each call has its own retries, and a blip must not stop a run for ``cooldown_s``).
    Thread-safe."""

    def __init__(self, urls: Sequence[str], cooldown_s: float = 30.0):
        self.urls = list(urls)
        self.cooldown_s = float(cooldown_s)
        self._down_until = [0.0] * len(self.urls)
        self._last_error: List[Optional[str]] = [None] * len(self.urls)
        self._lock = threading.Lock()

    def candidates(self, exclude: Set[int]) -> List[int]:
        """The replicas not in ``exclude``: the live ones, or every one when none is live."""
        now = time.monotonic()
        with self._lock:
            allowed = [i for i in range(len(self.urls)) if i not in exclude]
            live = [i for i in allowed if self._down_until[i] <= now]
        return live or allowed

    def mark_down(self, index: int, reason: str) -> None:
        with self._lock:
            self._down_until[index] = time.monotonic() + self.cooldown_s
            self._last_error[index] = reason

    def mark_up(self, index: int) -> None:
        with self._lock:
            self._down_until[index] = 0.0
            self._last_error[index] = None

    def describe(self) -> Dict[str, str]:
        """``{url: "up" | "down: <last error>"}``."""
        now = time.monotonic()
        with self._lock:
            return {url: ("up" if self._down_until[i] <= now else f"down: {self._last_error[i]}")
                    for i, url in enumerate(self.urls)}


logger = logging.getLogger(__name__)

# The server answers 429 (queue full) and 503 (draining) with a Retry-After; other errors do not go away when
# the same request is sent again (a 500 is the model failing on this sample, a 504 an overloaded model).
RETRY_STATUSES = frozenset({429, 503})
# Still there after the retries, these mean the replica cannot take the request now (queue full, draining, a
# proxy in front of a dead one, the server's own timeout): the request goes to another replica.
DOWN_STATUSES = frozenset({429, 502, 503, 504})
# The request is wrong for every replica (a wrong API key, a URL that is not a reward server): never isolated.
SETUP_STATUSES = frozenset({401, 403, 404, 405})
_SAMPLE_FIELD = re.compile(r"^(?:groups\[(\d+)\](?:\.edited\[(\d+)\])?|samples\[(\d+)\])")
# an answer holds a few hundred bytes per edit; 32 MiB is ~100x what the largest request (64 edits) needs
MAX_ANSWER_BYTES = 32 * 1024 * 1024


def _names_no_sample(response) -> bool:
    """False for an error answer whose ``field`` names one sample or group: the server already scored it alone
    and failed (sending it again fails again), so it is not retried."""
    field = server_error(response).field
    return not (isinstance(field, str) and _SAMPLE_FIELD.match(field))


def _is_down(error: RewardServerError) -> bool:
    return error.status == 0 or error.status in DOWN_STATUSES


def _content_key(group: dict) -> str:
    """A stable key of an encoded group: its sources' bytes and its instruction."""
    digest = hashlib.sha256()
    for source in group["sources"]:
        digest.update(hashlib.sha256(source.encode("ascii")).digest())
    digest.update(group["instruction"].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def base_urls(base_url) -> list[str]:
    """``"http://a"``, ``"http://a,http://b"`` or a list of URLs -> the list (trailing slashes dropped)."""
    parts = base_url.split(",") if isinstance(base_url, str) else list(base_url)
    urls = [str(u).strip().rstrip("/") for u in parts if str(u).strip()]
    if not urls:
        raise ValueError(f"no reward server URL in {base_url!r}")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"reward server URL {url!r} must start with http:// or https://")
    if len(set(urls)) != len(urls):
        raise ValueError(f"reward server URLs repeat: {urls}")
    return urls


class RewardClient(BoundedHTTPClient):
    """Talks to ``miescore serve`` over HTTP (JSON with base64 images; never pickle).

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``; several replicas as a list or a comma-separated string.
        api_key: sent as ``Authorization: Bearer <key>`` (for servers started with ``--api-key-env``).
        timeout: seconds for one HTTP call (connect + send + wait for scores).
        max_retries: extra attempts after a retryable answer (``retry_statuses``) or a connection failure.
        max_retry_wait: upper bound (s) on one wait between attempts, whatever ``Retry-After`` says.
        backoff: first wait (s) when the server sends no ``Retry-After``; doubles per attempt.
        max_samples_per_request: larger batches are split into several requests.
        max_pixels_per_request: so are batches whose images (width x height, a group's sources once) add up to
            more: the server's ``--max-request-pixels`` (its default here); a group is split only if it alone
            is larger.
        transport: an ``httpx`` transport (tests pass ``httpx.MockTransport``).
        retry_statuses: statuses retried on the same replica (default 429 and 503, which the server answers
            with a ``Retry-After``); an error that names the one sample it is about is never retried.
        replica_cooldown_s: a replica that failed is skipped this long (unless no other is left).
        balance_slack: a replica takes at most ``1 + balance_slack`` times its even share of a call's edits.
    """

    def __init__(self, base_url, api_key: str | None = None, timeout: float = 300.0, max_retries: int = 5,
                 max_retry_wait: float = 30.0, max_samples_per_request: int = 64, transport=None,
                 backoff: float = 0.1,
                 max_pixels_per_request: int = ServerSettings.model_fields["max_request_pixels"].default,
                 retry_statuses=RETRY_STATUSES, replica_cooldown_s: float = 30.0, balance_slack: float = 0.1,
                 max_answer_bytes: int = MAX_ANSWER_BYTES, api_key_env: str = "API key"):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_samples_per_request < 1 or max_pixels_per_request < 1:
            raise ValueError("max_samples_per_request and max_pixels_per_request must be >= 1, got "
                             f"{max_samples_per_request} and {max_pixels_per_request}")
        if not float(timeout) > 0 or int(max_answer_bytes) < 1:
            raise ValueError(f"timeout and max_answer_bytes must be > 0, got {timeout} and {max_answer_bytes}")
        self.base_urls = base_urls(base_url)
        self.base_url = self.base_urls[0]
        self.shown_urls = [redacted_url(u) for u in self.base_urls]  # what messages and logs show
        # timeouts are not retried on the same replica: it may still be scoring, and a retry would double its load
        super().__init__(self.base_urls, api_key, api_key_env, timeout, max_answer_bytes, RetryPolicy(
            max_retries=max_retries, backoff=backoff, max_backoff=max_retry_wait, statuses=frozenset(retry_statuses),
            exceptions=(httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError),
            retryable=_names_no_sample), transport=transport)
        self.max_samples_per_request = max_samples_per_request
        self.max_pixels_per_request = max_pixels_per_request
        self.balance_slack = float(balance_slack)
        self.replicas = ReplicaHealth(self.base_urls, replica_cooldown_s)

    def _shown(self, text) -> str:
        return self.masked(text)[:500]

    def _request(self, method: str, path: str, replica: int = 0, **kwargs) -> http_bounds.BoundedResponse:
        """One request (retried as :attr:`retry_policy` says), each attempt within ``timeout`` in total and its
        answer within ``max_answer_bytes``; a 3xx or 4xx/5xx answer raises :class:`RewardServerError`."""
        url = self.shown_urls[replica]

        def on_retry(outcome, wait: float):
            what = outcome.error if outcome.error is not None else f"HTTP {outcome.response.status_code}"
            logger.info("reward server %s%s: %s; retry %d/%d in %.2f s", url, path, self._shown(what),
                        outcome.attempts, self.retry_policy.max_retries, wait)

        try:
            outcome = self.exchange(method, endpoint_url(self.base_urls[replica], path), on_retry, **kwargs)
        except httpx.TimeoutException:
            raise RewardServerError(0, f"no complete answer from {url}{path} within the client timeout "
                                       f"({self.timeout:g} s for connecting, sending and reading the whole answer); "
                                       "raise timeout= or lower the load", kind="timeout") from None
        except http_bounds.AnswerTooLarge as err:
            raise RewardServerError(0, f"{url}{path}: {err} (raise max_answer_bytes if such answers are expected)",
                                    kind="too_large") from None
        except http_bounds.BadBody as err:
            raise RewardServerError(0, f"{url}{path}: the answer cannot be decoded ({self._shown(err)})",
                                    kind="bad_response") from None
        if outcome.error is not None:
            err = outcome.error
            raise RewardServerError(0, f"cannot reach {url} ({type(err).__name__}: {self._shown(err)}); is "
                                       "`miescore serve` running?", kind="unreachable") from None
        response = outcome.response
        if 300 <= response.status_code < 400:
            target = redacted_url(response.headers.get("location", "(no Location header)"))
            raise RewardServerError(response.status_code, f"{url}{path} answered a redirect to {target} (HTTP "
                                    f"{response.status_code}); redirects are not followed: give the reward the "
                                    "final URL of the `miescore serve` replica", kind="redirect")
        if response.status_code >= 400:
            raise server_error(response, self._shown)
        return response

    def _json(self, response, replica: int, path: str):
        """The answer's JSON and the keys repeated in its objects (``{id(object): {key: values}}``)."""
        try:
            return loads_noting_duplicates(response.content)
        except (ValueError, UnicodeDecodeError) as err:
            raise RewardServerError(response.status_code, f"{self.shown_urls[replica]}{path} answered HTTP "
                                    f"{response.status_code} with a body that is not JSON ({self._shown(err)}); "
                                    f"it starts {self._shown(response.text[:80])!r}: is it `miescore serve`?",
                                    kind="bad_response") from None

    def _on_some_replica(self, key: str, call):
        """``call(replica)`` on the preferred replica for ``key``, failing over to the others."""
        tried: set = set()
        errors: dict = {}
        while len(tried) < len(self.base_urls):
            candidates = self.replicas.candidates(tried)
            replica = next(r for r in preference_order(key, self.base_urls) if r in candidates)
            tried.add(replica)
            try:
                result = call(replica)
            except RewardServerError as err:
                if not _is_down(err):
                    raise
                self.replicas.mark_down(replica, err.message)
                errors[self.shown_urls[replica]] = err
                continue
            self.replicas.mark_up(replica)
            return result
        raise RewardReplicasDown(errors)

    # -- API

    def health(self, replica: int = 0) -> dict:
        """``GET /health`` of one replica (the first by default)."""
        return self._json(self._request("GET", "/health", replica=replica), replica, "/health")[0]

    def score(self, sources, edited, instruction: str) -> dict:
        """Score one edit -> the server's result dict (MIEScore: the four score keys on the 0-100 scale)."""
        payload = {"sources": [encode_image(s) for s in source_list(sources)], "edited": encode_image(edited),
                   "instruction": instruction}
        return self._on_some_replica(_content_key(payload), lambda r: self._json(self._request(
            "POST", "/v1/score", replica=r, json=payload), r, "/v1/score")[0])

    def score_batch(self, samples: Sequence) -> list[dict]:
        """Score many edits (dicts ``{"sources", "edited", "instruction"}`` or 3-tuples) -> results in order.

        Consecutive samples with the same sources objects and instruction are sent as one group, so their
        sources are encoded and uploaded once.
        """
        groups: list[dict] = []
        positions: list[tuple[int, int]] = []  # sample -> (group, index in group)
        for sample in samples:
            sources, edited, instruction = ((sample["sources"], sample["edited"], sample["instruction"])
                                            if isinstance(sample, dict) else sample)
            sources = source_list(sources)
            if not groups or (groups[-1]["instruction"], list(map(id, groups[-1]["sources"]))) != (
                    instruction, list(map(id, sources))):
                groups.append({"sources": sources, "instruction": instruction, "edited": []})
            positions.append((len(groups) - 1, len(groups[-1]["edited"])))
            groups[-1]["edited"].append(edited)
        grouped = self.score_groups(groups)
        return [grouped[g][e] for g, e in positions]

    def score_groups(self, groups: Sequence[dict], keys: Sequence[str] | None = None,
                     isolate_failures: bool = False) -> list[list]:
        """Score groups ``{"sources", "instruction", "edited": [images]}`` (e.g. the G candidates of one RL
        prompt) -> one list of results per group, in the order of its edited images.

        Args:
            keys: one stable key per group for choosing its replica (default: a hash of its sources' bytes and
                its instruction).
            isolate_failures: when the server refuses or fails on some edits (a 4xx/5xx naming the sample, or
                one that names none), the others are scored without them and each such edit's slot holds a
                :class:`RewardServerError` (its ``status``, ``kind`` and ``message``); otherwise the first such
                error raises. Either way a wrong API key or URL raises, and so does :class:`RewardReplicasDown`.
        """
        encode = EncodeCache()
        encoded = []
        for g, group in enumerate(groups):
            missing = [k for k in ("sources", "instruction", "edited") if k not in group]
            if missing:
                raise ValueError(f"group {g} is missing {', '.join(missing)}")
            encoded.append({"sources": [encode(s) for s in source_list(group["sources"])],
                            "instruction": group["instruction"],
                            "edited": [encode(e) for e in as_image_list(group["edited"])]})
        return self._score_encoded_groups(encoded, encode.pixels, keys, isolate_failures)

    # -- groups over replicas

    def _group_parts(self, group: dict, pixels: dict[str, int]) -> list[tuple[dict, list[int], int]]:
        """A group as ``(part, edit positions, pixels)`` pieces within the per-request limits (one piece unless
        it is larger)."""
        source_pixels = sum(pixels.get(s, 0) for s in group["sources"])
        parts: list[tuple[dict, list[int], int]] = []
        edited: list[str] = []
        positions: list[int] = []
        size = source_pixels
        for position, image in enumerate(group["edited"]):
            cost = pixels.get(image, 0)
            if edited and (len(edited) >= self.max_samples_per_request or size + cost > self.max_pixels_per_request):
                parts.append(({**group, "edited": edited}, positions, size))
                edited, positions, size = [], [], source_pixels
            edited.append(image)
            positions.append(position)
            size += cost
        parts.append(({**group, "edited": edited}, positions, size))
        return parts

    def _requests(self, indices: list[int], groups: list[dict], pixels: dict[str, int]) -> list[list[tuple]]:
        """The groups ``indices`` as request bodies of at most ``max_samples_per_request`` edits and
        ``max_pixels_per_request`` pixels: lists of ``(group, part, edit positions)``."""
        batches: list[list[tuple]] = []
        batch: list[tuple] = []
        size = request_pixels = 0
        for g in indices:
            for part, positions, part_pixels in self._group_parts(groups[g], pixels):
                if batch and (size + len(part["edited"]) > self.max_samples_per_request
                              or request_pixels + part_pixels > self.max_pixels_per_request):
                    batches.append(batch)
                    batch, size, request_pixels = [], 0, 0
                batch.append((g, part, positions))
                size += len(part["edited"])
                request_pixels += part_pixels
        if batch:
            batches.append(batch)
        return batches

    def _score_encoded_groups(self, groups: list[dict], pixels: dict[str, int], keys: Sequence[str] | None = None,
                              isolate: bool = False) -> list[list]:
        """Each group whole to one replica (bounded-load rendezvous on its key), the replicas concurrently; the
        groups of a replica that is down go to another one until none is left."""
        keys = [_content_key(g) for g in groups] if keys is None else [str(k) for k in keys]
        if len(keys) != len(groups):
            raise ValueError(f"got {len(keys)} keys for {len(groups)} groups")
        out: list[list] = [[None] * len(g["edited"]) for g in groups]
        tried: list[set] = [set() for _ in groups]
        errors: dict = {}
        remaining = list(range(len(groups)))
        while remaining:
            candidates = [self.replicas.candidates(tried[g]) for g in remaining]
            if not all(candidates):
                raise RewardReplicasDown(errors)
            chosen = assign_groups([keys[g] for g in remaining], [len(groups[g]["edited"]) for g in remaining],
                                   candidates, self.base_urls, self.balance_slack)
            plan: dict[int, list[int]] = {}
            for g, replica in zip(remaining, chosen):
                plan.setdefault(replica, []).append(g)
                tried[g].add(replica)

            def run(replica: int):
                return self._score_on_replica(replica, plan[replica], groups, pixels, out, isolate)

            if len(plan) == 1:
                outcomes = [run(next(iter(plan)))]
            else:
                with ThreadPoolExecutor(len(plan), thread_name_prefix="reward-replica") as pool:
                    outcomes = list(pool.map(run, plan))
            remaining = []
            for replica, (left, error) in zip(plan, outcomes):
                if error is None:
                    self.replicas.mark_up(replica)
                    continue
                self.replicas.mark_down(replica, error.message)
                errors[self.shown_urls[replica]] = error
                remaining += left
            remaining.sort()
        return out

    def _score_on_replica(self, replica: int, indices: list[int], groups: list[dict], pixels: dict[str, int],
                          out: list[list], isolate: bool) -> tuple[list[int], RewardServerError | None]:
        """Send the groups ``indices`` to one replica, request by request. Returns ``([], None)``, or the groups
        not finished when the replica turned out to be down, with its error (their slots are cleared)."""
        batches = self._requests(indices, groups, pixels)
        for k, batch in enumerate(batches):
            try:
                self._send(replica, batch, out, isolate)
            except RewardServerError as err:
                if not _is_down(err):
                    raise
                left = sorted({g for later in batches[k:] for g, _, _ in later})
                for g in left:
                    out[g] = [None] * len(groups[g]["edited"])
                return left, err
        return [], None

    def _send(self, replica: int, batch: list[tuple], out: list[list], isolate: bool) -> None:
        """One ``/v1/score_groups`` request; its results go into ``out``, each by its ``group`` / ``index``."""
        path = "/v1/score_groups"
        try:
            response = self._request("POST", path, replica=replica, json={"groups": [part for _, part, _ in batch]})
        except RewardServerError as err:
            if not isolate or _is_down(err) or err.status in SETUP_STATUSES or err.kind == "redirect":
                raise
            self._isolate(replica, batch, err, out)
            return
        answer, repeated = self._json(response, replica, path)
        results = answer.get("results") if isinstance(answer, dict) else None
        where = f"{self.shown_urls[replica]}{path}"
        if isinstance(answer, dict) and "results" in repeated.get(id(answer), {}):
            if not isolate:
                raise RewardServerError(200, f"{where} answered with 'results' twice: ambiguous", kind="ambiguous")
            for g, _, positions in batch:  # nothing says which list holds the scores: every edit fails
                for position in positions:
                    out[g][position] = RewardServerError(200, "duplicate_key:results", kind="ambiguous")
            return
        for (g, _, positions), labelled in zip(batch, results_by_label(results, batch, where)):
            for position, result in zip(positions, labelled):
                twice = sorted(repeated.get(id(result), {}))
                if twice and not isolate:
                    raise RewardServerError(200, f"{where}: a result repeats {', '.join(twice)}: ambiguous",
                                            kind="ambiguous")
                result = {k: v for k, v in result.items() if k not in ("group", "index")}
                out[g][position] = RewardServerError(200, f"duplicate_key:{twice[0]}", kind="ambiguous") if twice \
                    else result

    def _isolate(self, replica: int, batch: list[tuple], error: RewardServerError, out: list[list]) -> None:
        """After an error of a request: the edits it names fail, and the rest is sent again; an error naming
        nothing splits the request (groups apart, then one edit at a time) until the failing edits are found."""
        match = _SAMPLE_FIELD.match(error.field or "")
        named = int(match.group(1)) if match and match.group(1) is not None else None
        if named is not None and named < len(batch):
            g, part, positions = batch[named]
            edit = int(match.group(2)) if match.group(2) is not None else None
            failing = range(len(positions)) if edit is None or edit >= len(positions) else [edit]
            for j in failing:
                out[g][positions[j]] = error
            kept = [j for j in range(len(positions)) if j not in failing]
            rest = batch[:named] + batch[named + 1:]
            if kept:
                rest.insert(named, (g, {**part, "edited": [part["edited"][j] for j in kept]},
                                    [positions[j] for j in kept]))
            if rest:
                self._send(replica, rest, out, True)
            return
        if len(batch) == 1 and len(batch[0][2]) == 1:
            g, _, positions = batch[0]
            out[g][positions[0]] = error
            return
        if len(batch) > 1:
            pieces = [[entry] for entry in batch]
        else:
            g, part, positions = batch[0]
            pieces = [[(g, {**part, "edited": [image]}, [position])]
                      for image, position in zip(part["edited"], positions)]
        for piece in pieces:
            self._send(replica, piece, out, True)


__all__ = ["EncodeCache", "ReplicaHealth", "RewardClient", "RewardReplicasDown", "RewardServerError",
           "as_image_list", "assign_groups", "encode_image", "preference_order",
           "results_by_label", "server_error", "source_list"]
