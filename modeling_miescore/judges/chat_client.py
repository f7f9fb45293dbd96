"""A small client for OpenAI-compatible chat-completion servers (vLLM, SGLang, LM Studio, OpenAI, Gemini's
OpenAI endpoint, ...), used by the SpatialReward API backend, the GRPO oracle judge and the call engine::

    client = ChatClient("http://127.0.0.1:8000/v1", model="Qwen/Qwen3-VL-8B-Instruct")
    text = client.chat([user_message(["Describe the edit.", source, edited])], max_tokens=256)

Bounds and retries are :mod:`modeling_miescore.utils.http_bounds`' (:class:`BoundedHTTPClient`): ``timeout`` is a
total deadline per attempt, an answer takes at most ``max_answer_bytes`` (:data:`DEFAULT_MAX_ANSWER_BYTES`) on the
wire and decompressed, and 408/409/429/5xx, timeouts and connection errors are retried (waiting the server's
``Retry-After`` or ``backoff * 2**attempt`` with jitter, capped at ``max_backoff``). Other 4xx answers, malformed
bodies, refusals (``message.refusal``) and answers over the limit are not retried: the same request gives the same
answer. Every failure is a :class:`ChatError` with a ``kind``. Lone surrogates in an answer's text are replaced
with U+FFFD (:attr:`ChatCompletion.repaired`).

The API key is read from the environment variable ``api_key_env`` when the client is made and sent only in the
``Authorization`` header; it and a URL's password never appear in ``repr``, logs or messages. Without the
variable no ``Authorization`` header is sent, as local servers expect. A client is safe to share between threads.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..utils import http_bounds
from ..utils.closing import ClosesOnExit
from ..utils.credentials import checked_api_key, redact, redacted_url, url_secrets
from ..utils.http_bounds import Attempted, RetryPolicy, send_with_retries
from ..utils.text_hygiene import valid_text
from ..hub.image_io import resize_to_budget, to_rgb

logger = logging.getLogger(__name__)

__all__ = ["BoundedHTTPClient", "ChatClient", "ChatCompletion", "ChatError", "DEFAULT_MAX_ANSWER_BYTES", "endpoint_url",
           "image_to_data_url", "refusal_hint", "server_error_text", "user_message", "RETRY_STATUSES"]

# 408 request timeout, 409 (vLLM answers it while a LoRA is being swapped), 429 rate limit, and every 5xx.
RETRY_STATUSES = frozenset({408, 409, 429, *range(500, 600)})
ERROR_KINDS = ("http", "timeout", "connection", "bad_response", "refusal", "too_large")
# The byte limit of one answer, sized for the longest answer any prompt here asks for: 2,048 tokens (the skill
# optimiser's answers, trainers/optimize_skill.py; the judge asks for 512, the data pipeline and MER-Bench
# synthesis for 1,024) x 128 bytes (the longest token of the Qwen vocabulary, qwen.tiktoken) x 6 (the worst JSON
# escape, a control byte written as \u00XX) = 1.5 MiB, rounded up to 2 MiB for the rest of the body. Real
# answers are far smaller (a Qwen token is 6.4 bytes on average).
DEFAULT_MAX_ANSWER_BYTES = 2 * 1024 * 1024
_MAX_TOKEN_COUNT = 2 ** 53  # a usage count above this is not a count (and would not fit an SQLite INTEGER)
_BODY_EXCERPT = 300  # characters of a server's error body kept in a ChatError message


class ChatError(RuntimeError):
    """A chat request failed for good (after the retries, if the failure was transient).

    Attributes:
        kind: ``"http"`` (non-2xx status), ``"timeout"`` (the request's deadline passed), ``"connection"``
            (refused / reset / DNS), ``"bad_response"`` (2xx with a body that is not a chat completion),
            ``"refusal"`` (the model declined: the message has a ``refusal`` text and no content) or
            ``"too_large"`` (the body is over ``max_answer_bytes``).
        status: the HTTP status code for ``"http"``, ``"bad_response"`` and ``"refusal"``, else None.
        attempts: number of requests sent.
    """

    def __init__(self, message: str, kind: str, status: Optional[int] = None, attempts: int = 1):
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown ChatError kind {kind!r}; expected one of {ERROR_KINDS}")
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = attempts


def _excerpt(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _BODY_EXCERPT else text[:_BODY_EXCERPT] + "..."


class _Refusal(ValueError):
    """The answer is a refusal (``message.refusal`` set, no content)."""


def _message_text(payload: Any) -> str:
    """The first choice's text; raises ValueError naming what is missing (:class:`_Refusal` for a refusal)."""
    if not isinstance(payload, dict):
        raise ValueError(f"the body is a JSON {type(payload).__name__}, not an object")
    if "error" in payload and "choices" not in payload:
        raise ValueError(f"the body is an error object: {_excerpt(json.dumps(payload['error']))}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("the body has no 'choices' list (or it is empty)")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise ValueError("choices[0] has no 'message' object")
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers return content parts even for text
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "".join(texts)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise _Refusal(f"the model refused: {_excerpt(refusal)}")
    raise ValueError("choices[0].message.content is missing or not text")


def _token_count(usage: Any, name: str) -> Optional[int]:
    value = usage.get(name) if isinstance(usage, dict) else None
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_TOKEN_COUNT
    return value if valid else None


@dataclass(frozen=True)
class ChatCompletion:
    """One answer: the first choice's ``text``, the token counts of the response's ``usage`` field (None when
    the server sends none), its ``finish_reason`` (``"length"``: cut off at ``max_tokens``), the number of
    requests sent (``attempts`` > 1 after retries) and ``repaired`` (lone surrogates in the text were replaced
    with U+FFFD)."""

    text: str
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    attempts: int = 1
    repaired: bool = False
    model: Optional[str] = None  # the model name the endpoint reports in its answer

    @classmethod
    def from_payload(cls, payload: Any, attempts: int = 1) -> "ChatCompletion":
        raw_text = _message_text(payload)  # validates the shape first
        text = valid_text(raw_text)
        usage = payload.get("usage")
        first = payload["choices"][0]
        reason = first.get("finish_reason")
        reason = valid_text(reason)[:64] if isinstance(reason, str) else None
        model = payload.get("model")
        return cls(text, _token_count(usage, "prompt_tokens"), _token_count(usage, "completion_tokens"),
                   reason, attempts, repaired=text is not raw_text,
                   model=valid_text(model)[:200] if isinstance(model, str) else None)


class BoundedHTTPClient(ClosesOnExit):
    """An ``httpx`` client for a server we do not control, within :mod:`~modeling_miescore.utils.http_bounds`: each
    attempt takes at most ``timeout`` seconds in all, each answer at most ``max_answer_bytes``, retried as
    ``retry_policy`` says; ``api_key`` goes as a Bearer token, and :meth:`masked` hides it and the ``urls``'
    credentials (servers echo them). The chat client and the reward client (``serving.reward_client``) are ones."""

    def __init__(self, urls: Sequence[str], api_key: Optional[str], api_key_env: str, timeout: float,
                 max_answer_bytes: int, retry_policy: RetryPolicy, headers: Optional[Dict[str, str]] = None,
                 transport=None, **client_args: Any):
        request_headers = {"Accept-Encoding": http_bounds.accept_encoding(), **(headers or {})}
        if api_key:
            request_headers["Authorization"] = f"Bearer {checked_api_key(api_key, api_key_env)}"
        # the URLs' passwords, query keys and the Basic auth httpx sends for them
        self._secrets = tuple(s for s in (api_key, *(s for url in urls for s in url_secrets(url))) if s)
        self.timeout, self.max_answer_bytes = float(timeout), int(max_answer_bytes)
        self.retry_policy = retry_policy
        # a test's transport (httpx.MockTransport) has no connection pool to bound; real ones go through the deadline
        make = functools.partial(httpx.Client, transport=transport) if transport else http_bounds.deadline_client
        self._client = make(timeout=httpx.Timeout(self.timeout), headers=request_headers, **client_args)

    def masked(self, text: Any) -> str:
        return redact(str(text), self._secrets)

    def close(self) -> None:
        self._client.close()

    def exchange(self, method: str, url: str, on_retry=None, **request_args: Any) -> Attempted:
        """One request under :attr:`retry_policy`, each attempt within the deadline and the byte limit. A retryable
        failure still there after the retries is returned (:class:`~modeling_miescore.utils.http_bounds.Attempted`);
        ``AnswerTooLarge`` and ``BadBody`` are raised with the requests sent as their ``attempts``."""
        attempts = 0

        def send():
            nonlocal attempts
            attempts += 1
            with http_bounds.request_deadline(self.timeout), self._client.stream(method, url, **request_args) as answer:
                return http_bounds.read_bounded_body(answer, self.max_answer_bytes)

        try:
            return send_with_retries(send, self.retry_policy, on_retry=on_retry)
        except (http_bounds.AnswerTooLarge, http_bounds.BadBody) as err:
            err.attempts = attempts
            raise


class ChatClient(BoundedHTTPClient):
    """Client for ``POST {base_url}/chat/completions``.

    Args:
        base_url: server root including the API prefix, e.g. ``http://127.0.0.1:8000/v1``.
        model: model name sent in every request.
        api_key_env: environment variable holding the API key (read once, here). Unset or empty: no
            ``Authorization`` header (local servers). A key that cannot be sent is a ``ValueError``.
        timeout: seconds one request attempt may take in all: connecting, sending, the headers and the body.
        max_retries: extra attempts after the first one for transient failures (0 disables retries).
        backoff: first retry wait in seconds; doubles per attempt.
        max_backoff: cap of any single wait, including a server's ``Retry-After``.
        headers: extra HTTP headers (e.g. an organisation id).
        max_answer_bytes: the most bytes one answer's body may take, on the wire and decompressed.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 2, backoff: float = 0.5, max_backoff: float = 30.0,
                 headers: Optional[Dict[str, str]] = None, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {redact(repr(base_url))} "
                             "(e.g. http://127.0.0.1:8000/v1)")
        if not model or not isinstance(model, str):
            raise ValueError("model must be a non-empty string: the model name the server expects")
        if not (timeout > 0) or not math.isfinite(timeout):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if isinstance(max_answer_bytes, bool) or not isinstance(max_answer_bytes, int) or max_answer_bytes < 1:
            raise ValueError(f"max_answer_bytes must be a positive integer, got {max_answer_bytes!r}")
        self.base_url = base_url.rstrip("/")
        self.url = endpoint_url(self.base_url, "chat/completions")
        self.shown_url = redacted_url(self.url)  # what messages, logs and reprs show
        self.model = model
        self.api_key_env = api_key_env
        api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        self.has_api_key = bool(api_key)
        super().__init__([self.base_url], api_key, api_key_env, timeout, max_answer_bytes, RetryPolicy(
            max_retries=int(max_retries), backoff=float(backoff), max_backoff=float(max_backoff),
            statuses=RETRY_STATUSES, exceptions=(httpx.TransportError,)),  # timeouts included
            headers={"Content-Type": "application/json", **(headers or {})},
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))

    def __repr__(self) -> str:  # never shows the key
        return (f"ChatClient(base_url={redacted_url(self.base_url)!r}, model={self.model!r}, "
                f"api_key={'set' if self.has_api_key else 'none'}, timeout={self.timeout}, "
                f"max_retries={self.retry_policy.max_retries}, max_answer_bytes={self.max_answer_bytes})")

    def _shown(self, text: Any) -> str:
        """One excerpt line of ``text`` with the key and URL credentials masked."""
        return _excerpt(self.masked(text))

    # -- requests -----------------------------------------------------------------------------------------------
    def chat(self, messages: Sequence[Dict[str, Any]], temperature: float = 0.0, max_tokens: int = 1024,
             **extra: Any) -> str:
        """Send one chat completion request and return the first choice's message text.

        ``messages``: OpenAI chat messages (see :func:`user_message` for images). ``extra`` is merged into the
        JSON body (``top_p``, ``seed``, ``response_format``, ``stop``, ...). Raises :class:`ChatError`.
        """
        return self.complete(messages, temperature=temperature, max_tokens=max_tokens, **extra).text

    def complete(self, messages: Sequence[Dict[str, Any]], temperature: Optional[float] = 0.0,
                 max_tokens: Optional[int] = 1024, **extra: Any) -> ChatCompletion:
        """Like :meth:`chat`, but returns the :class:`ChatCompletion` (text, token usage, finish reason).
        ``temperature`` / ``max_tokens`` None: the field is not sent (the endpoint's default applies)."""
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
        body = {"model": self.model, "messages": list(messages),
                **({} if temperature is None else {"temperature": temperature}),
                **({} if max_tokens is None else {"max_tokens": max_tokens}), **extra}
        payload, status, attempts = self.post_json("/chat/completions", body, what="a chat completion")
        try:
            return ChatCompletion.from_payload(payload, attempts=attempts)
        except _Refusal as err:
            raise ChatError(f"{self.shown_url}: {self._shown(err)}", "refusal", status, attempts=attempts) from None
        except (ValueError, UnicodeDecodeError) as err:
            raise ChatError(f"{self.shown_url}: HTTP {status} but not a chat completion: {self._shown(err)}",
                            "bad_response", status, attempts=attempts) from None

    def post_json(self, path: str, body: Dict[str, Any], what: str = "an answer") -> tuple:
        """POST ``body`` to ``{base_url}{path}`` (``"/chat/completions"``; a path starting with ``"//"`` is taken
        from the server's root instead, e.g. ``"//classify"`` for vLLM's pooling endpoints), with this client's
        deadline, retries and byte limit. Returns ``(the JSON body, status, requests sent)``; raises
        :class:`ChatError` as :meth:`complete` does (``what`` names the expected body in its messages)."""
        if path.startswith("//"):  # from the server's root: the API prefix replaced, the query kept
            url = urlunsplit(urlsplit(self.base_url)._replace(path=path[1:]))
        else:
            url = endpoint_url(self.base_url, path)
        shown = redacted_url(url)
        content = json.dumps(body, allow_nan=False).encode("ascii")  # ASCII: a lone surrogate is an escape
        try:
            outcome = self.exchange("POST", url, self._log_retry, content=content)
        except http_bounds.AnswerTooLarge as err:
            raise ChatError(f"{shown}: {err} (raise max_answer_bytes, --max-answer-bytes on the command "
                            "line, if such answers are expected)", "too_large", attempts=err.attempts) from None
        except http_bounds.BadBody as err:
            raise ChatError(f"{shown}: the answer's body cannot be decoded: {self._shown(err)}",
                            "bad_response", attempts=err.attempts) from None
        if outcome.error is not None:
            raise self._transport_error(outcome.error, outcome.attempts, shown)
        response, status = outcome.response, outcome.response.status_code
        if not 200 <= status < 300:
            raise ChatError(f"{shown}: HTTP {status}: {self._shown(server_error_text(response.text))}"
                            f"{refusal_hint(response.text, self.base_url)}", "http", status, attempts=outcome.attempts)
        try:
            return json.loads(response.content), status, outcome.attempts
        except RecursionError:
            raise ChatError(f"{shown}: HTTP {status} but the body is nested too deeply to be {what}",
                            "bad_response", status, attempts=outcome.attempts) from None
        except (ValueError, UnicodeDecodeError) as err:  # json.JSONDecodeError is a ValueError
            raise ChatError(f"{shown}: HTTP {status} but not {what}: {self._shown(err)}; body "
                            f"starts {self._shown(response.text)!r}", "bad_response", status,
                            attempts=outcome.attempts) from None

    def _transport_error(self, error: BaseException, attempts: int, shown: Optional[str] = None) -> ChatError:
        shown = shown or self.shown_url
        if isinstance(error, httpx.TimeoutException):
            return ChatError(f"{shown}: no complete answer within {self.timeout:g} s "
                             f"({type(error).__name__}); raise the timeout or check the server load", "timeout",
                             attempts=attempts)
        return ChatError(f"{shown}: connection failed ({type(error).__name__}: {self._shown(error)}); "
                         "check that the server runs and base_url is right", "connection", attempts=attempts)

    def _log_retry(self, outcome: Attempted, wait: float) -> None:
        if outcome.error is not None:
            failure = self._transport_error(outcome.error, outcome.attempts)
        else:
            failure = f"HTTP {outcome.response.status_code}"
        logger.info("chat request failed (%s); retry %d/%d in %.2f s", failure, outcome.attempts,
                    self.retry_policy.max_retries, wait)


def server_error_text(body: str) -> str:
    """The message of an error body: ``error.message`` of an OpenAI-style JSON error (vLLM, SGLang, OpenAI), else
    ``message`` / ``detail``, else the body itself."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return body
    error = payload.get("error") if isinstance(payload, dict) else None
    for holder, key in ((error, "message"), (payload, "message"), (payload, "detail")):
        if isinstance(holder, dict) and isinstance(holder.get(key), str) and holder[key].strip():
            return holder[key]
    return body


# What a server's refusal means for a request of ours and what to change (vLLM 0.32's messages; others match none).
_REFUSAL_HINTS = (
    (re.compile(r"At most \d+ image\(s\) may be provided", re.I),
     "this request has more images than the server allows per prompt: restart it with a larger "
     "--limit-mm-per-prompt '{{\"image\": N}}' (a SpatialReward prompt has the sources + the edited image)"),
    (re.compile(r"maximum context length", re.I),
     "the prompt is longer than the server's context: restart it with a larger --max-model-len, or lower the "
     "image budget (max_pixels)"),
    (re.compile(r"max_tokens=\d+ cannot be greater than max_model_len", re.I),
     "the answer budget is larger than the server's context: lower max_tokens (SpatialReward: max_new_tokens), or "
     "restart the server with a larger --max-model-len"),
    (re.compile(r"model .{0,200} does not exist", re.I | re.S),
     "the server does not serve this model name: GET {models} lists the names it serves"),
)


def refusal_hint(body: str, base_url: str) -> str:
    """``"; <what to change>"`` for a server refusal we recognise (:data:`_REFUSAL_HINTS`), else ``""``."""
    text = server_error_text(body)[:4096]
    for pattern, hint in _REFUSAL_HINTS:
        if pattern.search(text):
            return "; " + hint.format(models=redacted_url(base_url.rstrip("/") + "/models"))
    return ""


def endpoint_url(base_url: str, path: str) -> str:
    """``base_url`` with ``path`` appended to its path, its query (``?key=...``, as Gemini's OpenAI endpoint takes
    an API key) kept at the end: ``https://h/v1?key=K`` + ``chat/completions`` -> ``https://h/v1/chat/completions?
    key=K``."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path.lstrip("/")))


def image_to_data_url(pil_image, format: str = "PNG", max_pixels: Optional[int] = None, quality: int = 90) -> str:
    """Encode a PIL image as a ``data:image/...;base64,`` URL for an ``image_url`` content part.

    ``format``: ``"PNG"`` (lossless) or ``"JPEG"``/``"WEBP"`` (``quality`` applies; about 5-10x smaller requests).
    ``max_pixels``: if given, the image is first downscaled (aspect ratio kept) to at most that many pixels
    (:func:`~modeling_miescore.hub.image_io.resize_to_budget`).
    Modes other than RGB/L (RGBA, P, CMYK, 16-bit, ...) are converted to RGB.
    """
    from PIL import Image

    if not isinstance(pil_image, Image.Image):
        raise TypeError(f"image_to_data_url needs a PIL.Image.Image, got {type(pil_image).__name__}")
    fmt = format.upper()
    if fmt == "JPG":
        fmt = "JPEG"
    if fmt not in ("PNG", "JPEG", "WEBP"):
        raise ValueError(f"format must be PNG, JPEG or WEBP, got {format!r}")

    image = pil_image if pil_image.mode in ("RGB", "L") else to_rgb(pil_image)
    if max_pixels is not None:
        image = resize_to_budget(image, max_pixels)
    buffer = io.BytesIO()
    if fmt == "PNG":  # zlib level 1: ~3x faster than Pillow's default 6, ~10 % larger, the same pixels
        image.save(buffer, format="PNG", compress_level=1)
    else:
        image.save(buffer, format=fmt, quality=int(quality))
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f"data:image/{fmt.lower()};base64,{encoded}"


def user_message(text_and_images: List[Any], image_format: str = "PNG", max_pixels: Optional[int] = None) -> dict:
    """A ``{"role": "user", "content": [...]}`` message from strings and PIL images, in the given order.

    Strings become ``{"type": "text", "text": ...}`` parts; PIL images become
    ``{"type": "image_url", "image_url": {"url": data_url}}`` parts (see :func:`image_to_data_url`).
    Already-built content-part dicts are passed through.
    """
    from PIL import Image

    if isinstance(text_and_images, (str, Image.Image)):
        text_and_images = [text_and_images]
    parts: List[dict] = []
    for index, item in enumerate(text_and_images):
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, Image.Image):
            url = image_to_data_url(item, format=image_format, max_pixels=max_pixels)
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(item, dict) and "type" in item:
            parts.append(item)
        else:
            raise TypeError(f"user_message item {index} is a {type(item).__name__}; "
                            "expected a str, a PIL image or a content-part dict")
    if not parts:
        raise ValueError("user_message needs at least one text or image")
    return {"role": "user", "content": parts}
