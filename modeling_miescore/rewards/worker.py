"""Rewards computed in the background: batch k is scored while batch k+1 is sampled.

:class:`RewardWorker` runs an :class:`~.groups.EditorReward` on one worker thread (a reward model on
another device, an HTTP reward server, a callable); :meth:`RewardWorker.submit` returns a :class:`RewardFuture`
(a ``concurrent.futures.Future``) of the groups' scores. Calls run one at a time, in submission order::

    with RewardWorker(build_reward("serve:http://gpu-a:8000,http://gpu-b:8000")) as worker:
        pending = worker.submit(groups_k)          # scored while the policy samples batch k+1
        groups_next = sample(batch_k_plus_1)
        scores = pending.result()                  # raises what the reward raised (RewardUnavailableError, ...)
        log(reward_s=pending.reward_seconds, waited_s=pending.waited_seconds)
    worker.timing.hidden_fraction                  # share of the reward time the sampling hid

A reward's exception, any ``BaseException``, reaches the caller through the future's ``result()``: a reward that
raises ``SystemExit``, or calls ``os._exit`` (:class:`RewardExitError`; one from C code cannot be caught), fails its
call and does not end the run. A result that does not fit the groups is a ``ValueError`` there.

Leaving the ``with`` block by an exception cancels the calls not started and waits (up to ``drain_seconds``) for
the running one: a reward thread still inside torch when the interpreter exits aborts the process ("terminate
called without an active exception", SIGABRT, seen once in nine runs whose reward failed while the next batch was
being scored). The thread is a daemon, so a call that hangs past that still cannot keep the process alive;
:func:`reward_calls_running` tells the recipe to end the process without finalising the interpreter then.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import List, Optional, Sequence

from .groups import EditGroup, EditorReward, GroupScores, checked_scores, reward_range_of

__all__ = ["RewardExitError", "RewardWorker", "RewardFuture", "RewardTiming", "reward_calls_running",
           "reward_error"]

THREAD_NAME = "editor-reward"  # its threads' ``call_pid``: the process's id while a reward call runs, else None
_process_exit = os._exit


class RewardExitError(RuntimeError):
    """A reward called ``os._exit`` while the worker ran it (the call fails; the process goes on)."""


def _guarded_exit(status: int) -> None:
    """``os._exit``, except on a reward worker inside a call: there it raises :class:`RewardExitError`."""
    if getattr(threading.current_thread(), "call_pid", None) == os.getpid():  # a forked child exits as it means to
        raise RewardExitError(f"called os._exit({status}), which would have ended the run without a word")
    _process_exit(status)


def reward_calls_running() -> bool:
    """Whether a reward call is still running on a worker thread (one that did not finish while its worker was
    closed after a failure)."""
    return any(t.name == THREAD_NAME and t.is_alive() and getattr(t, "call_pid", None) is not None
               for t in threading.enumerate())


def reward_error(future: Future, error: BaseException) -> Optional[str]:
    """What ``future.result()`` raising ``error`` says when the reward raised it (the trainer and ``miescore edit
    --select`` stop on it with this text): ``"Type: message"``, or for a ``SystemExit`` / ``KeyboardInterrupt``
    of the reward's own code that it was raised inside the reward; None when ``error`` is the caller's own (a
    Ctrl-C or a timeout while waiting, a cancelled call)."""
    if not future.done() or future.cancelled() or future.exception(timeout=0) is not error:
        return None
    if not isinstance(error, Exception):
        return f"raised {type(error).__name__}({error!r}) inside the reward, which must not end the run"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


@dataclass
class RewardTiming:
    """Totals over a worker's calls: ``reward_s`` (seconds the reward ran), ``waited_s`` (seconds callers were
    blocked in ``result()``, queueing behind earlier calls included); ``hidden_s`` is the reward time that
    overlapped other work."""

    calls: int = 0
    failed_calls: int = 0
    reward_s: float = 0.0
    waited_s: float = 0.0

    @property
    def hidden_s(self) -> float:
        return max(0.0, self.reward_s - self.waited_s)

    @property
    def hidden_fraction(self) -> float:
        return self.hidden_s / self.reward_s if self.reward_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {"calls": self.calls, "failed_calls": self.failed_calls, "reward_s": self.reward_s,
                "waited_s": self.waited_s, "hidden_s": self.hidden_s, "hidden_fraction": self.hidden_fraction}


class RewardFuture(Future):
    """The scores of one :meth:`RewardWorker.submit`; ``reward_seconds`` (how long the reward ran, once done) and
    ``waited_seconds`` (how long ``result()`` blocked, over all its calls) are what a trainer logs per step."""

    def __init__(self, worker: "RewardWorker"):
        super().__init__()
        self._worker = worker
        self.reward_seconds: Optional[float] = None
        self.waited_seconds = 0.0

    def result(self, timeout: Optional[float] = None) -> List[GroupScores]:
        started = time.perf_counter()
        try:
            return super().result(timeout)
        finally:
            waited = time.perf_counter() - started
            self.waited_seconds += waited
            self._worker._add_wait(waited)


def check_scores(scores, groups: Sequence[EditGroup], name: str, value_range=None) -> List[GroupScores]:
    """``scores`` if it is one :class:`GroupScores` per group with one slot per edit (else a ``ValueError``), each
    reward that is not a finite real number inside ``value_range`` (the reward's declared ``reward_range``)
    turned into a failed sample (:func:`~.groups.checked_scores`): whatever a reward returns, only real
    numbers become a training signal."""
    scores = list(scores) if isinstance(scores, (list, tuple)) else scores
    if not isinstance(scores, list) or len(scores) != len(groups):
        count = len(scores) if isinstance(scores, list) else type(scores).__name__
        raise ValueError(f"reward {name!r} returned {count} results for {len(groups)} groups; it must return one "
                         "GroupScores per group")
    for g, (score, group) in enumerate(zip(scores, groups)):
        if not isinstance(score, GroupScores) or len(score.rewards) != len(group.edits):
            size = len(score.rewards) if isinstance(score, GroupScores) else type(score).__name__
            raise ValueError(f"reward {name!r} returned {size} rewards for the {len(group.edits)} edits of group {g}")
    return [checked_scores(score, value_range) for score in scores]


class RewardWorker:
    """``submit(groups) -> RewardFuture`` on one background thread (calls run in submission order). Use as a
    context manager, or call :meth:`close`: it waits for pending calls, then closes the reward; leaving the
    ``with`` block by an exception cancels calls not started yet and waits at most ``drain_seconds`` for the
    running one (module docstring)."""

    def __init__(self, reward: EditorReward, drain_seconds: float = 60.0):
        self.reward = reward
        self.timing = RewardTiming()
        self.drain_seconds = float(drain_seconds)
        self._lock = threading.Lock()
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._closed = False
        os._exit = _guarded_exit  # idempotent; outside a reward call it is os._exit itself
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.call_pid = None
        self._thread.start()

    def submit(self, groups: Sequence[EditGroup]) -> RewardFuture:
        with self._lock:
            if self._closed:
                raise RuntimeError("this RewardWorker is closed; create a new one")
            future = RewardFuture(self)
            self._queue.put((future, list(groups)))
        return future

    def _add_wait(self, seconds: float) -> None:
        with self._lock:
            self.timing.waited_s += seconds

    def _run(self) -> None:
        name = getattr(self.reward, "name", type(self.reward).__name__)
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, groups = item
            if not future.set_running_or_notify_cancel():
                continue
            started = time.perf_counter()
            self._thread.call_pid = os.getpid()
            try:
                scores = check_scores(self.reward.score_groups(groups), groups, name, reward_range_of(self.reward))
            except BaseException as error:  # noqa: BLE001 - every failure goes to the caller through the future
                self._finish(future, started, failed=True)
                future.set_exception(error)
            else:
                self._finish(future, started, failed=False)
                future.set_result(scores)
            finally:
                self._thread.call_pid = None

    def _finish(self, future: RewardFuture, started: float, failed: bool) -> None:
        future.reward_seconds = time.perf_counter() - started
        with self._lock:
            self.timing.calls += 1
            self.timing.failed_calls += int(failed)
            self.timing.reward_s += future.reward_seconds

    def close(self, cancel_pending: bool = False, timeout: Optional[float] = None) -> None:
        """Stop the worker (idempotent): with ``cancel_pending`` the calls not started are cancelled; waits up to
        ``timeout`` seconds (None: until done) for the thread, then closes the reward."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if cancel_pending:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            self._queue.put(None)
        self._thread.join(timeout)
        self.reward.close()

    def __enter__(self) -> "RewardWorker":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:  # the running call is waited for (bounded): never left inside torch at interpreter exit
            self.close(cancel_pending=True, timeout=self.drain_seconds)
