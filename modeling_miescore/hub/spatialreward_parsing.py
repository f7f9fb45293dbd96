"""Robust parsing of SpatialReward-style generations (SC and PQ passes).

Hub file: copied flat into model checkpoints for ``trust_remote_code``. It imports only the
standard library and its flat siblings ``spatialreward_relaxed_json`` (the package's JSON reader, relaxed mode) and
``spatialreward_tokens`` (the grounding-token pattern).

Output contract (SpatialReward paper, arXiv 2602.07458, appendix D.1):

* SC, one source (D.1.1)::

      { "edit_region" : [{"id": 0~n, "label": "...", "bbox_2d": [x1, y1, x2, y2]}],
        "reasoning" : "... <|bbox_0|> ... <|global|> ...",
        "score" : [score1, score2] }      # score1 = editing success, score2 = over-editing

  Boxes are normalised to [0, 1000]; ``[]`` when the edit failed. The reasoning uses
  ``<|bbox_{id}|>`` before each edited region and ``<|global|>`` before the overall assessment.
  Appendix D.2.3 (token interleaving) requires exactly one ``<|global|>`` and one
  ``<|bbox_{id}|>`` per region.
* SC, several sources (D.1.2): same JSON keys; regions are the elements from the inputs that
  appear in the output; the reasoning uses only ``<|bbox_{id}|>``. The prompt does not ask for
  ``<|global|>``, so a missing global token is not an issue when ``num_sources >= 2``.
* PQ (D.1.3): ``{ "reasoning" : "...", "score" : [naturalness, artifacts] }``; no boxes (sec. 3.2:
  "B = empty set").

All scores are on the 0-25 scale (D.1: "from scale 0 to 25").

Definitions
-----------
``parse_ok`` is True exactly when both scores of the pass were found as numbers (after
clamping). Grounding problems (missing or surplus ``<|bbox_i|>`` / ``<|global|>`` tokens, bad
boxes, ...) never change ``parse_ok``; they are listed in ``issues``. When ``parse_ok`` is False
the missing score(s) are None and the caller decides what to do (the parser never invents a
score: no random values, no 12.5 defaults, no "first two numbers in the text").

Score sources, in order: (1) the ``"score"`` key of the first balanced JSON object that carries
an output key (``score``, ``reasoning`` or ``edit_region``), parsed strictly or after relaxed
repairs (single quotes, trailing commas, Python literals, unquoted keys, unescaped inner
quotes); (2) only when no such object parses (broken or truncated JSON), a key-anchored pattern
``"score": [a, b]`` with the quoted key present, recorded as ``score_from_fallback``. Numbers
are never read from box coordinates, ids or prose.

Special tokens: ``<|bbox_0|>`` ... ``<|bbox_15|>`` and ``<|global|>`` are matched as text,
whether they were decoded from single special tokens or generated as plain text. Decode with
``skip_special_tokens=False`` if they are registered as special tokens, otherwise they vanish.
Tolerated variants (``spatialreward_tokens.GROUNDING_TOKEN_RE``; recorded as ``token_normalized``,
the returned ``reasoning`` holds the canonical form): spaces inside the pipes (``<| bbox_0 |>``),
a space or no underscore (``<|bbox 0|>``, ``<|bbox0|>``), any letter case, and HTML-escaped angle
brackets (``&lt;|bbox_0|&gt;``, as printed in the paper). The pipes are required.

Never raises for a ``str`` input (any internal error is reported as ``internal_error`` with
``parse_ok=False``); raises ``TypeError`` for a non-str input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .spatialreward_relaxed_json import find_output_object, get_key, strip_thinking_and_fences
from .spatialreward_tokens import BBOX_SCALE, GROUNDING_TOKEN_RE, MAX_BBOX_ID, canonical_token

__all__ = [
    "ParsedOutput",
    "finite_number",
    "parse_sc_output",
    "parse_pq_output",
    "parse_output",
    "ISSUE_CODES",
    "GROUNDING_ISSUES",
    "SC_SCORE_NAMES",
    "PQ_SCORE_NAMES",
    "SCORE_MAX",
    "MAX_INPUT_CHARS",
]

SCORE_MIN = 0.0
SCORE_MAX = 25.0  # D.1.1-D.1.3: "evaluate ... from scale 0 to 25"
# Generations are at most a few thousand tokens (B.1.1: max length 1024 in RL, 8192 in SFT);
# longer inputs are degenerate and only their beginning is parsed, which bounds the run time.
MAX_INPUT_CHARS = 262_144

SC_SCORE_NAMES = ("s_if", "s_con")  # D.1.1: score = [score1 (success), score2 (over-editing)]
PQ_SCORE_NAMES = ("naturalness", "artifacts")  # D.1.3: score = [naturalness, artifacts]

# code -> short description (the message of each occurrence adds detail).
ISSUE_CODES: Dict[str, str] = {
    # text cleaning / JSON extraction
    "empty_output": "the generation is empty or whitespace only",
    "think_block_removed": "a <think>...</think> block (or a prefix closed by </think>) was removed",
    "unclosed_think_block": "an unclosed <think> was found; it and everything after it were removed",
    "code_fence_removed": "markdown code fences were removed",
    "no_json_object": "no JSON object with an output key was found",
    "truncated_json": "the JSON object is not closed (generation cut off)",
    "invalid_json": "a JSON object with output keys could not be parsed even after repairs",
    "json_repaired": "the JSON needed relaxed repairs (quotes, trailing commas, literals, keys)",
    "extra_text_around_json": "there is non-whitespace text before or after the JSON object",
    "multiple_json_objects": "more than one output JSON object; the first one was used",
    "duplicate_key": "a JSON key occurs twice in one object; the last value was kept",
    "key_alias": "a non-canonical key name was accepted (e.g. 'scores' for 'score')",
    "internal_error": "unexpected parser error (please report); nothing was extracted",
    "input_too_long": "the text is longer than MAX_INPUT_CHARS; only its beginning was parsed",
    # scores
    "missing_score": "the score key is absent or has no usable value",
    "score_not_pair": "a single score was given where a pair is expected; the other is missing",
    "score_list_too_long": "more than two scores; the first two were used",
    "score_invalid": "a score element is not a finite number",
    "score_from_string": "a score was given as a string and converted",
    "score_rescaled": "a score was written as a fraction of another scale (e.g. '7/10') and rescaled",
    "score_from_dict": "the scores were given as a mapping and read by known names",
    "score_clamped": "a score outside [0, 25] was clamped",
    "score_from_fallback": "the JSON was broken; scores were taken from a '\"score\": [a, b]' match",
    "fallback_ambiguous": "several '\"score\": [a, b]' matches disagree; no score was taken",
    # reasoning / grounding
    "missing_reasoning": "the reasoning key is absent",
    "reasoning_not_string": "the reasoning is not a string and was converted",
    "token_normalized": "special tokens were written non-canonically and were normalised",
    "missing_regions": "the SC output has no edit_region key",
    "regions_not_list": "edit_region is not a list",
    "region_invalid": "a region entry is not an object with a valid 4-number bbox; it was dropped",
    "region_missing_id": "a region has no integer id; its list index was used",
    "region_missing_label": "a region has no label",
    "duplicate_region_id": "two regions share an id; the later one was dropped",
    "bbox_clamped": "a box coordinate outside [0, 1000] was clamped",
    "bbox_reordered": "a box had x1 > x2 or y1 > y2; the coordinates were swapped",
    "bbox_degenerate": "a box has zero width or height",
    "bbox_id_out_of_vocab": "a region id or <|bbox_i|> token id is above 15",
    "missing_global_token": "<|global|> is absent (required once for a single-source SC output)",
    "global_token_repeated": "<|global|> appears more than once",
    "bbox_token_without_region": "a <|bbox_i|> token refers to an id with no region",
    "region_without_bbox_token": "a region is never referenced by its <|bbox_i|> token",
    "bbox_token_repeated": "a region's <|bbox_i|> token appears more than once",
    "unexpected_grounding_token": "a PQ reasoning contains <|bbox_i|> or <|global|> tokens",
    "unexpected_regions": "a PQ output contains edit regions (ignored)",
}

# Issues that concern grounding only; they never affect parse_ok.
GROUNDING_ISSUES = frozenset({
    "token_normalized", "missing_regions", "regions_not_list", "region_invalid", "region_missing_id",
    "region_missing_label", "duplicate_region_id", "bbox_clamped", "bbox_reordered", "bbox_degenerate",
    "bbox_id_out_of_vocab", "missing_global_token", "global_token_repeated", "bbox_token_without_region",
    "region_without_bbox_token", "bbox_token_repeated", "unexpected_grounding_token", "unexpected_regions",
})


# ----------------------------------------------------------------------------------------------
# Result
# ----------------------------------------------------------------------------------------------


def _score_property(name: str) -> property:
    """A read-only attribute for one sub-score: ``scores[name]``, or None when the answer did not give it."""
    return property(lambda self: self.scores.get(name), doc=f"``scores[{name!r}]`` (None when absent).")


@dataclass
class ParsedOutput:
    """Result of parsing one generation (``task`` ``"sc"`` or ``"pq"``; ``parse_ok``: module docstring).

    ``regions``: ``{"id", "label", "bbox_2d": [x1, y1, x2, y2]}`` with ints in [0, 1000], x1 <= x2, y1 <= y2 (empty
    for PQ). ``reasoning`` holds the special tokens in canonical form; ``preamble`` is its text before the first
    token, ``region_reasoning[i]`` the text after each ``<|bbox_i|>`` up to the next token (a repeated token's
    segments joined), ``global_reasoning`` the text after ``<|global|>``. ``issues``: unique codes in order of first
    occurrence; ``issue_details``: every occurrence. ``score_source``: json, repaired_json, fallback or none.
    """

    task: str
    parse_ok: bool = False
    scores: Dict[str, Optional[float]] = field(default_factory=dict)
    regions: List[Dict[str, Any]] = field(default_factory=list)
    reasoning: str = ""
    preamble: str = ""
    region_reasoning: Dict[int, str] = field(default_factory=dict)
    global_reasoning: Optional[str] = None
    issues: List[str] = field(default_factory=list)
    issue_details: List[Dict[str, str]] = field(default_factory=list)
    score_source: str = "none"
    num_sources: Optional[int] = None
    raw: str = ""

    # -- convenience --------------------------------------------------------------------------
    s_if = _score_property("s_if")
    s_con = _score_property("s_con")
    naturalness = _score_property("naturalness")
    artifacts = _score_property("artifacts")

    @property
    def score_pair(self) -> Tuple[Optional[float], Optional[float]]:
        names = SC_SCORE_NAMES if self.task == "sc" else PQ_SCORE_NAMES
        return (self.scores.get(names[0]), self.scores.get(names[1]))

    @property
    def grounding_ok(self) -> bool:
        """No grounding issue was recorded (always True for a clean PQ output)."""
        return not any(code in GROUNDING_ISSUES for code in self.issues)

    def add_issue(self, code: str, message: str = "") -> None:
        if code not in self.issues:
            self.issues.append(code)
        self.issue_details.append({"code": code, "message": message or ISSUE_CODES.get(code, code)})

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable dict (region_reasoning keys become strings)."""
        return {
            "task": self.task,
            "parse_ok": self.parse_ok,
            "scores": dict(self.scores),
            "regions": [
                {"id": r["id"], "label": r["label"], "bbox_2d": list(r["bbox_2d"])}
                for r in self.regions
            ],
            "reasoning": self.reasoning,
            "preamble": self.preamble,
            "region_reasoning": {str(k): v for k, v in self.region_reasoning.items()},
            "global_reasoning": self.global_reasoning,
            "issues": list(self.issues),
            "issue_details": [dict(d) for d in self.issue_details],
            "score_source": self.score_source,
            "num_sources": self.num_sources,
            "raw": self.raw,
        }


# ----------------------------------------------------------------------------------------------
# Scores
# ----------------------------------------------------------------------------------------------

_NUM_STR_RE = re.compile(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:/\s*(\d+(?:\.\d+)?)\s*)?\Z")
_PAIR_STR_RE = re.compile(
    r"\s*\[?\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*,\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*\]?\s*\Z"
)
_FALLBACK_NUM = r"[\"']?\s*(-?\d+(?:\.\d+)?)\s*[\"']?"
_FALLBACK_RE = re.compile(
    r"([\"'])scores?\1\s*:\s*\[\s*" + _FALLBACK_NUM + r"\s*,\s*" + _FALLBACK_NUM + r"\s*\]",
    re.I,
)
_DICT_SCORE_NAMES = {
    "sc": (
        ("s_if", "score1", "instruction_following", "editing_success", "success", "if"),
        ("s_con", "score2", "consistency", "over_editing", "overediting", "con", "fusion_quality"),
    ),
    "pq": (
        ("naturalness", "s_nat", "nat", "score1"),
        ("artifacts", "s_art", "art", "artifact", "score2"),
    ),
}


def _to_float(v: Any) -> Optional[float]:
    try:
        return float(v)
    except (OverflowError, ValueError, TypeError):
        return None


def finite_number(value: Any) -> Optional[float]:
    """``value`` as a finite float when it is an int, a float or a string holding one (surrounding space allowed),
    else None (bools, other types, text that is no number, NaN, infinities, integers too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    number = _to_float(value.strip() if isinstance(value, str) else value)
    return number if number is not None and math.isfinite(number) else None


def _score_value(v: Any, idx: int, res: ParsedOutput, score_max: float) -> Optional[float]:
    """Convert one score element; records issues; returns a clamped float or None."""
    if isinstance(v, bool) or v is None:
        res.add_issue("score_invalid", "score[%d] is %r" % (idx, v))
        return None
    if isinstance(v, (int, float)):
        x = _to_float(v)
        if x is None:
            res.add_issue("score_invalid", "score[%d] is not representable as a float" % idx)
            return None
    elif isinstance(v, str):
        m = _NUM_STR_RE.match(v)
        if m is None:
            res.add_issue("score_invalid", "score[%d] %r is not a number" % (idx, v[:50]))
            return None
        x = float(m.group(1))
        res.add_issue("score_from_string", "score[%d] %r" % (idx, v[:50]))
        if m.group(2) is not None:
            denom = float(m.group(2))
            if denom <= 0:
                res.add_issue("score_invalid", "score[%d] %r has a zero denominator" % (idx, v))
                return None
            if denom != score_max:
                x = x / denom * score_max
                res.add_issue("score_rescaled", "score[%d] %r -> %g" % (idx, v, x))
    else:
        res.add_issue("score_invalid", "score[%d] has type %s" % (idx, type(v).__name__))
        return None
    if not math.isfinite(x):
        res.add_issue("score_invalid", "score[%d] is not finite" % idx)
        return None
    if x < SCORE_MIN or x > score_max:
        c = min(max(x, SCORE_MIN), score_max)
        res.add_issue("score_clamped", "score[%d] %g clamped to %g" % (idx, x, c))
        x = c
    return x


def _scores_from_obj(obj: Dict[str, Any], task: str, res: ParsedOutput, score_max: float):
    key, val = get_key(obj, ("score", "scores"))
    if key is None:
        res.add_issue("missing_score")
        return None, None
    if key.strip().lower() != "score":
        res.add_issue("key_alias", "%r used for 'score'" % key)
    if isinstance(val, dict):
        res.add_issue("score_from_dict")
        out = []
        for i, names in enumerate(_DICT_SCORE_NAMES[task]):
            k, v = get_key(val, names)
            if k is None:
                res.add_issue("missing_score", "score %r not found in the mapping" % names[0])
                out.append(None)
            else:
                out.append(_score_value(v, i, res, score_max))
        return out[0], out[1]
    if isinstance(val, str):
        m = _PAIR_STR_RE.match(val)
        if m is not None:
            res.add_issue("score_from_string", "score list given as the string %r" % val[:50])
            val = [float(m.group(1)), float(m.group(2))]
    if isinstance(val, (list, tuple)):
        if len(val) == 1 and isinstance(val[0], (list, tuple)):
            val = val[0]  # [[a, b]]
        if len(val) == 0:
            res.add_issue("missing_score", "empty score list")
            return None, None
        if len(val) == 1:
            res.add_issue("score_not_pair", "one score given; the second is missing")
            return _score_value(val[0], 0, res, score_max), None
        if len(val) > 2:
            res.add_issue("score_list_too_long", "%d scores given" % len(val))
        return _score_value(val[0], 0, res, score_max), _score_value(val[1], 1, res, score_max)
    if val is None:
        res.add_issue("missing_score", "score is null")
        return None, None
    # a scalar where a pair is expected: the first score only, never duplicated
    res.add_issue("score_not_pair", "a scalar score was given; the second is missing")
    return _score_value(val, 0, res, score_max), None


def _scores_from_fallback(text: str, res: ParsedOutput, score_max: float):
    matches = []
    for m in _FALLBACK_RE.finditer(text):
        matches.append((m.group(2), m.group(3)))
        if len(matches) > 16:
            break
    if not matches:
        return None, None
    if any(pair != matches[0] for pair in matches[1:]):
        res.add_issue("fallback_ambiguous")
        return None, None
    res.add_issue("score_from_fallback")
    a, b = matches[0]
    return (
        _score_value(float(a), 0, res, score_max),
        _score_value(float(b), 1, res, score_max),
    )


# ----------------------------------------------------------------------------------------------
# Regions and reasoning tokens
# ----------------------------------------------------------------------------------------------

# Keys whose presence marks a JSON object as the output object (aliases included).
_OUTPUT_KEYS = ("score", "scores", "reasoning", "edit_region", "edit_regions")


def _bbox(v: Any, idx: int, res: ParsedOutput) -> Optional[List[int]]:
    if isinstance(v, str):
        nums = re.findall(r"-?\d+(?:\.\d+)?", v)
        if len(nums) != 4 or not re.fullmatch(r"[\s\[\](),\d.\-]*", v):
            return None
        v = nums
    if not isinstance(v, (list, tuple)) or len(v) != 4:
        return None
    coords = [finite_number(x) for x in v]
    if None in coords:
        return None
    out = []
    for x in coords:
        c = min(max(int(round(x)), 0), BBOX_SCALE)
        if c != int(round(x)):
            res.add_issue("bbox_clamped", "region %d coordinate %g clamped to %d" % (idx, x, c))
        out.append(c)
    x1, y1, x2, y2 = out
    if x1 > x2 or y1 > y2:
        res.add_issue("bbox_reordered", "region %d box %r" % (idx, out))
        x1, x2 = min(x1, x2), max(x1, x2)
        y1, y2 = min(y1, y2), max(y1, y2)
    if x1 == x2 or y1 == y2:
        res.add_issue("bbox_degenerate", "region %d box %r" % (idx, [x1, y1, x2, y2]))
    return [x1, y1, x2, y2]


def _region_id(v: Any) -> Optional[int]:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, float) and v.is_integer() and v >= 0:
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _regions_from_obj(obj: Dict[str, Any], res: ParsedOutput) -> List[Dict[str, Any]]:
    key, val = get_key(obj, ("edit_region", "edit_regions", "regions"))
    if key is None:
        res.add_issue("missing_regions")
        return []
    if key.strip().lower() != "edit_region":
        res.add_issue("key_alias", "%r used for 'edit_region'" % key)
    if val is None:
        return []
    if isinstance(val, dict):
        val = [val]
    if not isinstance(val, list):
        res.add_issue("regions_not_list", "edit_region has type %s" % type(val).__name__)
        return []
    regions: List[Dict[str, Any]] = []
    seen = set()
    for idx, item in enumerate(val):
        if not isinstance(item, dict):
            res.add_issue("region_invalid", "region %d is not an object" % idx)
            continue
        bkey, bval = get_key(item, ("bbox_2d", "bbox", "box"))
        box = _bbox(bval, idx, res) if bkey is not None else None
        if box is None:
            res.add_issue("region_invalid", "region %d has no valid bbox_2d" % idx)
            continue
        ikey, ival = get_key(item, ("id", "region_id"))
        rid = _region_id(ival) if ikey is not None else None
        if rid is None:
            res.add_issue("region_missing_id", "region %d id %r; using %d" % (idx, ival, idx))
            rid = idx
        if rid in seen:
            res.add_issue("duplicate_region_id", "region id %d repeated" % rid)
            continue
        seen.add(rid)
        if rid > MAX_BBOX_ID:
            res.add_issue("bbox_id_out_of_vocab", "region id %d" % rid)
        lkey, label = get_key(item, ("label",))
        if lkey is None or label is None:
            res.add_issue("region_missing_label", "region %d" % rid)
            label = ""
        elif not isinstance(label, str):
            label = str(label)
        regions.append({"id": rid, "label": label, "bbox_2d": box})
    return regions


def _reasoning_from_obj(obj: Dict[str, Any], res: ParsedOutput) -> str:
    key, val = get_key(obj, ("reasoning", "reason", "rationale"))
    if key is None:
        res.add_issue("missing_reasoning")
        return ""
    if key.strip().lower() != "reasoning":
        res.add_issue("key_alias", "%r used for 'reasoning'" % key)
    if isinstance(val, str):
        return val
    res.add_issue("reasoning_not_string", "reasoning has type %s" % type(val).__name__)
    if val is None:
        return ""
    if isinstance(val, list):
        return " ".join(str(x) for x in val)
    return str(val)


def _tokens(reasoning: str, res: ParsedOutput):
    """Normalise tokens; returns (canonical reasoning, [(kind, id, start, end)])."""
    out: List[str] = []
    toks: List[Tuple[str, Optional[int], int, int]] = []
    last = 0
    length = 0
    normalized = False
    for m in GROUNDING_TOKEN_RE.finditer(reasoning):
        out.append(reasoning[last : m.start()])
        length += m.start() - last
        canon = canonical_token(m)
        kind, tid = ("global", None) if m.group(2) is not None else ("bbox", int(m.group(1)))
        if m.group() != canon:
            normalized = True
        toks.append((kind, tid, length, length + len(canon)))
        out.append(canon)
        length += len(canon)
        last = m.end()
    out.append(reasoning[last:])
    if normalized:
        res.add_issue("token_normalized")
    return "".join(out), toks


def _segments(reasoning: str, toks, res: ParsedOutput) -> None:
    res.preamble = reasoning[: toks[0][2]].strip() if toks else reasoning.strip()
    region_parts: Dict[int, List[str]] = {}
    global_parts: List[str] = []
    for k, (kind, tid, _, end) in enumerate(toks):
        nxt = toks[k + 1][2] if k + 1 < len(toks) else len(reasoning)
        seg = reasoning[end:nxt].strip()
        if kind == "global":
            global_parts.append(seg)
        else:
            region_parts.setdefault(tid, []).append(seg)
    res.region_reasoning = {tid: " ".join(p for p in parts if p) for tid, parts in region_parts.items()}
    res.global_reasoning = " ".join(p for p in global_parts if p) if global_parts else None


def _check_sc_grounding(res: ParsedOutput, toks, multi_source: bool) -> None:
    n_global = sum(1 for kind, _, _, _ in toks if kind == "global")
    if n_global == 0 and not multi_source:
        # D.1.1: "<|global|> before overall assessment"; D.2.3: "exactly one <|global|>".
        # D.1.2 (several sources) does not ask for it.
        res.add_issue("missing_global_token")
    elif n_global > 1:
        res.add_issue("global_token_repeated", "<|global|> appears %d times" % n_global)
    counts: Dict[int, int] = {}
    for kind, tid, _, _ in toks:
        if kind == "bbox":
            counts[tid] = counts.get(tid, 0) + 1
    region_ids = {r["id"] for r in res.regions}
    for tid in sorted(counts):
        if tid > MAX_BBOX_ID and tid not in region_ids:
            res.add_issue("bbox_id_out_of_vocab", "token <|bbox_%d|>" % tid)
        if tid not in region_ids:
            res.add_issue("bbox_token_without_region", "<|bbox_%d|> has no region" % tid)
    for rid in sorted(region_ids):
        c = counts.get(rid, 0)
        if c == 0:
            res.add_issue("region_without_bbox_token", "region %d is never cited" % rid)
        elif c > 1:
            res.add_issue("bbox_token_repeated", "<|bbox_%d|> appears %d times" % (rid, c))


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def _parse(text: Any, task: str, num_sources: Optional[int], score_max: float) -> ParsedOutput:
    if not isinstance(text, str):
        raise TypeError("text must be a str, got %s" % type(text).__name__)
    if num_sources is not None and (isinstance(num_sources, bool) or not isinstance(num_sources, int)):
        raise TypeError("num_sources must be an int or None, got %s" % type(num_sources).__name__)
    names = SC_SCORE_NAMES if task == "sc" else PQ_SCORE_NAMES
    res = ParsedOutput(task=task, raw=text, num_sources=num_sources)
    res.scores = {names[0]: None, names[1]: None}
    try:
        _parse_into(text, task, num_sources, float(score_max), res, names)
    except Exception as exc:  # never raise on str input
        res.scores = {names[0]: None, names[1]: None}
        res.parse_ok = False
        res.score_source = "none"
        res.add_issue("internal_error", "%s: %s" % (type(exc).__name__, str(exc)[:200]))
    return res


def _parse_into(text, task, num_sources, score_max, res: ParsedOutput, names) -> None:
    if not text.strip():
        res.add_issue("empty_output")
        return
    if len(text) > MAX_INPUT_CHARS:
        res.add_issue("input_too_long", "%d characters; parsed the first %d" % (len(text), MAX_INPUT_CHARS))
        text = text[:MAX_INPUT_CHARS]
    cleaned = strip_thinking_and_fences(text, res)
    if not cleaned.strip():
        res.add_issue("no_json_object", "nothing is left after removing the thinking text")
        return
    obj, mode = find_output_object(cleaned, res, _OUTPUT_KEYS)
    a = b = None
    if mode in ("json", "repaired_json"):
        a, b = _scores_from_obj(obj, task, res, score_max)
        if a is not None or b is not None:
            res.score_source = mode
    else:
        # broken / truncated JSON: only the key-anchored '"score": [a, b]' pattern is allowed
        a, b = _scores_from_fallback(cleaned, res, score_max)
        if a is not None or b is not None:
            res.score_source = "fallback"
        elif "missing_score" not in res.issues:
            res.add_issue("missing_score")
    res.scores = {names[0]: a, names[1]: b}
    res.parse_ok = a is not None and b is not None

    if obj is None:
        return
    reasoning = _reasoning_from_obj(obj, res)
    reasoning, toks = _tokens(reasoning, res)
    res.reasoning = reasoning
    _segments(reasoning, toks, res)
    if task == "sc":
        res.regions = _regions_from_obj(obj, res)
        _check_sc_grounding(res, toks, multi_source=num_sources is not None and num_sources >= 2)
    else:
        key, val = get_key(obj, ("edit_region", "edit_regions", "regions"))
        if key is not None and val:
            res.add_issue("unexpected_regions")
        if toks:
            res.add_issue("unexpected_grounding_token", "%d token(s)" % len(toks))


def parse_sc_output(
    text: str, num_sources: Optional[int] = None, score_max: float = SCORE_MAX
) -> ParsedOutput:
    """Parse a semantic-consistency (SC) generation: ``num_sources`` None or 1 is the single-source prompt D.1.1
    (``<|global|>`` required exactly once), >= 2 the multi-source prompt D.1.2 (``<|global|>`` optional)."""
    return _parse(text, "sc", num_sources, score_max)


def parse_pq_output(text: str, score_max: float = SCORE_MAX) -> ParsedOutput:
    """Parse a perceptual-quality (PQ) generation (paper D.1.3): ``naturalness``, ``artifacts``."""
    return _parse(text, "pq", None, score_max)


def parse_output(
    text: str, task: str, num_sources: Optional[int] = None, score_max: float = SCORE_MAX
) -> ParsedOutput:
    """Dispatch on ``task`` (``"sc"`` or ``"pq"``; ValueError otherwise)."""
    t = str(task).lower()
    if t == "sc":
        return parse_sc_output(text, num_sources=num_sources, score_max=score_max)
    if t == "pq":
        return parse_pq_output(text, score_max=score_max)
    raise ValueError("task must be 'sc' or 'pq', got %r" % (task,))
