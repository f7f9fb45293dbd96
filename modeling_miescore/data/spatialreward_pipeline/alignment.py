"""Stage III, alignment and verification (paper sec. 3.3 "Step III", prompt D.2.3), and the training rows.

The aligner (the paper: Qwen-3-VL-235B, the grounder again) answers ``check_result: false`` (a hallucination, the
sample is discarded) or ``check_result: true`` and the reasoning with ``<|bbox_i|>`` / ``<|global|>`` inserted.

Checks on the answer (reason codes):

* ``alignment_unparsable``: no ``check_result: true|false`` (quotes, backticks or bold around it are fine;
  thinking text and code fences are ignored); ``hallucination``: ``check_result: false``;
  ``alignment_contradictory``: both ``check_result: true`` and ``check_result: false`` (the answer says both,
  e.g. "check_result: true ... check_result: false", so it says neither); ``control_token``: the refined text
  holds a chat-control token or a control character (``<|im_end|>``, NUL, ...:
  :func:`modeling_miescore.utils.text_hygiene.training_text_problem`);
  ``alignment_empty``: ``true`` with no text after it, or the prompt's ``[Refined Reasoning Text Here]``;
* ``rewrite_drift`` (ours: the paper states the priority, not a check; on by default, ``min_similarity=0`` /
  ``--min-similarity 0`` turns it off): D.2.3's first priority is to keep the original text; with the tokens
  taken out, the refined text must match the stage-II reasoning word for word to at least ``min_similarity``
  (default 0.6, difflib ratio over words; the aligner may add one short sentence per uncovered region);
* verification: the SFT row is checked with :func:`modeling_miescore.data.spatialreward_chat_examples.check_row`
  and, as D.2.3 requires for every sample, exactly one ``<|global|>`` also with several sources; a failing row is
  rejected with check_row's first issue code (e.g. ``region_without_bbox_token``, ``control_token``).

Token spellings the parser tolerates (``<| bbox_0 |>``, ``&lt;|global|&gt;``) are written in canonical form.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Dict, List, Optional, Tuple

from ...judges.call_engine import ChatRequest
from ...hub.spatialreward_relaxed_json import strip_reasoning_and_fences
from ...hub.spatialreward_parsing import parse_sc_output
from ...hub.spatialreward_tokens import GROUNDING_TOKEN_RE
from ..spatialreward_chat_examples import check_row, control_token_problem
from ...utils.text_hygiene import training_text_problem
from .grounding import labelled_images
from .prompts import ALIGNMENT_PROMPT, alignment_inputs_text
from .report import Outcome

__all__ = ["alignment_request", "make_pq_row", "make_sc_row", "parse_alignment", "text_similarity"]

STAGE = "alignment"
_CHECK_RE = re.compile(r"check_result[\s'\"`*]*[:=][\s'\"`*]*(true|false)\b(?:\*\*|[`'\"])?", re.I)
_PLACEHOLDER = "[Refined Reasoning Text Here]"


def alignment_request(sample, regions, reasoning: str, max_tokens: int = 1024, temperature: float = 0.0,
                      quote_user_text: bool = True) -> ChatRequest:
    text = ALIGNMENT_PROMPT + alignment_inputs_text(sample.instruction, regions, reasoning, quote_user_text)
    return ChatRequest([*labelled_images(sample), text], max_tokens=max_tokens, temperature=temperature,
                       stage="alignment")


def text_similarity(refined: str, original: str) -> float:
    """difflib ratio of the two texts' words, grounding tokens removed (1.0 = the same words in the same order)."""
    words = GROUNDING_TOKEN_RE.sub(" ", refined).split()
    return difflib.SequenceMatcher(a=words, b=original.split(), autojunk=False).ratio()


def parse_alignment(text: str, original: str, min_similarity: float = 0.6) -> Tuple[Optional[str], Outcome]:
    """``(refined reasoning, outcome)`` of a D.2.3 answer (module docstring)."""
    cleaned = strip_reasoning_and_fences(text)
    matches = list(_CHECK_RE.finditer(cleaned))
    if not matches:
        return None, Outcome.rejected(STAGE, "alignment_unparsable", text[:200])
    verdicts = {m.group(1).lower() for m in matches}
    if len(verdicts) > 1:
        return None, Outcome.rejected(STAGE, "alignment_contradictory",
                                      "the answer says both check_result: true and check_result: false")
    match = matches[0]
    if match.group(1).lower() == "false":
        return None, Outcome.rejected(STAGE, "hallucination", "the aligner found the reasoning inconsistent")
    refined = cleaned[match.end():].strip()
    problem = training_text_problem(refined)
    if problem:
        return None, Outcome.rejected(STAGE, "control_token", f"the refined text {problem}")
    if len(refined) >= 2 and refined[0] == refined[-1] and refined[0] in "\"'":
        refined = refined[1:-1].strip()
    if not refined or refined == _PLACEHOLDER:
        return None, Outcome.rejected(STAGE, "alignment_empty", text[:200])
    similarity = text_similarity(refined, original) if min_similarity else 1.0
    if similarity < min_similarity:
        return None, Outcome.rejected(STAGE, "rewrite_drift", f"similarity {similarity:.2f} < {min_similarity}")
    return refined, Outcome("ok", STAGE)


def _canonical(reasoning: str, regions, scores, num_sources: int) -> str:
    """The reasoning with grounding tokens in canonical spelling (as the parser writes them)."""
    target = json.dumps({"edit_region": regions, "reasoning": reasoning, "score": list(scores)})
    return parse_sc_output(target, num_sources=num_sources).reasoning


def _verify(row: Dict[str, Any]) -> Outcome:
    reason, issues = check_row(row)
    if reason is None and len(row["sources"]) > 1:
        n_global = len(re.findall(r"<\|global\|>", row["reasoning"]))
        if n_global != 1:  # D.2.3 "There must be exactly one <|global|> token", for every sample
            reason, issues = ("missing_global_token" if n_global == 0 else "global_token_repeated"), []
    if reason is None:
        return Outcome("ok", "verification")
    detail = control_token_problem(row) if reason == "control_token" else None
    return Outcome.rejected("verification", reason, detail or f"issues {issues}")


def make_sc_row(record, regions: List[Dict[str, Any]], reasoning: str, scores, annotator: str, route: str
                ) -> Tuple[Dict[str, Any], Outcome]:
    """The SC training row (schema of ``training/spatialreward_chat_examples.py``) and its verification outcome."""
    row = {"id": f"{record.id}:sc", "sample_id": record.id, "task": "sc", "sources": list(record.sources),
           "edited": record.edited, "instruction": record.instruction, "regions": regions,
           "reasoning": _canonical(reasoning, regions, scores, len(record.sources)),
           "scores": [float(s) for s in scores], "route": route, "annotator": annotator}
    return row, _verify(row)


def make_pq_row(record, reasoning: str, scores, annotator: str) -> Tuple[Dict[str, Any], Outcome]:
    """The PQ training row (edited image only, no regions) and its verification outcome."""
    row = {"id": f"{record.id}:pq", "sample_id": record.id, "task": "pq", "sources": [], "edited": record.edited,
           "instruction": "", "regions": [], "reasoning": reasoning, "scores": [float(s) for s in scores],
           "route": None, "annotator": annotator}
    return row, _verify(row)

