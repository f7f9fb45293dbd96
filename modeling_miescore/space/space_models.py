"""``space_models.json``: the model repos a Space folder assembled by ``miescore space build`` serves.

The file sits beside the Space's ``app.py``: ``{"model": "org/miescore-8b" | null, "spatialreward_model": ... }``.
The app uses it as the default for ``--model`` / ``--spatialreward-model`` when the environment
(``MIESCORE_MODEL``, ``SPATIALREWARD_MODEL``) names none, so a pushed Space serves the models its README lists
without further settings. :func:`model_choices` is the Space's model choice: only the configured models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..image_io import MIEScoreInputError

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


__all__ = ["MIESCORE_CHOICE", "SPACE_MODELS_FILE", "SPATIALREWARD_CHOICE", "model_choices", "read_space_models",
           "space_models_text"]
