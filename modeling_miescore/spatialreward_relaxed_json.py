"""Find and read the JSON object in a model generation, tolerating what language models get wrong.

Used by ``spatialreward_parsing`` (SpatialReward's SC / PQ outputs). Steps:

1. :func:`strip_thinking_and_fences` drops ``<think>...</think>`` blocks (or a thinking prefix whose opening
   tag was in the prompt, or an unclosed ``<think>`` and everything after it) and markdown code fences;
2. :func:`find_output_object` scans balanced ``{...}`` spans outside string literals (quotes in prose are
   ignored), and takes the first one that holds an output key, parsed strictly or after relaxed repairs
   (single quotes, trailing commas, Python literals, unquoted keys, unescaped inner quotes); when the
   generation was cut off, it closes the open brackets and tries again.

Every repair or oddity is reported through ``notes.add_issue(code, message)`` (``parsing.ISSUE_CODES``).
Bounded work: at most 32 candidate objects, truncation repair only below 64 KiB.

Hub file: a checkpoint cannot import the non-Hub ``judges`` package (its JSON extractor), so it carries this
scanner, which is also more tolerant than a plain one since a reward must be read from whatever was written.
It imports only the standard library.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

__all__ = ["IssueNotes", "find_output_object", "get_key", "strip_thinking_and_fences"]


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


def strip_thinking_and_fences(text: str, res: IssueNotes) -> str:
    """``text`` without thinking blocks and code fences (see the module docstring)."""
    if _THINK_CLOSE_RE.search(text):
        text, n = _THINK_BLOCK_RE.subn(" ", text)
        stray = None
        for stray in _THINK_CLOSE_RE.finditer(text):
            pass
        if stray is not None:  # opening tag was in the prompt: drop the thinking prefix
            text = text[stray.end():]
            n += 1
        if n:
            res.add_issue("think_block_removed")
    m = _THINK_OPEN_RE.search(text)
    if m is not None:  # cut off while thinking: thinking text is never scored
        text = text[: m.start()]
        res.add_issue("unclosed_think_block")
    if "```" in text:
        text = _FENCE_RE.sub(" ", text)
        res.add_issue("code_fence_removed")
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


def _scan(text: str, start: int = 0, commas: bool = False):
    """Scan braces outside string literals.

    Outside any object only ``{`` matters (quotes in prose are ignored). Returns
    ``(spans, stack, in_str, comma_marks)``: closed ``{...}`` spans as ``(start, end)`` (end
    exclusive, any nesting level), the unclosed openers ``[(char, pos), ...]``, the open quote
    character at the end (or None) and, if ``commas``, ``(pos, openers)`` for every structural
    comma.
    """
    spans: List[Tuple[int, int]] = []
    stack: List[Tuple[str, int]] = []
    comma_marks: List[Tuple[int, Tuple[str, ...]]] = []
    n_brace = 0
    in_str: Optional[str] = None
    i = start
    search = (_SPECIAL_COMMA_RE if commas else _SPECIAL_RE).search
    while True:
        m = search(text, i)
        if m is None:
            break
        p = m.start()
        c = text[p]
        i = p + 1
        if in_str is not None:
            if c == "\\":
                i = p + 2
            elif c == in_str and _QUOTE_END_RE.match(text, p + 1):
                in_str = None
            continue
        if not stack:
            if c == "{":
                stack.append(("{", p))
                n_brace = 1
            continue
        if c == '"':
            in_str = c
        elif c == "'":
            # single-quoted strings only where a JSON token may start (not apostrophes in words)
            if _prev_nonspace(text, p, stack[0][1]) in ("{", "[", ",", ":"):
                in_str = c
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


class _DupTracker:
    def __init__(self) -> None:
        self.duplicates: List[str] = []

    def hook(self, pairs):
        d: Dict[str, Any] = {}
        for k, v in pairs:
            if k in d:
                self.duplicates.append(k)
            d[k] = v
        return d


def _loads(text: str) -> Tuple[Optional[Any], bool, List[str]]:
    """Parse strictly, then relaxed. Returns (value or None, repaired, duplicate keys)."""
    tracker = _DupTracker()
    try:
        return json.loads(text, object_pairs_hook=tracker.hook, strict=False), False, tracker.duplicates
    except Exception:
        pass
    tracker = _DupTracker()
    try:
        fixed = _relaxed_to_json(text)
        return json.loads(fixed, object_pairs_hook=tracker.hook, strict=False), True, tracker.duplicates
    except Exception:
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
