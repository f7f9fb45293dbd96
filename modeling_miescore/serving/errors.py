"""The one error type the reward server answers with: ``{"error": {"field", "message", "kind"}}`` + a status."""

from __future__ import annotations

__all__ = ["RequestError", "STATUS_CLIENT_CLOSED"]

STATUS_CLIENT_CLOSED = 499  # nginx's "client closed request": recorded, never sent (nobody is listening)


class RequestError(Exception):
    """An error answered to the client as ``{"error": {"field", "message", "kind"}}`` with ``status``.

    ``kind`` is one of :data:`~modeling_miescore.serving.prometheus_metrics.FAILURE_KINDS`; ``field`` names the
    offending part of the request (``"sources[1]"``, ``"groups[0].edited[2]"``, ``"body"``, a header) or is None.
    """

    def __init__(self, status: int, kind: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field
        self.headers = headers or {}

    def payload(self) -> dict:
        return {"error": {"field": self.field, "message": self.message, "kind": self.kind}}
