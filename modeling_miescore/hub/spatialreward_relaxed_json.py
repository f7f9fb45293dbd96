"""Reading the JSON in a model's answer: the package's one reader (a Hub file that SpatialReward checkpoints
carry, so it imports only the standard library).

* **Relaxed** (SpatialReward's SC / PQ outputs, ``spatialreward_parsing``): :func:`find_output_object` takes the
  first ``{...}`` holding an output key, parsed strictly or after repairs (single quotes, trailing commas, Python
  literals, unquoted keys, unescaped inner quotes); a cut-off one is closed. A reward must be read from whatever was
  written; every repair or oddity is reported as an issue (``parsing.ISSUE_CODES``).
* **Strict** (judges, the GRPO oracle, MER-Bench synthesis, skill optimisation, benchmark judges): nothing is
  repaired, a model that cannot write JSON fails visibly. The answer is the **final** object holding a key
  (answers quote objects, so the first is not the answer); candidates that disagree, or a key written twice with
  different values, are refused (:func:`final_json_object`).

Both bound their work on degenerate answers; lone surrogates become U+FFFD, so what is returned can be stored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

__all__ = ["IssueNotes", "JSONFind", "MAX_ANSWER_CHARS", "MAX_JSON_TRIES", "disagree", "extract_first_json",
           "extract_json", "final_json_object", "find_output_object", "get_key", "is_unclosed",
           "loads_noting_duplicates", "strip_reasoning_and_fences", "strip_thinking_and_fences", "valid_strings",
           "valid_text"]


class IssueNotes(Protocol):
    """Where issues are recorded (``parsing.ParsedOutput`` is one)."""

    def add_issue(self, code: str, message: str = "") -> None: ...


# ----------------------------------------------------------------------------------------------
# Text cleaning
# ----------------------------------------------------------------------------------------------

_THINK_BLOCK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_THINK_CLOSE_RE = re.compile(r"</think>", re.I)
_THINK_OPEN_RE = re.compile(r"<think>", re.I)
_FENCE_RE = re.compile(r"```[A-Za-z0-9_+\-]*")


def strip_thinking_and_fences(text: str, res: Optional[IssueNotes] = None) -> str:
    """``text`` without ``<think>...</think>`` blocks (a lone ``</think>``: the thinking prefix whose opening tag
    was in the prompt; an unclosed ``<think>``: everything after it) and code fences (markers become spaces)."""
    note = res.add_issue if res is not None else (lambda code, message="": None)
    if _THINK_CLOSE_RE.search(text):
        text, n = _THINK_BLOCK_RE.subn(" ", text)
        stray = None
        for stray in _THINK_CLOSE_RE.finditer(text):
            pass
        if stray is not None:  # opening tag was in the prompt: drop the thinking prefix
            text = text[stray.end():]
            n += 1
        if n:
            note("think_block_removed")
    m = _THINK_OPEN_RE.search(text)
    if m is not None:  # cut off while thinking: thinking text is never scored
        text = text[: m.start()]
        note("unclosed_think_block")
    if "```" in text:
        text = _FENCE_RE.sub(" ", text)
        note("code_fence_removed")
    return text


# ----------------------------------------------------------------------------------------------
# Balanced-object scanner
# ----------------------------------------------------------------------------------------------

_SPECIAL_RE = re.compile(r"[{}\[\]\"'\\]")
_SPECIAL_COMMA_RE = re.compile(r"[{}\[\]\"'\\,]")
# A closing quote is one followed by optional whitespace and a JSON delimiter (or the end).
# For valid JSON this is exactly the first unescaped quote; for broken JSON it tolerates
# unescaped inner quotes such as "the "red" car".
_QUOTE_END_RE = re.compile(r"\s*(?:[,:}\]]|$)")


def _prev_nonspace(text: str, pos: int, lo: int) -> str:
    j = pos - 1
    while j >= lo and text[j].isspace():
        j -= 1
    return text[j] if j >= lo else ""


def _scan(text: str, start: int = 0, commas: bool = False, strict: bool = False):
    """Scan brackets outside string literals; outside any object only an opener matters (quotes in prose are
    ignored). Relaxed: ``{...}`` spans; a string closes at a quote followed by a delimiter (inner quotes are
    tolerated) and may be single-quoted; ``}`` closes the innermost ``{``. ``strict``: ``[...]`` spans too; a
    string closes at the next unescaped ``"``; a mismatched closer abandons the open brackets.

    Returns ``(spans, stack, in_str, comma_marks)``: closed spans as ``(start, end)`` (end exclusive, any
    nesting level), the unclosed openers ``[(char, pos), ...]``, the open quote character at the end (or None)
    and, if ``commas``, ``(pos, openers)`` for every structural comma.
    """
    spans: List[Tuple[int, int]] = []
    stack: List[Tuple[str, int]] = []
    comma_marks: List[Tuple[int, Tuple[str, ...]]] = []
    n_brace = 0
    in_str: Optional[str] = None
    i = start
    search = (_SPECIAL_COMMA_RE if commas else _SPECIAL_RE).search
    while (m := search(text, i)) is not None:
        p = m.start()
        c = text[p]
        i = p + 1
        if in_str is not None:
            if c == "\\":
                i = p + 2
            elif c == in_str and (strict or _QUOTE_END_RE.match(text, p + 1)):
                in_str = None
            continue
        if not stack:
            if c == "{" or (strict and c == "["):
                stack.append((c, p))
                n_brace = 1
            continue
        if c == '"':
            in_str = c
        elif c == "'":
            # single-quoted strings only where a JSON token may start (not apostrophes in words)
            if not strict and _prev_nonspace(text, p, stack[0][1]) in ("{", "[", ",", ":"):
                in_str = c
        elif strict and c in "}]":
            if stack[-1][0] == ("{" if c == "}" else "["):
                spans.append((stack.pop()[1], p + 1))
            else:
                stack.clear()  # not JSON: start over
        elif c == "{" or c == "[":
            stack.append((c, p))
            if c == "{":
                n_brace += 1
        elif c == "}":
            if n_brace:
                while stack:
                    ch, q = stack.pop()
                    if ch == "{":
                        n_brace -= 1
                        spans.append((q, p + 1))
                        break
        elif c == "]":
            if stack[-1][0] == "[":
                stack.pop()
        elif c == "," and len(stack) <= 64:
            comma_marks.append((p, tuple(ch for ch, _ in stack)))
    return spans, stack, in_str, comma_marks


# ----------------------------------------------------------------------------------------------
# Relaxed JSON -> strict JSON
# ----------------------------------------------------------------------------------------------

_TOK_RE = re.compile(
    r"(?P<ws>\s+)"
    r"|(?P<punct>[{}\[\]:,])"
    r"|(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
)
_JSON_NUM_RE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?\Z")
_ESC_RE = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|\\\Z|\"|[\x00-\x1f]", re.S)
_VALID_ESC = set('"\\/bfnrt')
_NEXT_NONSPACE_RE = re.compile(r"\s*(.?)", re.S)
_LITERALS = {
    "True": "true",
    "False": "false",
    "None": "null",
    "true": "true",
    "false": "false",
    "null": "null",
    "NaN": "NaN",
    "Infinity": "Infinity",
}


def _fix_escape(m: "re.Match[str]") -> str:
    s = m.group()
    if s == '"':
        return '\\"'
    if len(s) == 1:  # raw control character
        return "\\u%04x" % ord(s)
    if s.startswith("\\u") and len(s) == 6:
        return s
    if len(s) == 2 and s[1] in _VALID_ESC:
        return s
    if s == "\\'":
        return "'"
    return "\\\\" + s[1:]  # invalid escape: keep the backslash literally


_STR_STOP_DQ = re.compile(r'[\\"]')
_STR_STOP_SQ = re.compile(r"[\\']")


def _read_string(text: str, i: int) -> Tuple[str, int]:
    """Read a (possibly single-quoted, possibly broken) string starting at quote ``text[i]``.

    Returns (strict JSON literal, index after the closing quote)."""
    q = text[i]
    stop = _STR_STOP_DQ if q == '"' else _STR_STOP_SQ
    j = i + 1
    n = len(text)
    while True:
        m = stop.search(text, j)
        if m is None:
            j = n  # unterminated: the rest is the string
            break
        j = m.start()
        if text[j] == "\\":
            j += 2
            continue
        if _QUOTE_END_RE.match(text, j + 1):
            break
        j += 1
    content = text[i + 1 : min(j, n)]
    return '"' + _ESC_RE.sub(_fix_escape, content) + '"', j + 1


def _relaxed_to_json(text: str) -> str:
    out: List[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            lit, i = _read_string(text, i)
            out.append(lit)
            continue
        m = _TOK_RE.match(text, i)
        if m is None:
            out.append(c)  # not JSON; json.loads will reject it
            i += 1
            continue
        kind = m.lastgroup
        tok = m.group()
        i = m.end()
        if kind == "punct" and tok == ",":
            nxt = _NEXT_NONSPACE_RE.match(text, i).group(1)
            if nxt in ("}", "]"):  # trailing comma
                continue
        elif kind == "num":
            if not _JSON_NUM_RE.match(tok):
                try:
                    tok = repr(float(tok))
                except ValueError:
                    pass
        elif kind == "ident":
            if tok in _LITERALS:
                tok = _LITERALS[tok]
            elif _NEXT_NONSPACE_RE.match(text, i).group(1) == ":":
                tok = '"' + tok + '"'  # unquoted key
        out.append(tok)
    return "".join(out)


class _Duplicates:
    """``object_pairs_hook`` noting every repeated key (``keys``) and, per decoded object, the keys repeated with
    *different* values (``by_object``: ``{id(object): {key: the values in order}}``); the last value is kept."""

    def __init__(self):
        self.keys: List[str] = []
        self.by_object: Dict[int, Dict[str, List[Any]]] = {}

    def hook(self, pairs):
        obj: Dict[str, Any] = {}
        repeated: Dict[str, List[Any]] = {}
        for key, value in pairs:
            if key in obj:
                self.keys.append(key)
                if obj[key] != value:
                    repeated.setdefault(key, [obj[key]]).append(value)
            obj[key] = value
        if repeated:
            self.by_object[id(obj)] = repeated
        return obj


def _tracked_loads(text, strict: bool = True) -> Tuple[Any, _Duplicates]:
    """``json.loads`` noting repeated keys; ``ValueError`` (``RecursionError`` included) when ``text`` is not JSON."""
    tracker = _Duplicates()
    try:
        return json.loads(text, object_pairs_hook=tracker.hook, strict=strict), tracker
    except RecursionError:
        raise ValueError("nested too deeply") from None


def loads_noting_duplicates(text) -> Tuple[Any, Dict[int, Dict[str, List[Any]]]]:
    """``json.loads(text)`` and ``{id(object): {key: the values in order}}`` for every object in it that repeats a
    key with different values (the caller decides what that means; for answers we read, it is ambiguous)."""
    value, tracker = _tracked_loads(text)
    return value, tracker.by_object


def _loads(text: str) -> Tuple[Optional[Any], bool, List[str]]:
    """Parse strictly, then relaxed. Returns (value or None, repaired, duplicate keys)."""
    for repaired in (False, True):
        try:
            value, tracker = _tracked_loads(_relaxed_to_json(text) if repaired else text, strict=False)
            return value, repaired, tracker.keys
        except Exception:
            pass
    return None, False, []


# ----------------------------------------------------------------------------------------------
# Object selection
# ----------------------------------------------------------------------------------------------

_MAX_CANDIDATES = 32
_MAX_REPAIR_CHARS = 65_536  # truncated-object repair is skipped beyond this


def get_key(d: Dict[str, Any], names: Tuple[str, ...]) -> Tuple[Optional[str], Any]:
    """Case-insensitive lookup; returns (actual key, value) of the first name present."""
    lowered = {}
    for k in d:
        if isinstance(k, str):
            lowered.setdefault(k.strip().lower(), k)
    for name in names:
        if name in lowered:
            k = lowered[name]
            return k, d[k]
    return None, None


def _is_output_obj(v: Any, keys: Sequence[str]) -> bool:
    return isinstance(v, dict) and get_key(v, tuple(keys))[0] is not None


def _close_truncated(piece: str, keys: Sequence[str]) -> Optional[Dict[str, Any]]:
    """Best-effort closing of a cut-off object, for regions and reasoning only."""
    if len(piece) > _MAX_REPAIR_CHARS:
        return None
    _, stack, in_str, marks = _scan(piece, 0, commas=True)
    if not stack or len(stack) > 64:
        return None
    closers = {"{": "}", "[": "]"}
    attempts = []
    tail = piece.rstrip()
    if in_str is not None:
        tail += in_str
    attempts.append(tail + "".join(closers[ch] for ch, _ in reversed(stack)))
    for pos, openers in reversed(marks[-8:]):
        attempts.append(piece[:pos] + "".join(closers[ch] for ch in reversed(openers)))
    for attempt in attempts:
        value, _, _ = _loads(attempt)
        if _is_output_obj(value, keys):
            return value
    return None


def find_output_object(text: str, res: IssueNotes, keys: Sequence[str]):
    """The first JSON object in ``text`` holding one of ``keys`` (case-insensitive): ``(obj, mode)``, mode in
    ``{"json", "repaired_json", "truncated", None}`` (None: nothing usable, ``obj`` is None)."""
    key_re = re.compile("|".join(re.escape(k) for k in keys), re.I)  # a cheap test before parsing a span
    spans, stack, _, _ = _scan(text)
    spans.sort()
    covered = -1
    tried = 0
    chosen = None
    chosen_span = None
    invalid = False
    later_outputs = 0
    for s, e in spans:
        if s < covered:
            continue  # nested inside an object already considered
        covered = e
        if not key_re.search(text, s, e):
            continue  # cannot contain an output key
        if chosen is not None:
            later_outputs += 1
            continue
        if tried >= _MAX_CANDIDATES:
            break
        tried += 1
        value, repaired, dups = _loads(text[s:e])
        if _is_output_obj(value, keys):
            chosen = (value, "repaired_json" if repaired else "json", dups)
            chosen_span = (s, e)
        elif value is None:
            invalid = True
    if chosen is not None:
        value, mode, dups = chosen
        if invalid:
            res.add_issue("invalid_json", "an earlier JSON-like object could not be parsed")
        if mode == "repaired_json":
            res.add_issue("json_repaired")
        for k in dups:
            res.add_issue("duplicate_key", "key %r repeated; the last value was kept" % k)
        if later_outputs:
            res.add_issue("multiple_json_objects")
        s, e = chosen_span
        if text[:s].strip() or text[e:].strip():
            res.add_issue("extra_text_around_json")
        return value, mode
    # No complete output object: a cut-off one?
    if stack:
        first_open = stack[0][1]
        if key_re.search(text, first_open):
            res.add_issue("truncated_json")
            obj = _close_truncated(text[first_open:], keys)
            if obj is not None:
                return obj, "truncated"
            return None, None
    if invalid:
        res.add_issue("invalid_json")
    else:
        res.add_issue("no_json_object")
    return None, None


# ----------------------------------------------------------------------------------------------
# Strict reader (outside the checkpoints: judges, oracle, synthesis, skill optimisation)
# ----------------------------------------------------------------------------------------------

MAX_ANSWER_CHARS = 200_000  # longer answers are degenerate; only their beginning is scanned (bounds run time)
MAX_JSON_TRIES = 64  # balanced spans decoded per answer at most
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    return _SURROGATE_RE.sub("\ufffd", text) if _SURROGATE_RE.search(text) else text


def valid_strings(value: Any) -> Any:
    """A decoded JSON value with :func:`valid_text` applied to every string in it, keys included (iterative:
    a value as deep as the JSON decoder allowed never hits the recursion limit)."""
    if isinstance(value, str):
        return valid_text(value)
    root = [value]
    stack: List[tuple] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = valid_text(item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
        elif isinstance(item, dict):
            fixed = {(valid_text(k) if isinstance(k, str) else k): v for k, v in item.items()}
            container[key] = fixed
            stack.extend((fixed, k) for k in fixed)
    return root[0]


def strip_reasoning_and_fences(text: str) -> str:
    """:func:`strip_thinking_and_fences` of the first :data:`MAX_ANSWER_CHARS` of an answer."""
    return strip_thinking_and_fences(text[:MAX_ANSWER_CHARS])


def is_unclosed(text: str) -> bool:
    """True when the first ``{``/``[`` of ``text`` never closes (an answer cut off mid-JSON)."""
    first = re.search(r"[{\[]", text)
    return first is not None and not any(s == first.start() for s, _ in _scan(text, strict=True)[0])


@dataclass
class JSONFind:
    """What :func:`extract_json` found: the accepted ``values`` (outermost spans only, in the answer's order),
    for each the keys it repeats with *different* values (``duplicates[i]``: key -> the values in order) and
    whether it lies inside another decodable JSON value that was not accepted (``nested[i]``), and ``exhausted``
    (:data:`MAX_JSON_TRIES` candidates were decoded before the end of the answer)."""

    values: List[Any] = field(default_factory=list)
    duplicates: List[Dict[str, List[Any]]] = field(default_factory=list)
    exhausted: bool = False
    nested: List[bool] = field(default_factory=list)

    @property
    def final(self) -> Any:
        """The last accepted value, None when there is none."""
        return self.values[-1] if self.values else None


def extract_json(text: str, accept: Callable[[Any], bool], openers: str = "{") -> JSONFind:
    """Every balanced JSON value (starting with a character of ``openers``) of the stripped answer that strict
    ``json.loads`` accepts and ``accept(value)`` likes, outermost first (a value inside an accepted one is not
    listed again). At most :data:`MAX_JSON_TRIES` spans are decoded, so degenerate answers cost linear time."""
    text = strip_reasoning_and_fences(text)
    found = JSONFind()
    tries = 0
    covered = -1  # end of the last accepted span
    rejected_end = -1  # the furthest end of a decoded value that was not accepted (one that may enclose others)
    for start, end in sorted(_scan(text, strict=True)[0]):
        if text[start] not in openers or start < covered:
            continue
        if tries >= MAX_JSON_TRIES:
            found.exhausted = True
            break
        tries += 1
        try:
            value, by_object = loads_noting_duplicates(text[start:end])
        except ValueError:
            continue
        duplicates = by_object.get(id(value), {})
        if _SURROGATE_ESCAPE_RE.search(text, start, end):  # only an escape can make a lone surrogate
            value, duplicates = valid_strings(value), valid_strings(duplicates)
        if accept(value):
            found.values.append(value)
            found.duplicates.append(duplicates)
            found.nested.append(end <= rejected_end)
            covered = end
        else:
            rejected_end = max(rejected_end, end)
    return found


def extract_first_json(text: str, accept: Callable[[Any], bool], openers: str = "{") -> Any:
    """The first value :func:`extract_json` accepts (None if there is none)."""
    found = extract_json(text, accept, openers=openers)
    return found.values[0] if found.values else None


def disagree(values: Sequence[Any], keys_of: Callable[[Any], Dict[str, Any]]) -> bool:
    """True when two of ``values`` give one name different values; ``keys_of(value)`` maps each name the value
    holds to its key in the value (``{name: name}`` for exact keys)."""
    seen: Dict[str, Any] = {}
    for value in values:
        for name, key in keys_of(value).items():
            if name in seen and seen[name] != value[key]:
                return True
            seen.setdefault(name, value[key])
    return False


def final_json_object(text: str, keys: Sequence[str], accept: Optional[Callable[[Any], bool]] = None,
                      top_level: bool = False) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """The answer object and its issue codes: the final JSON object holding one of ``keys`` (or that ``accept``
    likes). Candidates that disagree on a key give None (``conflicting_json_objects``), a key written twice with
    different values is removed (``duplicate_key:<key>``), a scan stopped early gives None
    (``too_many_json_candidates``), and with ``top_level`` so does an object inside another (``nested_answer``)."""
    keys = tuple(keys)
    test = accept or (lambda value: isinstance(value, dict) and any(k in value for k in keys))
    found = extract_json(text, test)
    if found.exhausted:
        return None, ["too_many_json_candidates"]
    if not found.values:
        return None, []
    if disagree(found.values, lambda value: {k: k for k in keys if isinstance(value, dict) and k in value}):
        return None, ["conflicting_json_objects"]
    if top_level and found.nested[-1]:
        return None, ["nested_answer"]
    if not isinstance(found.final, dict):
        return found.final, []
    obj = {k: v for k, v in found.final.items() if k not in found.duplicates[-1]}
    return obj, [f"duplicate_key:{key}" for key in found.duplicates[-1]]
