"""The Space's models: which repos it serves (``space_models.json``), loading on first use, ZeroGPU.

``space_models.json`` sits beside the Space's ``app.py`` (``{"model": "org/miescore-8b" | null,
"spatialreward_model": ...}``); the app uses it when the environment (``MIESCORE_MODEL``,
``SPATIALREWARD_MODEL``) names no model. On ZeroGPU hardware a GPU is attached only while a function decorated
with ``spaces.GPU`` runs (the platform sets ``SPACES_ZERO_GPU``): models load at start-up on ``"cuda"`` and every
model call is decorated; elsewhere :func:`gpu_function` returns the function unchanged.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from ..hub.errors import MIEScoreInputError
from .inputs import SpaceInputError

SPACE_MODELS_FILE = "space_models.json"
_KEYS = ("model", "spatialreward_model")


def space_models_text(model: str | None, spatialreward_model: str | None) -> str:
    """The file's text for the two model references (None: not configured)."""
    return json.dumps({"model": model, "spatialreward_model": spatialreward_model}, indent=2) + "\n"


def read_space_models(folder: str | os.PathLike) -> dict:
    """``{"model": ..., "spatialreward_model": ...}`` from ``folder/space_models.json``; ``{}`` when absent.

    Raises :class:`MIEScoreInputError` naming the file when it is not the expected JSON object.
    """
    path = Path(folder) / SPACE_MODELS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MIEScoreInputError(f"'{path}' is unreadable ({err}); rebuild the Space folder with "
                                 "`miescore space build` or delete the file and set MIESCORE_MODEL") from None
    if not isinstance(data, dict) or any(not isinstance(data.get(k), (str, type(None))) for k in _KEYS):
        raise MIEScoreInputError(f"'{path}' must be a JSON object with string or null values for {list(_KEYS)}")
    return {key: data.get(key) or None for key in _KEYS}


MIESCORE_CHOICE, SPATIALREWARD_CHOICE = "MIEScore", "SpatialReward"


def model_choices(model: str | None, spatialreward_model: str | None) -> tuple[list[str], str]:
    """``(choices, default)`` of the Space's model choice: the configured models only, so nobody picks a model that
    is not there and learns it from an error. With one choice (or none configured: then MIEScore, whose panel says
    how to configure one) the app hides the choice; the status line names the model that is missing."""
    choices = [name for name, ref in ((MIESCORE_CHOICE, model), (SPATIALREWARD_CHOICE, spatialreward_model)) if ref]
    choices = choices or [MIESCORE_CHOICE]
    return choices, choices[0]


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


# Seconds of GPU time a call may use (spaces.GPU's ``duration``). MIEScore is one forward pass; SpatialReward
# generates two judgements (SC and PQ), each up to a few hundred tokens, with an 8B model.
MIESCORE_GPU_SECONDS = 60
SPATIALREWARD_GPU_SECONDS = 120


def on_zero_gpu() -> bool:
    """True on ZeroGPU hardware (the platform sets ``SPACES_ZERO_GPU``)."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes")


def gpu_function(duration: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: ``spaces.GPU(duration=duration)`` when ``import spaces`` works, else the identity.

    The import happens when the decorator is made (when the Space builds its Blocks), not when this module is
    imported. A ``spaces`` without ``GPU`` (e.g. this repository's ``spaces/`` folder, importable as a namespace
    package from the checkout's root) counts as absent.
    """
    try:
        from spaces import GPU
    except ImportError:
        return lambda function: function
    return GPU(duration=duration)


__all__ = ["LazyModel", "MIESCORE_CHOICE", "MIESCORE_GPU_SECONDS", "SPACE_MODELS_FILE", "SPATIALREWARD_CHOICE",
           "SPATIALREWARD_GPU_SECONDS", "gpu_function", "model_choices", "on_zero_gpu", "read_space_models",
           "space_models_text"]
