"""Scripted answers of the SpatialReward data pipeline's judges (prompts D.2), for tests and benchmarks that run
the pipeline against a local chat-completions server instead of real models.

:func:`scripted_d2_answer` reads a request's text, recognises the stage by its D.2 prompt and answers as a
well-behaved model would, deterministically: the grounder returns ``{box_num}`` boxes, the annotators a short
reasoning and scores, the aligner ``check_result: true`` with the grounding tokens inserted into the original
reasoning. Markers in the editing instruction make one stage misbehave:

=====================  =====================================================================================
``[bad-grounding]``    the grounder answers in prose (no JSON)
``[no-edit]``          the grounder finds no edited region (an empty list)
``[sc-garbage]``       the SC annotator gives a reasoning without scores
``[sc-clamped]``       the SC annotator scores 31 on the 0-25 scale
``[hallucination]``    the aligner answers ``check_result: false``
``[drift]``            the aligner rewrites the reasoning in other words
``[no-global]``        the aligner leaves out ``<|global|>``
=====================  =====================================================================================

Transport behaviours (HTTP 429, slow answers, refusals) are the test server's business, not this module's.
"""

from __future__ import annotations

import json
import re
from typing import List

__all__ = ["REASONING", "scripted_d2_answer"]

REASONING = "The requested change is visible in the edited region. The rest of the scene is unchanged."
PQ_REASONING = "The lighting and shadows look natural and there are no visible artifacts."


def _instruction(text: str) -> str:
    for pattern in (r"\*\*Editing Instruction\*\*: (.*)", r"Editing [Ii]nstruction: (.*)"):
        match = re.search(pattern, text)
        if match:
            return match.group(1)
    return ""


def _grounding(text: str) -> str:
    instruction = _instruction(text)
    if "[bad-grounding]" in instruction:
        return "I looked at both images; the hat was added on the head."
    if "[no-edit]" in instruction:
        return '```json\n{"edit_region": []}\n```'
    count = int(re.search(r"\*\*Number of Edit Regions\*\*: (\d+)", text).group(1))
    words = [w for w in re.findall(r"[a-z]+", instruction.lower()) if len(w) > 3] or ["object"]
    regions = [{"id": str(k + 1), "label": words[k % len(words)],
                "bbox_2d": [100 + 150 * k, 120, 300 + 150 * k, 480 + 40 * k]} for k in range(count)]
    return json.dumps({"edit_region": regions})


def _annotation(text: str) -> str:
    instruction = _instruction(text)
    if "[sc-garbage]" in instruction:
        return '{"reasoning": "Looks fine to me."}'
    if "[sc-clamped]" in instruction:
        return json.dumps({"reasoning": REASONING, "score": [31, 20]})
    return json.dumps({"reasoning": REASONING, "score": [21, 18.5]})


def _alignment(text: str) -> str:
    instruction = _instruction(text)
    if "[hallucination]" in instruction:
        return "check_result: false"
    # the last ones: the prompt's own example comes first
    regions: List[dict] = json.loads(re.findall(r"- edit_region: (.*)", text)[-1])
    original = json.loads(re.findall(r"- Original Reasoning: (.*)", text)[-1])
    if "[drift]" in instruction:
        return "check_result: true\nA completely different account of what happened to the picture, in new words."
    first, _, rest = original.partition(". ")
    if regions:
        first = first.replace("the edited region", "the <|bbox_0|>edited region", 1)
        first += "".join(f". The <|bbox_{r['id']}|>{r['label']} is edited too" for r in regions[1:])
    marker = "" if "[no-global]" in instruction else "<|global|> "
    return f"check_result: true\n{first}. {marker}{rest}"


def scripted_d2_answer(text: str) -> str:
    """The scripted answer to a request whose text parts are ``text`` (module docstring)."""
    if "You need to locate the edited regions" in text:
        return _grounding(text)
    if "check_result" in text:
        return _alignment(text)
    if "based on image naturalness" in text:  # the PQ request has no instruction: no marker reaches it
        return json.dumps({"reasoning": PQ_REASONING, "score": [22, 23]})
    if "degree of overediting" in text:
        return _annotation(text)
    raise ValueError(f"not a D.2 pipeline request: {text[:120]!r}")
