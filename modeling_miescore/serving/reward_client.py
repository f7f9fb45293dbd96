"""Client for the MIEScore reward server (``miescore serve``), one replica or several::

    from modeling_miescore.serving.reward_client import RewardClient

    with RewardClient("http://127.0.0.1:8000") as client:
        client.score(["src.png"], "edited.png", "Put the cat from image 1 on the sofa")   # -> dict of scores

    with RewardClient(["http://gpu-a:8000", "http://gpu-b:8000"]) as client:          # replicas
        client.score_groups([{"sources": [...], "instruction": "...", "edited": [...]}])  # one list per group

For RL loops, :func:`modeling_miescore.rewards.callables.make_reward_fn` wraps a client as a reward callable,
and the editor-RL reward ``serve:URL[,URL...]`` (:mod:`modeling_miescore.rewards.backends`) uses
it with ``isolate_failures=True``.

With several replicas, each group goes whole to one replica (its shared prefix then runs once there), chosen by
its key with bounded load (:mod:`~modeling_miescore.serving.replica_routing`); the replicas' requests run
concurrently. A replica that is unreachable, too slow or still overloaded after the retries is skipped for a
while and its groups go to the next one; when none is left, :class:`RewardReplicasDown` names each replica's
last error.

Images may be file paths, ``PIL.Image`` objects, numpy arrays (H, W[, C]) or torch tensors ((C, H, W) or
(H, W, C), floats in [0, 1] or uint8). Paths are sent as their file bytes; everything else is encoded as PNG
(:mod:`~modeling_miescore.serving.image_encoding`).
One ``httpx.Client`` per replica is kept open, so connections are reused. 429 and 503 answers are retried after their
``Retry-After`` (delta-seconds or an HTTP date; bounded by ``max_retry_wait``), and so are connection
failures (:mod:`modeling_miescore.utils.http_retry`).

Answers are read within the bounds of :mod:`modeling_miescore.utils.http_bounds`, as the judges' are: ``timeout``
is a total deadline per request attempt (connect, send, headers and body: a replica that trickles its answer a
byte at a time is stopped there), and at most ``max_answer_bytes`` come off the wire and out of the decompressor
(a gzip bomb is stopped, never inflated whole). Such a replica, one that answers a redirect (never followed) or
something that is not JSON is reported as what it is. A result is matched to its edit by the ``group`` / ``index``
the server labels it with, so a reordered answer is read right and one that does not cover the request is
refused; a key written twice in an answer is ambiguous (with ``isolate_failures``, the edits it concerns fail).
URLs are shown without their credentials (:mod:`modeling_miescore.utils.credentials`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from ..utils import http_bounds
from ..utils.credentials import checked_api_key, redact, redacted_url, url_secrets
from ..utils.http_retry import RetryPolicy, send_with_retries
from .image_encoding import EncodeCache, as_image_list, encode_image, source_list
from .reward_answers import RewardReplicasDown, RewardServerError, ScoringFailure, results_by_label, server_error
from .replica_routing import ReplicaHealth, assign_groups, preference_order
from .settings import ServerSettings

__all__ = ["RewardClient", "RewardServerError", "RewardReplicasDown", "ScoringFailure", "encode_image",
           "as_image_list"]

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


class RewardClient:
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
        import httpx

        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_samples_per_request < 1 or max_pixels_per_request < 1:
            raise ValueError("max_samples_per_request and max_pixels_per_request must be >= 1, got "
                             f"{max_samples_per_request} and {max_pixels_per_request}")
        if not float(timeout) > 0 or int(max_answer_bytes) < 1:
            raise ValueError(f"timeout and max_answer_bytes must be > 0, got {timeout} and {max_answer_bytes}")
        headers = {"Accept-Encoding": http_bounds.accept_encoding()}
        if api_key:
            headers["Authorization"] = f"Bearer {checked_api_key(api_key, api_key_env)}"
        self.base_urls = base_urls(base_url)
        self.base_url = self.base_urls[0]
        self.shown_urls = [redacted_url(u) for u in self.base_urls]  # what messages and logs show
        self.timeout = float(timeout)
        self.max_answer_bytes = int(max_answer_bytes)
        # the URLs' passwords, query keys and the Basic auth httpx sends for them, which a server may echo: masked
        self._secrets = tuple(dict.fromkeys(s for u in self.base_urls for s in url_secrets(u)))
        self._secrets += (api_key,) if api_key else ()
        # timeouts are not retried on the same replica: it may still be scoring, and a retry would double its load
        self.retry_policy = RetryPolicy(
            max_retries=max_retries, backoff=backoff, max_backoff=max_retry_wait, statuses=frozenset(retry_statuses),
            exceptions=(httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError),
            retryable=_names_no_sample)
        self.max_samples_per_request = max_samples_per_request
        self.max_pixels_per_request = max_pixels_per_request
        self.balance_slack = float(balance_slack)
        self.replicas = ReplicaHealth(self.base_urls, replica_cooldown_s)
        self._httpx = httpx
        # a test's transport (httpx.MockTransport) has no connection pool to bound; real ones go through the deadline
        make = (lambda **kw: httpx.Client(transport=transport, **kw)) if transport is not None else \
            http_bounds.deadline_client
        self._clients = [make(base_url=url, headers=headers, timeout=timeout) for url in self.base_urls]

    # -- plumbing

    def close(self):
        for client in self._clients:
            client.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc):
        self.close()

    def _shown(self, text) -> str:
        return redact(str(text), self._secrets)[:500]

    def _request(self, method: str, path: str, replica: int = 0, **kwargs) -> http_bounds.BoundedResponse:
        """One request (retried as :attr:`retry_policy` says), each attempt within ``timeout`` in total and its
        answer within ``max_answer_bytes``; a 3xx or 4xx/5xx answer raises :class:`RewardServerError`."""
        httpx = self._httpx
        url = self.shown_urls[replica]

        def on_retry(outcome, wait: float):
            what = outcome.error if outcome.error is not None else f"HTTP {outcome.response.status_code}"
            logger.info("reward server %s%s: %s; retry %d/%d in %.2f s", url, path, self._shown(what),
                        outcome.attempts, self.retry_policy.max_retries, wait)

        client = self._clients[replica]

        def send():
            with http_bounds.request_deadline(self.timeout), client.stream(method, path, **kwargs) as answer:
                return http_bounds.read_bounded_body(answer, self.max_answer_bytes)

        try:
            outcome = send_with_retries(send, self.retry_policy, on_retry=on_retry)
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
        from ..spatialreward_relaxed_json import loads_noting_duplicates

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
        encode = EncodeCache()
        groups: list[dict] = []
        positions: list[tuple[int, int]] = []  # sample -> (group, index in group)
        previous_key = None
        for sample in samples:
            if isinstance(sample, dict):
                sources, edited, instruction = sample["sources"], sample["edited"], sample["instruction"]
            else:
                sources, edited, instruction = sample
            sources = source_list(sources)
            key = (tuple(id(s) for s in sources), instruction)
            if key != previous_key:
                groups.append({"sources": [encode(s) for s in sources], "instruction": instruction, "edited": []})
                previous_key = key
            positions.append((len(groups) - 1, len(groups[-1]["edited"])))
            groups[-1]["edited"].append(encode(edited))
        grouped = self._score_encoded_groups(groups, encode.pixels)
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
                :class:`ScoringFailure`; otherwise the first such error raises :class:`RewardServerError`.
                Either way a wrong API key or URL raises, and so does :class:`RewardReplicasDown`.
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
                    out[g][position] = ScoringFailure(200, "ambiguous", "duplicate_key:results")
            return
        for (g, _, positions), labelled in zip(batch, results_by_label(results, batch, where)):
            for position, result in zip(positions, labelled):
                twice = sorted(repeated.get(id(result), {}))
                if twice and not isolate:
                    raise RewardServerError(200, f"{where}: a result repeats {', '.join(twice)}: ambiguous",
                                            kind="ambiguous")
                result = {k: v for k, v in result.items() if k not in ("group", "index")}
                out[g][position] = ScoringFailure(200, "ambiguous", f"duplicate_key:{twice[0]}") if twice else result

    def _isolate(self, replica: int, batch: list[tuple], error: RewardServerError, out: list[list]) -> None:
        """After an error of a request: the edits it names fail, and the rest is sent again; an error naming
        nothing splits the request (groups apart, then one edit at a time) until the failing edits are found."""
        failure = ScoringFailure(error.status, error.kind, error.message)
        match = _SAMPLE_FIELD.match(error.field or "")
        named = int(match.group(1)) if match and match.group(1) is not None else None
        if named is not None and named < len(batch):
            g, part, positions = batch[named]
            edit = int(match.group(2)) if match.group(2) is not None else None
            failing = range(len(positions)) if edit is None or edit >= len(positions) else [edit]
            for j in failing:
                out[g][positions[j]] = failure
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
            out[g][positions[0]] = failure
            return
        if len(batch) > 1:
            pieces = [[entry] for entry in batch]
        else:
            g, part, positions = batch[0]
            pieces = [[(g, {**part, "edited": [image]}, [position])]
                      for image, position in zip(part["edited"], positions)]
        for piece in pieces:
            self._send(replica, piece, out, True)


