"""What a ``miescore serve`` replica answers, read as the reward client needs it: its errors
(:class:`RewardServerError`, :class:`RewardReplicasDown`, a :class:`ScoringFailure` standing for one edit) and
its ``/v1/score_groups`` results matched to the request's edits by their ``group`` / ``index`` labels
(:func:`results_by_label`), for :mod:`modeling_miescore.serving.reward_client`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["RewardReplicasDown", "RewardServerError", "ScoringFailure", "results_by_label", "server_error"]


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


@dataclass(frozen=True)
class ScoringFailure:
    """Stands in a result list (``score_groups(..., isolate_failures=True)``) for one edit the server refused or
    failed on after the retries: its HTTP ``status``, the server's error ``kind`` and ``message``."""

    status: int
    kind: str | None
    message: str


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
