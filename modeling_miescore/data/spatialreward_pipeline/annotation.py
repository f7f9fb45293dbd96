"""Stage II, expert routing and annotation (paper sec. 3.3 "Step II", prompts D.2.2): the raw rationale
``T_raw`` and the scores ``s``.

Routing (ours; the paper names the split, not the rule). A sample is *human-centric* when, in this order:
its record says ``domain: "human"`` (``"general"`` forces the other route); its ``category`` is MER-Bench's
``human_basic`` or ``human_fine`` (``general``: the other route; other categories do not decide); or the
instruction or a stage-I region label (the grounder's own name for what it boxed) names a **person**: a word of
:data:`PERSON_WORDS` (person, woman, boy, he, her, portrait, ...) or of :data:`PERSON_ONLY_FEATURES` (beard,
makeup, hairstyle, ...: features only people have), as a whole word in any letter case. Body parts that animals
and things have too (eyes, face, leg, hands, ...) do not decide alone: "change the cat's eyes to blue", "remove the
table leg" and "replace the clock face" are general edits, "make her eyes blue" is human-centric. Everything else
is *general*. (An older rule counted any body-part word; ``human_words=`` restores a single word list.)

* Human-centric SC (the paper: Gemini-2.5-Pro, "crop-focused prompts"): D.2.2 "Human Domain" with the images in
  the order the prompt lists them: the original image(s), the edited image, then for each region a pair of crops
  "before edit" / "after edit", as the prompt promises. A crop is the region's box (0-1000, mapped onto each
  image's own size) grown by ``crop_padding`` of its width/height on every side, and to at least
  ``min_crop_side`` pixels (both kept inside the image). With several sources the "before" crop is cut from each
  source in turn (the same box on each image's own size: D.2.1 boxes removals in the original and additions in
  the edited image, so no single source is "the" before image).
* General SC (the paper: GPT-5, "visual bounding box overlays"): D.2.2 "General Domain" with the boxes drawn on
  the original image(s) and the edited image (:func:`modeling_miescore.hub.spatialreward_drawing.draw_regions`: one
  colour and an ``id: label`` tag per region), as its "Both images contain visual annotations" says.
  ``annotate_sources=False`` draws on / crops from the edited image only (``--edited-only-annotations``).
* PQ (the paper: GPT-5, "independently evaluated"): D.2.2 "Perceptual Quality" with the edited image alone
  (sec. 3.2 input isolation), whatever the route.

``<stream>_score_not_clean`` (ours; ``reject_unclean=False`` / ``--keep-unclean-scores`` turns it off) rejects a
score that had to be repaired, or an answer whose JSON is ambiguous (several answer objects, e.g. one quoted from
the instruction), so that no repaired number becomes a training target; the paper says nothing about such answers.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...data.schema import MER_CATEGORIES
from ...hub.spatialreward_drawing import bbox_to_pixels, draw_regions
from ...judges.call_engine import ChatRequest
from ...hub.spatialreward_parsing import parse_pq_output, parse_sc_output
from ...utils.text_hygiene import training_text_problem, valid_text
from .prompts import PQ_PROMPT, SC_GENERAL_PROMPT, SC_HUMAN_PROMPT, fill, user_text
from .report import Outcome

__all__ = ["HUMAN_WORDS", "PERSON_ONLY_FEATURES", "PERSON_WORDS", "crop_region", "parse_annotation", "pq_request",
           "route", "sc_request"]

STAGE = "annotation"

# Words naming a person (routing, module docstring).
PERSON_WORDS = (
    "person", "people", "persons", "man", "men", "woman", "women", "boy", "boys", "girl", "girls", "child",
    "children", "kid", "kids", "baby", "babies", "toddler", "lady", "ladies", "gentleman", "gentlemen", "guy",
    "guys", "human", "humans", "character", "characters", "portrait", "selfie", "bride", "groom", "he", "she",
    "his", "her", "hers", "him", "himself", "herself", "someone", "somebody", "player", "athlete", "worker",
    "actor", "actress", "student", "teacher", "doctor", "nurse", "soldier",
    "grandma", "grandpa", "mother", "father", "mom", "dad", "son", "daughter", "brother", "sister", "couple",
)
# Features only people have: they make an edit human-centric on their own.
PERSON_ONLY_FEATURES = ("beard", "mustache", "moustache", "makeup", "lipstick", "eyeliner", "eyeshadow", "freckles",
                        "hairstyle", "haircut", "hairdo", "ponytail", "pigtails", "earrings", "tattoo")
HUMAN_WORDS = PERSON_WORDS + PERSON_ONLY_FEATURES
# Scores that needed repairs are not used as training targets (spatialreward_parsing.ISSUE_CODES describes each).
UNCLEAN_SCORE_ISSUES = frozenset({"score_clamped", "score_rescaled", "score_from_fallback", "fallback_ambiguous",
                                  "score_list_too_long", "score_not_pair", "duplicate_key", "multiple_json_objects"})


def route(record, regions: Sequence[Dict[str, Any]], human_words: Sequence[str] = HUMAN_WORDS) -> str:
    """``"human"`` or ``"general"`` (module docstring); ``human_words``: the words that make an edit
    human-centric (default: :data:`PERSON_WORDS` and :data:`PERSON_ONLY_FEATURES`)."""
    if record.domain in ("human", "general"):
        return record.domain
    if record.category in MER_CATEGORIES:
        return "human" if record.category.startswith("human") else "general"
    text = " ".join([record.instruction, *(str(r.get("label", "")) for r in regions)])
    words = set(re.findall(r"[a-z]+", text.lower()))
    return "human" if words & {w.lower() for w in human_words} else "general"


def crop_region(image, bbox_2d: Sequence[float], padding: float = 0.15, min_side: int = 64):
    """The region's crop of ``image`` (module docstring: padding and minimum side, kept inside the image)."""
    width, height = image.size
    x1, y1, x2, y2 = bbox_to_pixels(bbox_2d, width, height)
    pad_x, pad_y = (x2 - x1) * padding, (y2 - y1) * padding

    def span(lo: float, hi: float, size: int) -> Tuple[int, int]:
        grow = max(0.0, min(min_side, size) - (hi - lo)) / 2
        lo, hi = lo - grow, hi + grow
        shift = max(0.0, -lo) - max(0.0, hi - size)  # slide back inside the image, keeping the size
        return int(round(max(0.0, lo + shift))), int(round(min(float(size), hi + shift)))

    left, right = span(x1 - pad_x, x2 + pad_x, width)
    top, bottom = span(y1 - pad_y, y2 + pad_y, height)
    return image.crop((left, top, right, bottom))


def _crop_parts(sample, regions, padding: float, min_side: int, annotate_sources: bool) -> List[Any]:
    parts: List[Any] = []
    n = len(sample.sources)
    for region in regions:
        tag = f"Edit region {region['id']} ({region.get('label') or 'region'}), "
        if annotate_sources:
            for k, source in enumerate(sample.sources):
                which = "before edit:" if n == 1 else f"before edit (original image {k + 1} of {n}):"
                parts += [(tag if k == 0 else "") + which, crop_region(source, region["bbox_2d"], padding, min_side)]
            parts += ["after edit:", crop_region(sample.edited, region["bbox_2d"], padding, min_side)]
        else:
            parts += [tag + "after edit:", crop_region(sample.edited, region["bbox_2d"], padding, min_side)]
    return parts


def _full_images(sources: Sequence[Any], edited) -> List[Any]:
    n = len(sources)
    parts: List[Any] = []
    for k, image in enumerate(sources):
        parts += ["Original image:" if n == 1 else f"Original image {k + 1} of {n}:", image]
    return parts + ["Edited image:", edited]


def sc_request(sample, regions, route_name: str, max_tokens: int = 1024, temperature: float = 0.0,
               crop_padding: float = 0.15, min_crop_side: int = 64, quote_user_text: bool = True,
               annotate_sources: bool = True) -> ChatRequest:
    """The SC request of one route (module docstring)."""
    instruction = user_text(sample.instruction, quote_user_text)
    if route_name == "human":
        parts = _full_images(sample.sources, sample.edited)
        parts += _crop_parts(sample, regions, crop_padding, min_crop_side, annotate_sources)
        text = fill(SC_HUMAN_PROMPT, instruction=instruction)
    else:
        sources = [draw_regions(s, regions) for s in sample.sources] if annotate_sources else list(sample.sources)
        parts = _full_images(sources, draw_regions(sample.edited, regions))
        text = fill(SC_GENERAL_PROMPT, instruction=instruction)
    return ChatRequest([*parts, text], max_tokens=max_tokens, temperature=temperature, stage=f"annotation-{route_name}")


def pq_request(sample, max_tokens: int = 1024, temperature: float = 0.0) -> ChatRequest:
    return ChatRequest([sample.edited, PQ_PROMPT], max_tokens=max_tokens, temperature=temperature,
                       stage="annotation-pq")


def parse_annotation(text: str, stream: str, num_sources: Optional[int] = None, reject_unclean: bool = True
                     ) -> Tuple[Optional[Tuple[float, float]], str, Outcome]:
    """``(scores, reasoning, outcome)`` of a D.2.2 answer; ``stream`` ``"sc"`` or ``"pq"``; ``reject_unclean``:
    refuse repaired scores (module docstring)."""
    parsed = parse_sc_output(text, num_sources=num_sources) if stream == "sc" else parse_pq_output(text)
    if not parsed.parse_ok:
        return None, "", Outcome.rejected(STAGE, f"{stream}_unparsable", f"issues {parsed.issues}: {text[:200]}")
    unclean = sorted(UNCLEAN_SCORE_ISSUES.intersection(parsed.issues))
    if unclean and reject_unclean:
        return None, "", Outcome.rejected(STAGE, f"{stream}_score_not_clean", f"{unclean}: {text[:200]}")
    if not parsed.reasoning.strip():
        return None, "", Outcome.rejected(STAGE, f"{stream}_no_reasoning", text[:200])
    problem = training_text_problem(parsed.reasoning)
    if problem:
        return None, "", Outcome.rejected(STAGE, f"{stream}_control_token", f"the reasoning {problem}")
    scores = (float(parsed.score_pair[0]), float(parsed.score_pair[1]))
    return scores, valid_text(parsed.reasoning.strip()), Outcome("ok", STAGE)
