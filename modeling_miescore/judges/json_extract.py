"""Finding JSON in chat-model answers, for the code outside the Hub files (the MLLM judge, the GRPO oracle,
MER-Bench synthesis, skill optimisation, benchmark judges).

Two steps: :func:`strip_reasoning_and_fences` removes ``<think>`` blocks (closed, opened in the prompt, or cut
off) and Markdown code fences; then a reader returns balanced JSON values that ``json.loads`` accepts and that
the caller's test likes. Strict JSON only, no repairs: a model that cannot write JSON should fail visibly rather
than be guessed at. Callers that want a relaxed fallback (a key-anchored ``"..._score": x`` pattern) apply it
themselves to the stripped text.

The readers (the public API, simplest first):

* :func:`final_json_object` ``(text, keys) -> (obj, issues)``: the model's answer object, i.e. the **final**
  JSON object of the answer that holds one of ``keys``. Answers quote things (an instruction that carries
  ``{"visual_quality": 100}``, an example of the answer format), so the first object is not the answer; and an
  answer with several such objects that **disagree** on a key (``conflicting_json_objects``) gives no object at
  all, since nothing says which one is the verdict. Inside the object, a key written twice with different values
  is ambiguous, as for the key-anchored fallbacks: the key is removed and ``duplicate_key:<key>`` is reported
  (``json.loads`` alone would silently keep the last one). ``too_many_json_candidates``: the scan stopped
  before the end of the answer (a degenerate answer), so no object is returned either. With ``top_level=True``
  an answer object that lies inside another JSON object (``{"result": {"score": [7, 8]}}``: the outer object is
  the answer, and it has no such key) is no answer either (``nested_answer``).
* :func:`extract_json` ``(text, accept) -> JSONFind``: every accepted value (outermost spans, in order), the
  duplicated keys of each, and whether the scan stopped early; for callers with their own rules.
* :func:`extract_first_json` ``(text, accept)``: the first accepted value (kept for skill optimisation, whose
  answers are the optimiser's own JSON).

Every reader survives hostile answers: a value nested beyond the decoder's recursion limit is skipped, not a
``RecursionError``; strings with lone surrogates (``"\\ud800"`` escapes) are repaired to U+FFFD
(:func:`modeling_miescore.utils.text_hygiene.valid_strings`), so what they return can be stored and written.

The Hub parser (:mod:`modeling_miescore.spatialreward_parsing`) keeps its own relaxed scanner: it ships inside
checkpoints, which may import only Hub siblings, and it repairs broken JSON, which this strict reader must never do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..utils.text_hygiene import valid_strings

__all__ = ["JSONFind", "MAX_ANSWER_CHARS", "balanced_spans", "disagree", "extract_first_json", "extract_json",
           "final_json_object", "is_unclosed", "loads_noting_duplicates", "strip_reasoning_and_fences"]

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


_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass
class JSONFind:
    """What :func:`extract_json` found: the accepted ``values`` (outermost spans only, in the answer's order),
    for each the keys it repeats with *different* values (``duplicates[i]``: key -> the values in order), and
    ``exhausted`` (``max_tries`` candidates were decoded before the end of the answer), and for each value whether
    it lies inside another decodable JSON value (starting with one of the openers) that was not accepted
    (``nested[i]``)."""

    values: List[Any] = field(default_factory=list)
    duplicates: List[Dict[str, List[Any]]] = field(default_factory=list)
    exhausted: bool = False
    nested: List[bool] = field(default_factory=list)

    @property
    def final(self) -> Any:
        """The last accepted value, None when there is none."""
        return self.values[-1] if self.values else None


class _Duplicates:
    """``object_pairs_hook`` that records, per decoded object, the keys repeated with different values."""

    def __init__(self):
        self.by_object: Dict[int, Dict[str, List[Any]]] = {}

    def hook(self, pairs):
        obj: Dict[str, Any] = {}
        repeated: Dict[str, List[Any]] = {}
        for key, value in pairs:
            if key in obj and obj[key] != value:
                repeated.setdefault(key, [obj[key]]).append(value)
            obj[key] = value
        if repeated:
            self.by_object[id(obj)] = repeated
        return obj


def loads_noting_duplicates(text) -> Tuple[Any, Dict[int, Dict[str, List[Any]]]]:
    """``json.loads(text)`` and, for every object in it that repeats a key with *different* values,
    ``{id(object): {key: the values in order}}`` (the object keeps the last value, as ``json.loads`` does; the
    caller decides what a repeated key means: for answers we read, it is ambiguous). Raises ``ValueError``
    (``RecursionError`` included) when ``text`` is not strict JSON."""
    tracker = _Duplicates()
    try:
        return json.loads(text, object_pairs_hook=tracker.hook), tracker.by_object
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _decode(span: str) -> Tuple[Any, Dict[str, List[Any]]]:
    """``(value, duplicated keys of the outer object)``; raises ValueError (RecursionError included) when the
    span is not strict JSON."""
    value, by_object = loads_noting_duplicates(span)
    duplicates = by_object.get(id(value), {})
    if _SURROGATE_ESCAPE_RE.search(span):  # only an escape can make a lone surrogate (the text itself is valid)
        value = valid_strings(value)
        duplicates = valid_strings(duplicates)
    return value, duplicates


def extract_json(text: str, accept: Callable[[Any], bool], openers: str = "{", max_tries: int = 64) -> JSONFind:
    """Every balanced JSON value (starting with a character of ``openers``) of the stripped answer (see
    :func:`strip_reasoning_and_fences`) that ``json.loads`` accepts and for which ``accept(value)`` is true,
    outermost first: a value nested inside an accepted one is not listed again (an outer value is tried before
    the ones inside it). At most ``max_tries`` candidate spans are decoded, so degenerate answers cost linear
    time (``exhausted`` says the scan stopped early)."""
    text = strip_reasoning_and_fences(text)
    found = JSONFind()
    tries = 0
    covered = -1  # end of the last accepted span
    rejected_end = -1  # the furthest end of a decoded value that was not accepted (one that may enclose others)
    for start, end in balanced_spans(text):
        if text[start] not in openers or start < covered:
            continue
        if tries >= max_tries:
            found.exhausted = True
            break
        tries += 1
        try:
            value, duplicates = _decode(text[start:end])
        except ValueError:
            continue
        if accept(value):
            found.values.append(value)
            found.duplicates.append(duplicates)
            found.nested.append(end <= rejected_end)
            covered = end
        else:
            rejected_end = max(rejected_end, end)
    return found


def extract_first_json(text: str, accept: Callable[[Any], bool], openers: str = "{", max_tries: int = 64) -> Any:
    """The first value :func:`extract_json` accepts (None if there is none); duplicate keys keep their last
    value, as ``json.loads`` does."""
    found = extract_json(text, accept, openers=openers, max_tries=max_tries)
    return found.values[0] if found.values else None


def disagree(values: Sequence[Any], keys_of: Callable[[Any], Dict[str, Any]]) -> bool:
    """True when two of ``values`` give one name different values; ``keys_of(value)`` maps each name the value
    holds to its key in the value (``{name: name}`` for exact keys; a reader that tolerates spellings maps
    ``"Visual Quality"`` to ``visual_quality``)."""
    seen: Dict[str, Any] = {}
    for value in values:
        for name, key in keys_of(value).items():
            if name in seen and seen[name] != value[key]:
                return True
            seen.setdefault(name, value[key])
    return False


def final_json_object(text: str, keys: Sequence[str], accept: Optional[Callable[[Any], bool]] = None,
                      max_tries: int = 64, top_level: bool = False) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """The model's answer object and the issue codes (module docstring): the final JSON object holding one of
    ``keys`` (exact names; or the objects ``accept`` likes), None when there is none, when the candidates
    disagree on one of ``keys`` (``conflicting_json_objects``), when the scan stopped early
    (``too_many_json_candidates``) or, with ``top_level``, when the object lies inside another JSON object
    (``nested_answer``). Keys of the object written twice with different values are removed and reported as
    ``duplicate_key:<key>``."""
    keys = tuple(keys)
    test = accept or (lambda value: isinstance(value, dict) and any(k in value for k in keys))
    found = extract_json(text, test, max_tries=max_tries)
    if found.exhausted:
        return None, ["too_many_json_candidates"]
    if not found.values:
        return None, []
    if disagree(found.values, lambda value: {k: k for k in keys if isinstance(value, dict) and k in value}):
        return None, ["conflicting_json_objects"]
    if top_level and found.nested[-1]:
        return None, ["nested_answer"]
    final = found.values[-1]
    if not isinstance(final, dict):
        return final, []
    obj = dict(final)
    issues = []
    for key in found.duplicates[-1]:
        obj.pop(key, None)
        issues.append(f"duplicate_key:{key}")
    return obj, issues
