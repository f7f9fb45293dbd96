"""One retry policy for every HTTP client in the package (the reward-server client and the OpenAI-compatible
chat client), built on ``tenacity``.

A request is retried when it raises one of ``policy.exceptions`` (timeouts, refused connections) or answers
with one of ``policy.statuses`` (429, 503, ...). The wait before retry ``k`` (0-based) is the server's
``Retry-After`` when it sends one (delta-seconds or an HTTP date, RFC 9110 sec. 10.2.3), otherwise
``backoff * 2**k`` with up to 10 % jitter so that parallel callers do not retry in lock-step; every wait is
capped at ``max_backoff``. The caller gets the last response or the last exception, and the number of
attempts, and maps them to its own error type.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tenacity import RetryCallState, Retrying, retry_if_exception_type, retry_if_result, stop_after_attempt

__all__ = ["RetryPolicy", "Attempted", "send_with_retries", "retry_after_seconds"]


def retry_after_seconds(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header value (delta-seconds or HTTP date); None if absent/unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """What to retry and how long to wait.

    Args:
        max_retries: extra attempts after the first (0 disables retries).
        backoff: first wait in seconds when the server gives no ``Retry-After``; doubles per attempt.
        max_backoff: cap on any single wait, a server's ``Retry-After`` included.
        statuses: HTTP statuses that are retried.
        exceptions: exception types that are retried (e.g. ``httpx.TransportError``).
        retryable: an optional further test on a response whose status is in ``statuses`` (False: answer it
            as it is; e.g. a 500 that names the one sample the model failed on will fail again).
    """

    max_retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 30.0
    statuses: frozenset = frozenset({408, 409, 429, 500, 502, 503, 504})
    exceptions: tuple = field(default=())
    retryable: Optional[Callable[[Any], bool]] = None

    def __post_init__(self):
        if int(self.max_retries) < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("max_retries, backoff and max_backoff must be >= 0")

    def wait_seconds(self, retry_index: int, response: Any = None) -> float:
        """The wait before retry ``retry_index`` (0-based) after ``response`` (None after an exception)."""
        if response is not None:
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
            if retry_after is not None:
                return min(retry_after, self.max_backoff)
        return min(self.backoff * (2 ** retry_index) * (1.0 + 0.1 * random.random()), self.max_backoff)


@dataclass
class Attempted:
    """The outcome of :func:`send_with_retries`: the last response, or the last exception, and the attempt count."""

    response: Any = None
    error: Optional[BaseException] = None
    attempts: int = 1


def send_with_retries(send: Callable[[], Any], policy: RetryPolicy, *,
                      on_retry: Optional[Callable[[Attempted, float], None]] = None,
                      sleep: Callable[[float], None] = time.sleep) -> Attempted:
    """Call ``send()`` (returns an object with ``status_code`` and ``headers``) under ``policy``.

    Exceptions outside ``policy.exceptions`` propagate at once; a retryable exception or status that is still
    there after the last attempt is returned in :class:`Attempted`, never raised. ``on_retry(outcome, wait)``
    is called before each wait (for logging).
    """

    def wait(state: RetryCallState) -> float:
        outcome = state.outcome
        response = None if outcome.failed else outcome.result()
        return policy.wait_seconds(state.attempt_number - 1, response)

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None:
            on_retry(_attempted(state), state.next_action.sleep)

    retrying = Retrying(
        stop=stop_after_attempt(int(policy.max_retries) + 1),
        wait=wait,
        retry=retry_if_exception_type(tuple(policy.exceptions))
        | retry_if_result(lambda response: response.status_code in policy.statuses
                          and (policy.retryable is None or policy.retryable(response))),
        retry_error_callback=_attempted,
        before_sleep=before_sleep,
        sleep=sleep,
    )
    result = retrying(send)
    if isinstance(result, Attempted):
        return result
    return Attempted(response=result, attempts=retrying.statistics.get("attempt_number", 1))


def _attempted(state: RetryCallState) -> Attempted:
    outcome = state.outcome
    if outcome.failed:
        return Attempted(error=outcome.exception(), attempts=state.attempt_number)
    return Attempted(response=outcome.result(), attempts=state.attempt_number)
