"""ImgEdit-Bench Basic's judge: a per-type rubric of three 1-5 criteria through the call engine.

Protocol (PKU-YuanGroup/ImgEdit ``Benchmark/Basic/basic_bench.py`` @547185d, unchanged in substance since
c14480a): one request per edit, the text first (the type's rubric ``prompts[edit_type]`` with ``<edit_prompt>``
replaced by the instruction), then the source image, then the edited image; no ``max_tokens`` and no
``temperature`` sent. The script names ``gpt-4o``; the published numbers (ImgEdit's leaderboard,
``assets/leaderboard.png`` @2051b15, and the SpatialReward paper's Table 3) use GPT-4.1. The answer is a few lines (``basic_bench_readme.md``: ``Brief reasoning: ...`` and
three ``<Criterion>: <score>`` lines, e.g. ``Prompt Compliance: 4``); ``step1_get_avgscore.py`` keeps the lines
whose value is a whole number and takes their mean, rounded to 2 places.

Prompts. Only ImgEdit's own ``prompts.json`` (``{edit_type: rubric}``; its keys ``replace, add, adjust, remove,
style, action, extract, background, compose`` are the rows' categories) gives numbers comparable with published
ones: pass the user's copy as ``--prompts``. A dataset converted before the type names were mapped (category
``alter``, ImgEdit c14480a's spelling) is judged with the ``adjust`` rubric. Without it the judge uses :data:`OWN_RUBRICS`, our wording of a
three-criterion rubric per type (instruction adherence, editing quality, detail preservation: the three aspects
``basic_bench_readme.md`` names), with the same inputs, 1-5 scale and line format; such reports say "own prompts —
not comparable with published numbers".

Parsing (:func:`parse_criteria`): ``Name: <value>`` lines after thinking text and code fences are removed
(Markdown bold around names or values is tolerated); a value that is a whole number is a score. A judgement needs
exactly three distinct criteria, each an integer in [1, 5] (with our own rubric: the three names it asks for);
a number outside the scale or a non-integer / NaN value on a criterion line, a criterion given twice with
different values, or more or fewer than three criteria make it a flagged failure. (The released script averages
whatever whole-number lines it finds; this stricter reading never averages a partial answer.)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ...data.converters.imgedit_bench import IMGEDIT_RELEASES, IMGEDIT_TYPES
from ...hub.errors import MIEScoreInputError
from ...hub.spatialreward_relaxed_json import strip_reasoning_and_fences
from .editor_judge import EditorJudge
from .protocols import EDITOR_BENCHMARKS

__all__ = ["EARLIER_TYPE_NAMES", "OWN_CRITERIA", "OWN_PROMPTS", "OWN_RUBRICS", "ImgEditJudge", "ImgEditPrompts",
           "parse_criteria", "read_imgedit_prompts", "rubric_type"]

SCALE = EDITOR_BENCHMARKS["imgedit"].scale
OWN_CRITERIA = ("Instruction Adherence", "Editing Quality", "Detail Preservation")

# edit type -> (what adherence, quality and preservation mean for it): our own wording
_GUIDANCE = {
    "add": ("the requested object is present, where and as the instruction says",
            "the new object fits the scene's lighting, perspective, scale and shadows, with no visible seam",
            "everything else in the image is unchanged"),
    "remove": ("the named object is gone entirely, with no remnant",
               "the filled region blends with its surroundings, with no smudge or ghost outline",
               "nothing else was removed or changed"),
    "replace": ("the named object is replaced by the requested one",
                "the new object sits naturally in its place (size, lighting, occlusion)",
                "the rest of the scene is unchanged"),
    "adjust": ("the named attribute (colour, material, texture, ...) of the named object changed as asked",
              "the change looks natural and even over the whole object",
              "the object's shape and the rest of the image are unchanged"),
    "background": ("the background is changed as described",
                   "the subject and the new background blend at the edges, in lighting and in perspective",
                   "the foreground subject is unchanged"),
    "style": ("the image is rendered in the requested style",
              "the stylised image is coherent and free of artifacts",
              "the content, layout and identities of the original stay recognisable"),
    "extract": ("the requested object is isolated and complete",
                "clean edges, no leftover background, good visual quality",
                "the extracted object keeps its identity, shape and details"),
    "action": ("the subject performs the requested action or pose",
               "the new pose is anatomically plausible and free of artifacts",
               "identity, clothing and the scene are unchanged"),
    "compose": ("every operation the instruction lists is carried out",
                "the combined result looks natural and free of artifacts",
                "what the instruction does not name is unchanged"),
}


def _own_rubric(edit_type: str) -> str:
    adherence, quality, preservation = _GUIDANCE[edit_type]
    return (f"You are rating an image edit of type '{edit_type}'. The first image is the original, the second the "
            "edited result. The editing instruction was: <edit_prompt>\n"
            "Rate three criteria, each with an integer from 1 (worst) to 5 (best):\n"
            f"- {OWN_CRITERIA[0]}: {adherence}.\n- {OWN_CRITERIA[1]}: {quality}.\n- {OWN_CRITERIA[2]}: {preservation}.\n"
            "Answer in exactly four lines:\nBrief reasoning: <one sentence>\n"
            + "\n".join(f"{name}: <1-5>" for name in OWN_CRITERIA))


OWN_RUBRICS = {edit_type: _own_rubric(edit_type) for edit_type in IMGEDIT_TYPES}


@dataclass(frozen=True)
class ImgEditPrompts:
    """The rubric per edit type (each holding ``<edit_prompt>``); ``criteria``: the names a rubric asks for (our
    own) or None (the user's file: any three names); ``label`` names them in every record."""

    rubrics: Dict[str, str]
    label: str
    comparable: bool
    criteria: Optional[tuple] = None


# the label names this wording (a changed wording never extends judgements made with the old one)
OWN_PROMPTS = ImgEditPrompts(
    OWN_RUBRICS, f"own (sha256 {hashlib.sha256(json.dumps(OWN_RUBRICS, sort_keys=True).encode()).hexdigest()[:12]})",
    False, OWN_CRITERIA)


# the type names of earlier releases -> prompts.json's (c14480a's basic_edit.json wrote "alter" for "adjust")
EARLIER_TYPE_NAMES = {old: new for release in IMGEDIT_RELEASES.values() for old, new in release.renamed.items()}


def rubric_type(category: str) -> str:
    """The ``prompts.json`` key of a row's category (an earlier release's spelling mapped to the current one)."""
    return EARLIER_TYPE_NAMES.get(category, category)


def read_imgedit_prompts(path, types: Sequence[str]) -> ImgEditPrompts:
    """ImgEdit's ``prompts.json`` from the user's copy; every edit type in ``types`` needs a rubric."""
    path = Path(path).expanduser()
    types = sorted({rubric_type(t) for t in types})
    expected = EDITOR_BENCHMARKS["imgedit"].prompts_expected
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {type(err).__name__}: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: its top level is not an object of strings")
    missing = [t for t in types if t not in data]
    no_slot = [t for t in types if t in data and "<edit_prompt>" not in data[t]]
    if missing or no_slot:
        detail = (f"no rubric for {', '.join(missing)}" if missing else
                  f"the rubric of {', '.join(no_slot)} has no <edit_prompt>")
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {detail}")
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
    return ImgEditPrompts(dict(data), f"{path.name} (sha256 {digest})", True, None)


_LINE = re.compile(r"^[\s*#>\-]*(?P<name>[^:\n*]+?)[\s*]*:[\s*]*(?P<value>[^\s*]+)[\s*]*$")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$|^[-+]?(?:nan|inf|infinity)$", re.I)


def parse_criteria(text: Optional[str], names: Optional[Sequence[str]] = None
                   ) -> tuple[Optional[Dict[str, int]], List[str], str]:
    """``(criteria, issues, reasoning)`` of an ImgEdit answer (rules in the module docstring): ``criteria`` maps
    each of the three criterion names to its 1-5 score, or is None."""
    if text is None:
        return None, [], ""
    if not text.strip():
        return None, ["empty_answer"], ""
    found: Dict[str, int] = {}
    issues: List[str] = []
    reasoning = ""
    for line in strip_reasoning_and_fences(text).splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        name, value = match["name"].strip(), match["value"]
        if not _NUMBER.match(value):
            if name.lower().startswith("brief reasoning") or name.lower() == "reasoning":
                reasoning = line.split(":", 1)[1].strip()
            continue
        if not value.lstrip("+").isdigit():
            issues.append(f"score_invalid:{name}")
        elif not SCALE[0] <= int(value) <= SCALE[1]:
            issues.append(f"score_out_of_range:{name}")
        elif name in found and found[name] != int(value):
            issues.append(f"conflicting_scores:{name}")
        else:
            found[name] = int(value)
    if names is not None:
        by_lower = {n.lower(): n for n in found}
        issues += [f"missing_score:{n}" for n in names if n.lower() not in by_lower]
        found = {n: found[by_lower[n.lower()]] for n in names if n.lower() in by_lower}
    if len(found) != 3 and not issues:
        issues.append(f"{'missing' if len(found) < 3 else 'extra'}_scores:{len(found)}")
    return (None if issues else found), issues, reasoning


class ImgEditJudge(EditorJudge):
    """ImgEdit-Bench Basic through the call engine (module docstring); records ``{"criteria", "mean", "failed",
    "issues", "reasoning"}`` (``mean``: the exact mean of the three criteria; the report applies the released
    rounding)."""

    @classmethod
    def read_prompts(cls, path, categories):
        return read_imgedit_prompts(path, sorted(set(categories))) if path else OWN_PROMPTS

    def requests(self, sample, edited, category: str):
        rubric = self.prompts.rubrics[rubric_type(category)].replace("<edit_prompt>", sample.instruction)
        return [self.request(rubric, [sample.sources[0], edited], "imgedit")]

    def read_answers(self, texts: Dict[str, Optional[str]], category: str) -> Dict[str, Any]:
        criteria, issues, reasoning = parse_criteria(texts.get("imgedit"), self.prompts.criteria)
        mean = sum(criteria.values()) / len(criteria) if criteria else None
        return {"criteria": criteria, "mean": mean, "failed": criteria is None, "issues": issues,
                "reasoning": reasoning}
