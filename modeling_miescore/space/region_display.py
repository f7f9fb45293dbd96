"""SpatialReward's regions in the Space: colours, legend categories, pixel boxes and the reasoning split by region.

A region's colour is its id's colour in ``spatialreward_drawing.PALETTE`` everywhere: the boxes drawn into the image
(``spatialreward_drawing.draw_regions``), the ``gr.AnnotatedImage`` overlays and the ``gr.HighlightedText`` reasoning.
Grounding tokens are found with ``spatialreward_tokens.GROUNDING_TOKEN_RE`` and boxes converted with
``spatialreward_drawing.bbox_to_pixels``, the same pattern and conversion the model uses.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Sequence

from ..spatialreward_drawing import PALETTE, bbox_to_pixels, clamp_pixel_box
from ..spatialreward_tokens import GROUNDING_TOKEN_RE

# Region colours are spatialreward_drawing.PALETTE's (one per region id), so boxes drawn by ``draw_regions`` elsewhere
# (CLI, reports) and the Space's boxes and highlighted reasoning agree.
REGION_PALETTE: tuple[str, ...] = tuple("#%02x%02x%02x" % rgb for rgb in PALETTE)
GLOBAL_CATEGORY = "overall assessment"
GLOBAL_COLOR = "#9e9e9e"
PQ_CATEGORY = "perceptual quality"
PQ_COLOR = "#b0bec5"



def result_value(result: Any, key: str, default: Any = None) -> Any:
    """``result[key]`` for a dict (e.g. a result read back from JSON), else ``result.key``."""
    if isinstance(result, Mapping):
        return result.get(key, default)
    return getattr(result, key, default)


def region_color(region_id: Any, index: int = 0) -> str:
    """Colour of a region: by its id when it is an int (stable across outputs), else by position."""
    key = region_id if isinstance(region_id, int) and region_id >= 0 else index
    return REGION_PALETTE[key % len(REGION_PALETTE)]


def region_category(region: Mapping[str, Any], index: int = 0) -> str:
    """Legend / highlight category of a region: ``"[id] label"``, unique per region id."""
    region_id = region.get("id", index)
    label = str(region.get("label") or "region").strip() or "region"
    return f"[{region_id}] {label}"


def region_color_map(regions: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{category: colour}`` for the boxes and the highlighted reasoning (the same colours in both)."""
    colors = {region_category(r, i): region_color(r.get("id"), i) for i, r in enumerate(regions)}
    colors[GLOBAL_CATEGORY] = GLOBAL_COLOR
    return colors


def pixel_box(region: Mapping[str, Any], width: int, height: int) -> tuple[int, int, int, int] | None:
    """The region's box in pixels ``(x1, y1, x2, y2)``, clipped to the image; None when unusable or empty.

    Uses the pixel box the model already gave (``bbox_pixels``, as ``SpatialRewardResult`` has), else converts
    ``bbox_2d`` (0-1000 normalised, SpatialReward paper appendix D.1) with ``spatialreward_drawing.bbox_to_pixels``, the
    conversion the model uses, so the Space shows the model's own boxes.
    """
    for key in ("bbox_pixels", "bbox_px", "box_px", "pixel_box"):
        if region.get(key) is not None:
            box, convert = region[key], clamp_pixel_box
            break
    else:
        box, convert = region.get("bbox_2d") or region.get("box"), bbox_to_pixels
    try:
        if box is None or len(box) != 4 or not all(math.isfinite(float(v)) for v in box):
            return None
    except (TypeError, ValueError):
        return None
    x1, y1, x2, y2 = convert(box, width, height)
    if x2 <= x1 or y2 <= y1:
        return None
    return x1, y1, x2, y2


def annotations(regions: Sequence[Mapping[str, Any]], width: int, height: int) -> list[tuple[tuple, str]]:
    """``gr.AnnotatedImage`` annotations: ``[((x1, y1, x2, y2), category), ...]`` in pixels."""
    out = []
    for i, region in enumerate(regions):
        box = pixel_box(region, width, height)
        if box is not None:
            out.append((box, region_category(region, i)))
    return out


def highlight_reasoning(reasoning: str, regions: Sequence[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """Split SC reasoning at its grounding tokens for ``gr.HighlightedText``.

    The text after ``<|bbox_i|>`` (up to the next token) is tagged with region i's category, so it is shown
    in its box's colour; text after ``<|global|>`` is tagged :data:`GLOBAL_CATEGORY`; text before the first
    token is untagged. The tokens themselves are dropped (the category chip replaces them). A token whose
    region is unknown is tagged ``"[i] (no box)"``.
    """
    by_id = {}
    for i, region in enumerate(regions):
        by_id.setdefault(str(region.get("id", i)), region_category(region, i))
    pieces: list[tuple[str, str | None]] = []
    category: str | None = None
    position = 0
    for match in GROUNDING_TOKEN_RE.finditer(reasoning or ""):
        text = reasoning[position:match.start()]
        if text.strip():
            pieces.append((text, category))
        if match.group(2):
            category = GLOBAL_CATEGORY
        else:
            region_id = str(int(match.group(1)))
            category = by_id.get(region_id, f"[{region_id}] (no box)")
        position = match.end()
    tail = (reasoning or "")[position:]
    if tail.strip():
        pieces.append((tail, category))
    return pieces


def reasoning_pieces(result: Any) -> list[tuple[str, str | None]]:
    """All reasoning of a SpatialReward result for ``gr.HighlightedText``: the SC reasoning split by region
    (:func:`highlight_reasoning`), then the PQ reasoning tagged :data:`PQ_CATEGORY`."""
    regions = result_value(result, "regions") or []
    pieces = highlight_reasoning(result_value(result, "reasoning") or "", regions)
    pq = (result_value(result, "pq_reasoning") or "").strip()
    if pq:
        pieces += [("\n\n", None), (pq, PQ_CATEGORY)]
    if not pieces:
        pieces = [("(no reasoning: the model's output could not be parsed; see the raw text in the JSON)", None)]
    return pieces


def reasoning_color_map(pieces: Iterable[tuple[str, str | None]], regions: Sequence[Mapping[str, Any]]) -> dict:
    """Colours of exactly the categories used in ``pieces``: each region's box colour (a region mentioned
    without a box still gets its id's colour), grey for the overall assessment and the PQ reasoning."""
    boxes = region_color_map(regions)
    colors = {}
    for _, category in pieces:
        if not category or category in colors:
            continue
        if category in boxes:
            colors[category] = boxes[category]
        elif category == PQ_CATEGORY:
            colors[category] = PQ_COLOR
        else:
            match = re.match(r"\[(\d+)\]", category)
            colors[category] = region_color(int(match.group(1)) if match else None, len(colors))
    return colors


__all__ = ["GLOBAL_CATEGORY", "PQ_CATEGORY", "REGION_PALETTE", "annotations", "highlight_reasoning", "pixel_box",
           "reasoning_color_map", "reasoning_pieces", "region_category", "region_color", "region_color_map",
           "result_value"]
