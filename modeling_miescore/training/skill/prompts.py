"""The two prompts of skill optimisation: the evaluator's (eq. 5: skill, images, instruction, fixed answer
format) and the optimiser's (eq. 7: numbered skill, failures and successes, the edit schema)."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

from ...data.schema import DIMENSIONS, MOS_SCALE
from ...hub.lm_digit_scores import answer_format
from .edits import EditBounds, number_lines
from .samples import SkillSample

__all__ = ["OPTIMIZER_INSTRUCTIONS", "Part", "build_evaluator_prompt", "build_optimizer_prompt"]

Part = Any  # a prompt part: ``str`` or ``PIL.Image.Image``


def build_evaluator_prompt(skill: str, sample: SkillSample, score_max: float = 5.0) -> List[Part]:
    """Prompt parts (strings and images, in order) for eq. 5: skill, labelled sources, instruction, the
    edited image last (same order and labels as MIEScore's default prompt template), then the answer format."""
    parts: List[Part] = [skill.rstrip("\n") + "\n\n"]
    for k, image in enumerate(sample.sources):
        parts.append(f"Source image {k + 1}:")
        parts.append(image)
        parts.append("\n")
    parts.append(f"Editing instruction: {sample.instruction}\n\nEdited image:")
    parts.append(sample.edited)
    # Appended after the skill, outside the part the optimiser edits, so that no skill edit can break the answer
    # format the parser expects. A MIEScore scorer without head reads its scores from the same format
    # (lm_digit_scores), so the zero-shot row of Table 5 is scored the way the skill was optimised.
    parts.append("\n" + answer_format(DIMENSIONS, score_max))
    return parts


# The optimiser's task (paper eq. 7 and SkillOpt-style reflection): look at the failures, propose K
# alternative bounded edits. The schema is spelled out because the answer is parsed strictly.
OPTIMIZER_INSTRUCTIONS = """You improve an evaluation skill: the rubric that a multimodal evaluator reads before scoring multi-source image edits on visual quality, instruction following and attribute preservation. The goal is that the evaluator's scores rank edits like human raters do (Spearman correlation with human mean opinion scores).

Current skill, with line numbers:
{numbered_skill}

On training samples, the evaluator with this skill gave these answers; these are the cases that deviate most from the human scores (evaluator scores on 0-{score_max:g}, human scores converted to the same scale):
{failures}
{successes}
Reflect on what in the skill made the evaluator disagree with the humans (missing criteria, wrong emphasis, unclear score bands, confusion between dimensions), then propose {k} different candidate revisions of the skill. Each candidate is a small set of line edits:
- {{"op": "add", "after": N, "text": "..."}} inserts one new line after line N (0 = at the top);
- {{"op": "delete", "line": N}} removes line N;
- {{"op": "replace", "line": N, "text": "..."}} rewrites line N.
Rules: line numbers refer to the numbering above (all edits of one candidate use it); at most {max_edits} edits per candidate; each text is one line of at most {max_line_chars} characters; the whole skill stays under {max_skill_chars} characters; do not change the answer format (it is fixed outside the skill).

Answer with one JSON object and nothing else:
{{"candidates": [{{"rationale": "<one sentence>", "edits": [<edit>, ...]}}, ...]}}"""


def _fmt_scores(values: Optional[Sequence[float]]) -> str:
    if values is None:
        return "none"
    return "VQ {:.2f}, IF {:.2f}, AP {:.2f}".format(*values)


def _case_lines(cases: Sequence[Mapping[str, Any]], score_max: float, max_raw_chars: int) -> List[str]:
    lines = []
    for i, f in enumerate(cases, start=1):
        human = [m / MOS_SCALE * score_max for m in f["mos"]]
        head = f"{i}. [{f['id']}] {f['num_sources']} source image(s); instruction: {f['instruction']}"
        if f.get("pred") is None:
            raw = " ".join(str(f.get("raw") or "").split())[:max_raw_chars]
            lines.append(f"{head}\n   evaluator answer could not be parsed ({f.get('error')}): {raw!r}\n"
                         f"   human: {_fmt_scores(human)}")
        else:
            lines.append(f"{head}\n   evaluator: {_fmt_scores(f['pred'])}; human: {_fmt_scores(human)}; "
                         f"deviation {f['deviation']:.3f}")
    return lines


def build_optimizer_prompt(skill: str, failures: Sequence[Mapping[str, Any]], k: int, bounds: EditBounds,
                           score_max: float = 5.0, max_raw_chars: int = 300,
                           successes: Sequence[Mapping[str, Any]] = ()) -> str:
    """Text prompt for eq. 7 from the numbered skill, the failure records of
    :func:`~modeling_miescore.training.skill.evaluation.select_failures` and,
    for contrast, the best-agreeing rollouts (``successes``, same record format)."""
    lines = _case_lines(failures, score_max, max_raw_chars)
    good = _case_lines(successes, score_max, max_raw_chars)
    successes_text = ("For contrast, cases where the evaluator agreed best with the humans:\n" + "\n".join(good) + "\n"
                      if good else "")
    return OPTIMIZER_INSTRUCTIONS.format(
        numbered_skill=number_lines(skill), failures="\n".join(lines) or "(no failure recorded)", k=k,
        successes=successes_text,
        score_max=score_max, max_edits=bounds.max_edits, max_line_chars=bounds.max_line_chars,
        max_skill_chars=bounds.max_skill_chars,
    )

