"""GEdit-Bench's judge: VIEScore's ``tie`` task (semantic consistency and perceptual quality, 0-10) through the call
engine.

Protocol (TIGER-AI-Lab/VIEScore ``viescore/__init__.py`` @2cbea4e, task ``tie``, which GEdit's scorer runs):

* SC request: the SC prompt = the shared context, the two-image-edit rule and the SC rule, joined by newlines,
  ``<instruction>`` replaced by the instruction, with the source and the edited image (in that order; the text
  part first, as ``GPT4o.prepare_prompt`` of Step1X-Edit's ``GEdit-Bench/viescore/mllm_tools/openai.py`` @570eba6
  builds it for the published GPT-4.1 judge; ``--parts-order images-first`` as its Qwen2.5-VL path). The answer ``{"score": [editing success, over-editing], "reasoning": ...}``; SC = min of the two.
* PQ request: the edited image alone, with the PQ prompt = the context and the PQ rule. The answer
  ``{"score": [naturalness, artifacts], ...}``; PQ = min of the two.
* O = sqrt(SC * PQ) (GEdit's ``calculate_statistics.py``); the edited image is first resized to the source's size.

Prompts. The published numbers are comparable only with VIEScore's own prompts: pass the user's copy of
``viescore/vie_prompts.py`` as ``--prompts``; it is parsed as text with :mod:`ast` (never imported or run) and
the four module-level strings that the ``tie`` task joins are read: ``_context_no_delimit``,
``_prompts_0shot_two_image_edit_rule``, ``_prompts_0shot_tie_rule_SC``, ``_prompts_0shot_rule_PQ``. Without
``--prompts`` the judge uses :data:`OWN_PROMPTS`, our wording of the same protocol (same inputs, criteria, 0-10
scales and JSON answer); such reports say "own prompts — not comparable with published numbers".

Parsing: the final JSON object with a ``"score"`` key (:func:`~modeling_miescore.hub.spatialreward_relaxed_json.
final_json_object`; several that disagree, or ``score`` written twice, are a flagged failure; an object nested
inside another JSON value is not the answer: ``nested_answer``), whose ``score`` must be a list of exactly two
integers in [0, 10]. The prompts ask for integer scores ("A score from 0 to 10", the examples ``[5, 10]``) and
VIEScore's own checks of a score list take integers only (``viescore/utils.py``: ``is_str_a_list_of_ints_0_to_10``,
the bare-list pattern ``^\[\d+, ?\d+\]$``), so a 7.5 is flagged (``score_not_integer``) rather than averaged.
(Its JSON path would take a 7.5 through ``json.loads``; an integral float such as ``7.0`` is read as 7.)
VIEScore's parser also accepts a bare ``[a, b]`` list, repairs broken JSON and, on a second failure, *guesses a
random score*; this judge does none of that: such an answer is a flagged failure.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...hub.errors import MIEScoreInputError
from ...hub.spatialreward_relaxed_json import final_json_object
from .editor_judge import EditorJudge
from .protocols import EDITOR_BENCHMARKS

__all__ = ["OWN_PROMPTS", "GEditJudge", "GEditPrompts", "VIESCORE_NAMES", "parse_score_list", "read_vie_prompts"]

VIESCORE_NAMES = ("_context_no_delimit", "_prompts_0shot_two_image_edit_rule", "_prompts_0shot_tie_rule_SC",
                  "_prompts_0shot_rule_PQ")
SCALE = EDITOR_BENCHMARKS["gedit"].scale


@dataclass(frozen=True)
class GEditPrompts:
    """The SC prompt (holding ``<instruction>``) and the PQ prompt; ``label`` names them in every record;
    ``comparable``: they are the benchmark's own (read from the user's copy)."""

    sc: str
    pq: str
    label: str
    comparable: bool


OWN_PROMPTS = GEditPrompts(
    sc=("You are judging an image edit. The first image is the original; the second is that image after an AI "
        "editor applied the instruction below.\n"
        "Give two integer scores from 0 to 10:\n"
        "1. Editing success: how completely and precisely the second image carries out the instruction (0: not "
        "at all; 10: exactly as asked).\n"
        "2. Over-editing: how much of what the instruction did not ask to change is kept (0: the scene became a "
        "different one; 10: only the requested change, everything else intact).\n"
        "Editing instruction: <instruction>\n"
        'Reply with one JSON object only: {"score": [editing success, over-editing], "reasoning": "<one short '
        'sentence>"}'),
    pq=("You are judging the visual quality of one AI-edited image, on its own.\n"
        "Give two integer scores from 0 to 10:\n"
        "1. Naturalness: whether the scene looks physically plausible: lighting, shadows, perspective, scale and "
        "blending (0: clearly unnatural; 10: fully natural).\n"
        "2. Artifacts: whether the image is free of distortion, smears, broken textures, malformed bodies or "
        "faces and watermarks (0: heavily damaged; 10: none).\n"
        'Reply with one JSON object only: {"score": [naturalness, artifacts], "reasoning": "<one short '
        'sentence>"}'),
    label="own", comparable=False)
# the label names this wording (a changed wording never extends judgements made with the old one)
OWN_PROMPTS = dataclasses.replace(
    OWN_PROMPTS, label=f"own (sha256 {hashlib.sha256((OWN_PROMPTS.sc + OWN_PROMPTS.pq).encode()).hexdigest()[:12]})")


def _module_strings(tree: ast.Module) -> Dict[str, str]:
    strings = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            strings[target.id] = value.value
    return strings


def read_vie_prompts(path) -> GEditPrompts:
    """The SC and PQ prompts of VIEScore's ``tie`` task from the user's ``vie_prompts.py`` (parsed, never run)."""
    path = Path(path).expanduser()
    expected = EDITOR_BENCHMARKS["gedit"].prompts_expected
    try:
        text = path.read_text(encoding="utf-8")
        strings = _module_strings(ast.parse(text, filename=str(path)))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as err:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else ''}") from None
    missing = [name for name in VIESCORE_NAMES if name not in strings]
    if missing:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: no string {', '.join(missing)}")
    context, rule, sc_rule, pq_rule = (strings[n] for n in VIESCORE_NAMES)
    if "<instruction>" not in sc_rule:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {VIESCORE_NAMES[2]} has no <instruction>")
    digest = hashlib.sha256("\0".join(strings[n] for n in VIESCORE_NAMES).encode()).hexdigest()[:12]
    return GEditPrompts(sc="\n".join([context, rule, sc_rule]), pq="\n".join([context, pq_rule]),
                        label=f"{path.name} (sha256 {digest})", comparable=True)


def parse_score_list(text: Optional[str], count: int = 2) -> tuple[Optional[List[float]], List[str], str]:
    """``(scores, issues, reasoning)`` of a VIEScore answer: ``scores`` is the list of ``count`` numbers in
    [0, 10] under ``"score"``, or None (the issues say why)."""
    if text is None:
        return None, [], ""
    if not text.strip():
        return None, ["empty_answer"], ""
    obj, found_issues = final_json_object(text, ("score",), top_level=True)
    if obj is None:
        return None, found_issues or ["no_json_object"], ""
    if "score" not in obj:  # written twice with different values: ambiguous
        return None, found_issues, ""
    reasoning = obj.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, str) else ""
    scores = obj["score"]
    if not isinstance(scores, list):
        return None, ["score_not_a_list"], reasoning
    if len(scores) != count:
        return None, [f"wrong_score_count:{len(scores)}"], reasoning
    issues = []
    for value in scores:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            issues.append("score_invalid")
        elif not SCALE[0] <= value <= SCALE[1]:
            issues.append("score_out_of_range")
        elif value != int(value):
            issues.append("score_not_integer")
    return (None if issues else [float(v) for v in scores]), sorted(set(issues)), reasoning


class GEditJudge(EditorJudge):
    """VIEScore ``tie`` through the call engine (module docstring); records ``{"sc", "pq", "o", "sc_scores",
    "pq_scores", "failed", "issues", "reasoning"}``."""

    resize_to_source = EDITOR_BENCHMARKS["gedit"].resize_to_source

    @classmethod
    def read_prompts(cls, path, categories):
        return read_vie_prompts(path) if path else OWN_PROMPTS

    def requests(self, sample, edited, category: str):
        sc_text = self.prompts.sc.replace("<instruction>", sample.instruction)
        return [self.request(sc_text, [sample.sources[0], edited], "gedit-sc"),
                self.request(self.prompts.pq, [edited], "gedit-pq")]

    def read_answers(self, texts: Dict[str, Optional[str]], category: str) -> Dict[str, Any]:
        sc_scores, sc_issues, sc_reason = parse_score_list(texts.get("gedit-sc"))
        pq_scores, pq_issues, pq_reason = parse_score_list(texts.get("gedit-pq"))
        issues = [f"{i}:sc" for i in sc_issues] + [f"{i}:pq" for i in pq_issues]
        ok = sc_scores is not None and pq_scores is not None
        sc = min(sc_scores) if sc_scores else None
        pq = min(pq_scores) if pq_scores else None
        return {"sc": sc if ok else None, "pq": pq if ok else None, "o": math.sqrt(sc * pq) if ok else None,
                "sc_scores": sc_scores, "pq_scores": pq_scores, "failed": not ok, "issues": issues,
                "reasoning": {"sc": sc_reason, "pq": pq_reason}}
