"""Models of the Space, loaded on first use, once, however many requests arrive together."""

from __future__ import annotations

import threading
from typing import Any, Callable

from .inputs import SpaceInputError


class LazyModel:
    """Load a model on first use, once, from several threads safely; remember a failed load's message.

    ``loader(reference)`` returns the model. ``reference`` None means not configured: :meth:`get` then raises
    :class:`SpaceInputError` with ``not_configured`` as the message.
    """

    def __init__(self, reference: str | None, loader: Callable[[str], Any], not_configured: str):
        self.reference = reference or None
        self._loader = loader
        self._not_configured = not_configured
        self._lock = threading.Lock()
        self._model = None

    @property
    def configured(self) -> bool:
        return self.reference is not None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def get(self):
        if self._model is not None:
            return self._model
        if self.reference is None:
            raise SpaceInputError(self._not_configured)
        with self._lock:
            if self._model is None:
                # A load error is not cached: a missing file may appear, or the Hub come back, later.
                self._model = self._loader(self.reference)
        return self._model


__all__ = ["LazyModel"]
