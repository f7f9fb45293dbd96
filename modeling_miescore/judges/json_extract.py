"""Finding JSON in chat-model answers, for the code outside the Hub files (skill optimisation, the GRPO oracle).

Two steps: :func:`strip_reasoning_and_fences` removes ``<think>`` blocks (closed, opened in the prompt, or cut
off) and Markdown code fences; :func:`extract_first_json` then returns the first balanced JSON value that
``json.loads`` accepts and that the caller's ``accept`` test likes. Strict JSON only, no repairs: a model that
cannot write JSON should fail visibly rather than be guessed at. Callers that want a relaxed fallback (the
oracle's key-anchored ``"..._score": x`` pattern) apply it themselves to the stripped text.

The Hub parser (:mod:`modeling_miescore.parsing`) keeps its own relaxed scanner: it ships inside checkpoints,
which may import only Hub siblings, and it repairs broken JSON, which this strict reader must never do.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, List, Tuple

__all__ = ["MAX_ANSWER_CHARS", "balanced_spans", "extract_first_json", "is_unclosed", "strip_reasoning_and_fences"]

_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE_RE = re.compile(r"```[A-Za-z0-9_+\-]*")
_JSON_SPECIAL_RE = re.compile(r'[{}\[\]"\\]')
MAX_ANSWER_CHARS = 200_000  # longer answers are degenerate; only their beginning is scanned (bounds run time)


def strip_reasoning_and_fences(text: str) -> str:
    """The answer without thinking text and code-fence markers (fence lines become spaces).

    Closed ``<think>...</think>`` blocks are removed; a lone ``</think>`` (the opening tag was in the prompt, as
    with thinking models) drops everything before it; an unclosed ``<think>`` (cut off while thinking) drops
    everything after it: thinking text is never parsed. Only the first :data:`MAX_ANSWER_CHARS` are kept.
    """
    text = text[:MAX_ANSWER_CHARS]
    text = _THINK_RE.sub(" ", text)
    close = text.lower().rfind("</think>")
    if close >= 0:
        text = text[close + len("</think>"):]
    opened = text.lower().find("<think>")
    if opened >= 0:
        text = text[:opened]
    return _FENCE_RE.sub(" ", text)


def balanced_spans(text: str) -> List[Tuple[int, int]]:
    """All balanced ``{...}`` / ``[...]`` spans (any nesting level) as ``(start, end)``, sorted by start.

    One pass: brackets inside JSON strings are skipped (quotes count only inside a bracket, so apostrophes
    and quotes in prose before the JSON do not matter); a mismatched closer abandons the open brackets."""
    spans: List[Tuple[int, int]] = []
    stack: List[Tuple[str, int]] = []
    in_str = False
    i = 0
    search = _JSON_SPECIAL_RE.search
    while (m := search(text, i)) is not None:
        p = m.start()
        c = text[p]
        i = p + 1
        if in_str:
            if c == "\\":
                i = p + 2
            elif c == '"':
                in_str = False
        elif c in "{[":
            stack.append(("}" if c == "{" else "]", p))
        elif c in "}]":
            if stack and stack[-1][0] == c:
                spans.append((stack.pop()[1], p + 1))
            else:
                stack.clear()  # not JSON: start over
        elif c == '"' and stack:
            in_str = True
    spans.sort()
    return spans


def is_unclosed(text: str) -> bool:
    """True when the first ``{``/``[`` of ``text`` never closes (an answer cut off mid-JSON)."""
    first = re.search(r"[{\[]", text)
    if first is None:
        return False
    return not any(s == first.start() for s, _ in balanced_spans(text))


def extract_first_json(text: str, accept: Callable[[Any], bool], openers: str = "{", max_tries: int = 64) -> Any:
    """The first balanced JSON value (starting with a character of ``openers``) of the stripped answer (see
    :func:`strip_reasoning_and_fences`) that ``json.loads`` accepts and for which ``accept(value)`` is true;
    None if there is none. Nested values count too (an outer value is tried before the ones inside it). At most
    ``max_tries`` candidate spans are decoded, so degenerate answers cost linear time."""
    text = strip_reasoning_and_fences(text)
    tries = 0
    for start, end in balanced_spans(text):
        if text[start] not in openers:
            continue
        if tries >= max_tries:
            break
        tries += 1
        try:
            value = json.loads(text[start:end])
        except ValueError:
            continue
        if accept(value):
            return value
    return None
