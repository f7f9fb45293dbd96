"""Stage I, spatial grounding (paper sec. 3.3 "Step I", prompt D.2.1): the boxes ``B`` of every edit.

The grounder sees the source image(s) and the edited image, labelled as the prompt names them ("Image 1
(original image)", "Image 2 (edited image)"; with several sources, "Image 1 (original image k of N)"), then the
D.2.1 text with ``{instruction}`` and ``{box_num}`` filled. ``{box_num}`` (``box_num_mode="edits"``, the
default) is the record's ``num_regions`` or ``num_edits`` when the data carries it (MER-Bench rows have 2-5
operations, sec. 4.2, and keep their ``num_edits`` from synthesis through the export and the build), so a
multi-edit row is asked for one region per edit; otherwise our default: one region per source image (one for a
single-source edit, one integrated element per source for a fusion, as D.1.2 counts regions).
``box_num_mode="grounder"`` (``--box-num grounder``) lets the grounder decide: ``{box_num}`` is filled with
:data:`GROUNDER_DECIDES` instead of a number.

Its answer is read with :func:`modeling_miescore.hub.spatialreward_parsing.parse_sc_output`. More than 16 regions
are rejected because the model has 16 box tokens. The regions are renumbered 0..n-1 in the grounder's order (it
writes ids as ``"0~n"`` strings, sometimes from 1), so region ``k`` is ``<|bbox_k|>``. An empty list is kept: a
failed edit has no edited region (D.1.1).
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ...judges.call_engine import ChatRequest
from ...hub.spatialreward_parsing import parse_sc_output
from ...hub.spatialreward_tokens import MAX_BBOX_ID
from ...utils.text_hygiene import valid_text
from .prompts import GROUNDING_PROMPT, fill, user_text
from .report import Outcome

__all__ = ["BOX_NUM_MODES", "GROUNDER_DECIDES", "box_num", "grounding_request", "parse_grounding"]

STAGE = "grounding"
# The longest region label kept: D.2.1 asks for an "instance name" (a few words); a label of thousands of
# characters is a broken answer (and would take seconds to draw).
MAX_LABEL_CHARS = 200
# parser issues meaning that no JSON object with an edit_region list was read (spatialreward_parsing.ISSUE_CODES)
_NO_REGION_LIST = frozenset({"empty_output", "no_json_object", "invalid_json", "truncated_json", "internal_error",
                             "missing_regions", "regions_not_list"})


BOX_NUM_MODES = ("edits", "grounder")
GROUNDER_DECIDES = "as many as there are edited instances"  # the {box_num} text of box_num_mode "grounder"


def box_num(record, num_sources: int, mode: str = "edits"):
    """The ``{box_num}`` of a record (module docstring)."""
    if mode == "grounder":
        return GROUNDER_DECIDES
    if mode != "edits":
        raise ValueError(f"box_num mode must be one of {BOX_NUM_MODES}, got {mode!r}")
    return int(record.num_regions) if record.num_regions is not None else max(1, int(num_sources))


def labelled_images(sample) -> List[Any]:
    """``[label, image, ...]`` for the sources and the edited image, as D.2.1 names them."""
    n = len(sample.sources)
    parts: List[Any] = []
    for k, image in enumerate(sample.sources):
        parts += ["Image 1 (original image):" if n == 1 else f"Image 1 (original image {k + 1} of {n}):", image]
    return parts + ["Image 2 (edited image):", sample.edited]


def grounding_request(record, sample, max_tokens: int = 1024, temperature: float = 0.0,
                      quote_user_text: bool = True, box_num_mode: str = "edits") -> ChatRequest:
    # box_num first: a "{box_num}" inside the user's instruction must stay text
    text = fill(fill(GROUNDING_PROMPT, box_num=box_num(record, len(sample.sources), box_num_mode)),
                instruction=user_text(sample.instruction, quote_user_text))
    return ChatRequest([*labelled_images(sample), text], max_tokens=max_tokens, temperature=temperature,
                       stage="grounding")


def parse_grounding(text: str) -> Tuple[List[Dict[str, Any]], Outcome]:
    """``(regions, outcome)``: the renumbered regions and ``ok``, or ``[]`` and the rejection."""
    parsed = parse_sc_output(text)
    issues = set(parsed.issues)
    if issues & _NO_REGION_LIST:
        return [], Outcome.rejected(STAGE, "grounding_unparsable", f"issues {sorted(issues)}: {text[:200]}")
    if "region_invalid" in issues or "duplicate_region_id" in issues:
        return [], Outcome.rejected(STAGE, "grounding_invalid_region", f"issues {sorted(issues)}")
    if "bbox_degenerate" in issues:
        return [], Outcome.rejected(STAGE, "grounding_degenerate_box", f"regions {parsed.regions}")
    if len(parsed.regions) > MAX_BBOX_ID + 1:
        return [], Outcome.rejected(STAGE, "too_many_regions", f"{len(parsed.regions)} regions")
    longest = max((len(region["label"]) for region in parsed.regions), default=0)
    if longest > MAX_LABEL_CHARS:  # D.2.1 asks for an "instance name"; a longer one is not a label
        return [], Outcome.rejected(STAGE, "label_too_long", f"a region label of {longest:,} characters "
                                                             f"(at most {MAX_LABEL_CHARS})")
    regions = [{"id": k, "label": valid_text(str(region["label"])), "bbox_2d": list(region["bbox_2d"])}
               for k, region in enumerate(parsed.regions)]
    return regions, Outcome("ok", STAGE)
