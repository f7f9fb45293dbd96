"""The Space's result panels: score bars as HTML, JSON results, SpatialReward's regions and reasoning.

Bars are 0-100 / 0-25 rows with inline styles only, each carrying ``data-key`` and ``data-value``; all text is
HTML-escaped. JSON results are JSON-safe (``utils.numbers.json_safe``). A region's colour is its id's colour in
``spatialreward_drawing.PALETTE`` everywhere (drawn boxes, ``gr.AnnotatedImage`` overlays, ``gr.HighlightedText``
reasoning); grounding tokens and boxes are read with the model's own pattern and conversion.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Iterable, Mapping, Sequence

from ..hub.spatialreward_drawing import PALETTE, bbox_to_pixels, clamp_pixel_box
from ..hub.spatialreward_tokens import GROUNDING_TOKEN_RE
from ..utils.numbers import json_safe

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
    boxes = [(pixel_box(region, width, height), region_category(region, i)) for i, region in enumerate(regions)]
    return [(box, category) for box, category in boxes if box is not None]


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
    parts = GROUNDING_TOKEN_RE.split(reasoning or "")  # text, bbox id, "global", text, ... (None: not that token)
    categories = [None] + [GLOBAL_CATEGORY if is_global else by_id.get(str(int(i)), f"[{int(i)}] (no box)")
                           for i, is_global in zip(parts[1::3], parts[2::3])]
    return [(text, category) for text, category in zip(parts[::3], categories) if text.strip()]


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
    known = region_color_map(regions) | {PQ_CATEGORY: PQ_COLOR}
    colors = {}
    for _, category in pieces:
        if not category or category in colors:
            continue
        if category in known:
            colors[category] = known[category]
        else:
            match = re.match(r"\[(\d+)\]", category)
            colors[category] = region_color(int(match.group(1)) if match else None, len(colors))
    return colors


# Meanings from docs/scoring.md, "What the scores mean" (MIE-Bench dimensions, MIEScore paper sec. 3).
MIESCORE_DIMENSIONS: tuple[tuple[str, str, str], ...] = (
    ("visual_quality", "Visual quality (VQ)",
     "How the edited image looks on its own: realism, artifacts, colour, sharpness and detail."),
    ("instruction_following", "Instruction following (IF)",
     "Whether the requested change was applied completely and precisely, without over- or under-editing."),
    ("attribute_preservation", "Attribute preservation (AP)",
     "Whether what should carry over from each source (identity, structure, texture, style, text, "
     "unedited regions) was kept and fused coherently."),
    ("overall", "Overall",
     "VQ^0.3 · IF^0.4 · AP^0.3 (MIEScore paper eq. 2; instruction following weighs most)."),
)

# SpatialReward sub-scores are 0-25 (paper appendix D.1); SC, PQ and the reward with the paper's weights
# (sec. 3.1 / 5.4: SC = 0.6 s_if + 0.4 s_con, PQ = 0.5 nat + 0.5 art, R = (SC/25)^0.8 (PQ/25)^0.2).
SPATIAL_SCORES: tuple[tuple[str, str, float, str], ...] = (
    ("s_if", "Instruction following", 25.0, "How completely the edit carries out the instruction (0-25)."),
    ("s_con", "Source consistency", 25.0,
     "How well the sources are kept and fused, without over-editing unmentioned content (0-25)."),
    ("s_nat", "Naturalness", 25.0, "Whether the edited image looks natural: distance, shadows, lighting (0-25)."),
    ("s_art", "Artifacts", 25.0, "Absence of distortion, seams, noise or unharmonised subjects; 25 = none (0-25)."),
    ("sc", "Semantic consistency (SC)", 25.0,
     "0.6 · instruction following + 0.4 · source consistency (paper weights)."),
    ("pq", "Perceptual quality (PQ)", 25.0, "0.5 · naturalness + 0.5 · artifacts (paper weights)."),
    ("reward", "Reward", 1.0,
     "(SC/25)^0.8 · (PQ/25)^0.2 (paper default), in [0, 1]; the value an RL loop optimises."),
)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{float(value):.{digits}f}"


def _bar_row(key: str, title: str, value: Any, scale: float, meaning: str, digits: int, emphasis: bool) -> str:
    """One labelled bar, coloured red (low) -> amber -> green (high) so that it reads at a glance."""
    ok = isinstance(value, (int, float)) and math.isfinite(float(value))
    fraction = min(max(float(value) / scale, 0.0), 1.0) if ok else 0.0
    if fraction < 0.5:
        color = f"rgb(220,{int(70 + 2 * fraction * 130)},60)"
    else:
        color = f"rgb({int(220 - (fraction - 0.5) * 2 * 170)},180,60)"
    weight = "700" if emphasis else "600"
    shown = _fmt(value, digits)
    data_value = f"{float(value):.4f}" if ok else ""
    return (
        f'<div class="score-row" data-key="{html.escape(key)}" data-value="{data_value}" '
        'style="margin:0 0 12px 0">'
        '<div style="display:flex;justify-content:space-between;align-items:baseline;gap:8px">'
        f'<span class="score-name" style="font-weight:{weight}">{html.escape(title)}</span>'
        f'<span class="score-value" style="font-weight:{weight};font-variant-numeric:tabular-nums">'
        f'{html.escape(shown)}<span style="opacity:.6;font-weight:400"> / {_fmt(scale, 0 if scale >= 1 else 1)}'
        '</span></span></div>'
        '<div style="height:12px;border-radius:6px;background:rgba(128,128,128,.22);overflow:hidden;margin:3px 0">'
        f'<div class="score-fill" style="height:100%;width:{fraction * 100:.2f}%;background:{color}"></div></div>'
        f'<div class="score-meaning" style="font-size:.85em;opacity:.8">{html.escape(meaning)}</div>'
        '</div>'
    )


def miescore_html(scores: Mapping[str, float], note: str | None = None) -> str:
    """The MIEScore result as labelled 0-100 bars with a one-line meaning each (HTML, inline styles only).

    Every row carries ``data-key`` and ``data-value`` attributes so that scripts and tests can read values.
    """
    rows = [_bar_row(key, title, scores.get(key), 100.0, meaning, 1, key == "overall")
            for key, title, meaning in MIESCORE_DIMENSIONS]
    extra = f'<div style="font-size:.85em;opacity:.75;margin-top:4px">{html.escape(note)}</div>' if note else ""
    return ('<div class="miescore-scores" id="miescore-scores">' + "".join(rows)
            + '<div style="font-size:.8em;opacity:.7">0-100 MOS scale of MIE-Bench; higher is better.</div>'
            + extra + "</div>")


def miescore_json(scores: Mapping[str, float], model: str | None = None) -> dict:
    """Raw MIEScore result for the JSON panel / API: the four scores (full precision) and the scale."""
    out = {key: float(scores[key]) for key, _, _ in MIESCORE_DIMENSIONS if key in scores}
    for key, value in scores.items():  # checkpoints with extra score names keep them
        out.setdefault(key, float(value))
    out["scale"] = [0, 100]
    if model:
        out["model"] = model
    return out


def placeholder_html(message: str) -> str:
    return f'<div class="score-placeholder" style="opacity:.75;padding:8px 0">{html.escape(message)}</div>'


def _flat_issues(issues: Any) -> list[str]:
    """Issue codes as ``["sc:missing_score", ...]`` from a ``{"sc": [...], "pq": [...]}`` dict or a list."""
    if isinstance(issues, Mapping):
        return [f"{stream}:{code}" for stream, codes in issues.items() for code in (codes or [])]
    return [str(code) for code in (issues or [])]


def spatialreward_html(result: Any) -> str:
    """The four 0-25 sub-scores, SC, PQ and the reward as labelled bars (HTML, inline styles only)."""
    rows = [_bar_row(key, title, result_value(result, key), scale, meaning, 3 if scale <= 1 else 1, key == "reward")
            for key, title, scale, meaning in SPATIAL_SCORES]
    warning = ""
    if result_value(result, "failed", False) or not result_value(result, "parse_ok", True):
        reasons = list(result_value(result, "failure_reasons") or []) or _flat_issues(result_value(result, "issues"))
        warning = ('<div class="parse-warning" style="color:#c62828;font-weight:600;margin-bottom:8px">'
                   f"The model's output could not be used ({html.escape(', '.join(reasons) or 'unparseable')}); "
                   "missing scores are shown as n/a and the reward is the configured failure value.</div>")
    return '<div class="spatialreward-scores" id="spatialreward-scores">' + warning + "".join(rows) + "</div>"


def spatialreward_json(result: Any, width: int | None = None, height: int | None = None) -> dict:
    """JSON-safe copy of one SpatialReward result; every region gets ``bbox_pixels`` when the size is known."""
    data = json_safe(result)
    if not isinstance(data, dict):
        data = {"result": data}
    if width and height and isinstance(data.get("regions"), list):
        for region in data["regions"]:
            if isinstance(region, dict) and region.get("bbox_pixels") is None:
                box = pixel_box(region, width, height)
                region["bbox_pixels"] = list(box) if box else None
    return data


__all__ = ["GLOBAL_CATEGORY", "MIESCORE_DIMENSIONS", "PQ_CATEGORY", "REGION_PALETTE", "SPATIAL_SCORES",
           "annotations", "highlight_reasoning", "miescore_html", "miescore_json", "pixel_box", "placeholder_html",
           "reasoning_color_map", "reasoning_pieces", "region_category", "region_color", "region_color_map",
           "result_value", "spatialreward_html", "spatialreward_json"]
