"""utils.http_bounds retries: Retry-After parsing (seconds and HTTP date), waits and caps, what is retried and what is
returned or raised after the last attempt. Sleeps are recorded, not slept."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from modeling_miescore.utils.http_bounds import Attempted, RetryPolicy, retry_after_seconds, send_with_retries


def test_retry_after_seconds_reads_both_forms():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(" 1.5 ") == 1.5
    assert retry_after_seconds("-3") == 0.0  # never a negative wait
    assert retry_after_seconds(None) is None and retry_after_seconds("") is None
    assert retry_after_seconds("soon") is None and retry_after_seconds("inf") is None
    assert retry_after_seconds("nan") is None
    now = 1_700_000_000.0
    assert retry_after_seconds(email.utils.formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: no wait


def test_policy_waits_follow_retry_after_or_backoff_and_are_capped():
    policy = RetryPolicy(backoff=0.5, max_backoff=3.0)
    assert policy.wait_seconds(0, httpx.Response(429, headers={"Retry-After": "2"})) == 2.0
    assert policy.wait_seconds(0, httpx.Response(429, headers={"Retry-After": "600"})) == 3.0
    for k in range(3):  # 0.5, 1, 2 s with up to 10 % jitter
        assert 0.5 * 2 ** k <= policy.wait_seconds(k, httpx.Response(503)) <= 0.55 * 2 ** k
        assert 0.5 * 2 ** k <= policy.wait_seconds(k) <= 0.55 * 2 ** k  # after an exception
    assert policy.wait_seconds(10) == 3.0
    with pytest.raises(ValueError, match=">= 0"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match=">= 0"):
        RetryPolicy(backoff=-0.1)


def _sender(outcomes):
    """``send()`` that answers (or raises) the given outcomes in turn; ``sent`` counts the calls."""
    state = {"sent": 0}

    def send():
        outcome = outcomes[min(state["sent"], len(outcomes) - 1)]
        state["sent"] += 1
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return send, state


def test_retryable_statuses_are_retried_with_the_servers_wait():
    send, state = _sender([httpx.Response(429, headers={"Retry-After": "1.5"}),
                           httpx.Response(503, headers={"Retry-After": "0"}), httpx.Response(200)])
    sleeps, retries = [], []
    outcome = send_with_retries(send, RetryPolicy(max_retries=3), sleep=sleeps.append,
                                on_retry=lambda attempted, wait: retries.append((attempted.response.status_code,
                                                                                 attempted.attempts, wait)))
    assert outcome.response.status_code == 200 and outcome.error is None
    assert outcome.attempts == 3 and state["sent"] == 3
    assert sleeps == [1.5, 0.0]
    assert retries == [(429, 1, 1.5), (503, 2, 0.0)]


def test_other_statuses_are_returned_at_once():
    send, state = _sender([httpx.Response(422)])
    sleeps = []
    outcome = send_with_retries(send, RetryPolicy(max_retries=5), sleep=sleeps.append)
    assert (outcome.response.status_code, outcome.attempts, state["sent"], sleeps) == (422, 1, 1, [])


def test_a_status_that_stays_is_returned_after_the_last_attempt():
    send, state = _sender([httpx.Response(503)])
    sleeps = []
    outcome = send_with_retries(send, RetryPolicy(max_retries=2, backoff=0.25), sleep=sleeps.append)
    assert isinstance(outcome, Attempted) and outcome.error is None
    assert (outcome.response.status_code, outcome.attempts, state["sent"]) == (503, 3, 3)
    assert len(sleeps) == 2 and 0.25 <= sleeps[0] <= 0.275 and 0.5 <= sleeps[1] <= 0.55


def test_retryable_exceptions_are_retried_then_returned_never_raised():
    refused = httpx.ConnectError("refused")
    send, state = _sender([refused, httpx.Response(200)])
    outcome = send_with_retries(send, RetryPolicy(max_retries=1, exceptions=(httpx.TransportError,)),
                                sleep=lambda s: None)
    assert outcome.response.status_code == 200 and outcome.attempts == 2

    send, state = _sender([httpx.ReadTimeout("slow")])
    outcome = send_with_retries(send, RetryPolicy(max_retries=2, exceptions=(httpx.TransportError,)),
                                sleep=lambda s: None)
    assert isinstance(outcome.error, httpx.ReadTimeout) and outcome.response is None
    assert outcome.attempts == 3 and state["sent"] == 3


def test_other_exceptions_propagate_without_a_retry():
    send, state = _sender([KeyError("bug")])
    with pytest.raises(KeyError):
        send_with_retries(send, RetryPolicy(max_retries=3, exceptions=(httpx.TransportError,)), sleep=lambda s: None)
    assert state["sent"] == 1


def test_zero_retries_sends_once():
    send, state = _sender([httpx.Response(429, headers={"Retry-After": "1"})])
    outcome = send_with_retries(send, RetryPolicy(max_retries=0), sleep=pytest.fail)
    assert (outcome.response.status_code, outcome.attempts, state["sent"]) == (429, 1, 1)
