"""Text from endpoints, checked before it is stored or trained on.

* **Lone surrogates** (``"\\ud800"`` as a JSON escape) cannot be encoded as UTF-8 (SQLite, JSON Lines and
  tokenizers fail on them): wherever an endpoint's text enters the package (the chat client's answer, strings
  decoded by :mod:`modeling_miescore.hub.spatialreward_relaxed_json`) each is **repaired** to U+FFFD, and the repair
  counted (``repaired_text`` in the usage log).
* **Chat-control tokens** (:mod:`modeling_miescore.hub.control_tokens`; SpatialReward's grounding tokens are text here)
  and C0 control characters (tab, newline and carriage return are text) must never reach training data: training
  text holding one is **refused** (:func:`training_text_problem`, reason ``control_token`` in the stage reports),
  never silently stripped.
* **User text in prompts** (:func:`quoted`) is written as a JSON string literal, so that it cannot pose as the end
  of the prompt or as an answer object.
"""

from __future__ import annotations

import json
import re
from typing import Any, List, Optional

from ..hub.control_tokens import control_tokens_in as chat_control_tokens
from ..hub.spatialreward_relaxed_json import valid_strings, valid_text

__all__ = ["control_characters_problem", "control_tokens_in", "quoted", "training_text_problem", "valid_strings",
           "valid_text"]

_C0_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def control_tokens_in(text: str) -> List[str]:
    """The chat-control tokens (:func:`modeling_miescore.hub.control_tokens.control_tokens_in`; grounding tokens such
    as ``<|bbox_0|>`` and ``<|global|>`` are text here) and the control characters in ``text``, as found."""
    return chat_control_tokens(text, grounding_is_text=True) + _control_characters(text)


def _control_characters(text: str) -> List[str]:
    """The C0 control characters in ``text`` (tab, newline and carriage return are text), as ``U+XXXX``."""
    return [f"U+{ord(m.group()):04X}" for m in _C0_RE.finditer(text)]


def control_characters_problem(text: Any, what: str) -> Optional[str]:
    """None when ``text`` holds no C0 control character (NUL and the like; tab, newline and carriage return are
    text); else one line naming ``what`` and the first one found. Dataset builders and benchmark converters refuse
    such instructions: a NUL ends C strings early and cannot be written to most files or shown."""
    if not isinstance(text, str):
        return None
    found = _control_characters(text)
    if not found:
        return None
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{what} holds the control character {found[0]}{more}; remove it"


def training_text_problem(text: Any) -> Optional[str]:
    """None when ``text`` may go into training data; else one line naming the first control token found."""
    if not isinstance(text, str):
        return None
    found = control_tokens_in(text)
    if not found:
        return None
    return f"holds the chat-control token {found[0]!r}" + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")


def quoted(text: str) -> str:
    """User text as a JSON string literal: in double quotes, with quotes, backslashes and line breaks escaped
    (other characters as they are)."""
    return json.dumps(str(text), ensure_ascii=False)
