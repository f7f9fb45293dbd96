"""Box geometry and overlays for SpatialReward's edit regions.

Hub file: copied flat into checkpoints (the model converts boxes to pixels with :func:`bbox_to_pixels`, the
one box-to-pixel conversion of the package); it imports only the standard library, Pillow and
``spatialreward_tokens``.

Boxes come out of the model as ``bbox_2d = [x1, y1, x2, y2]`` normalised to [0, 1000] with 0 = left/top and
1000 = right/bottom (appendix D.1.1), relative to the edited image. Pixel boxes are ``[x1, y1, x2, y2]`` in
the edited image's own pixel grid, x2/y2 exclusive (so ``[0, 0, 1000, 1000]`` is ``[0, 0, W, H]``).
"""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from PIL import Image, ImageDraw, ImageFont

from .spatialreward_tokens import BBOX_SCALE

# 16 colours (one per <|bbox_i|> id, sec. 3.2), ordered so that neighbouring ids contrast strongly; based on
# Kelly's maximum-contrast set without white/black/greys, which vanish on photos.
PALETTE: Tuple[Tuple[int, int, int], ...] = (
    (230, 25, 75), (60, 180, 75), (0, 130, 200), (255, 225, 25), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (220, 190, 255),
    (170, 110, 40), (128, 0, 0), (0, 0, 128), (128, 128, 0),
)

# The longest label drawn (longer ones are cut, with an ellipsis): a tag above a box, not a paragraph.
MAX_DRAWN_LABEL = 80


def region_color(region_id: int) -> Tuple[int, int, int]:
    """The colour of a region id (ids above 15 wrap around)."""
    return PALETTE[int(region_id) % len(PALETTE)]


def bbox_to_pixels(bbox_2d: Sequence[float], width: int, height: int) -> List[int]:
    """``[x1, y1, x2, y2]`` in 0..1000 -> integer pixel box in a ``width`` x ``height`` image.

    Coordinates are clamped to the image and ordered (x1 <= x2, y1 <= y2); x2/y2 are exclusive edges.
    """
    if len(bbox_2d) != 4:
        raise ValueError(f"a box needs 4 coordinates [x1, y1, x2, y2], got {list(bbox_2d)!r}")
    sizes = (width, height, width, height)
    return clamp_pixel_box([float(v) / BBOX_SCALE * size for v, size in zip(bbox_2d, sizes)], width, height)


def clamp_pixel_box(box: Sequence[float], width: int, height: int) -> List[int]:
    """A pixel box ``[x1, y1, x2, y2]`` (floats allowed) ordered, rounded to integers and clamped to the image."""
    x1, y1, x2, y2 = (float(v) for v in box)
    x1, x2 = sorted((x1, x2))
    y1, y2 = sorted((y1, y2))

    def clamp(value: float, size: int) -> int:
        return int(min(max(round(value), 0), size))

    return [clamp(x1, width), clamp(y1, height), clamp(x2, width), clamp(y2, height)]


def _regions(regions: Any) -> List[Mapping[str, Any]]:
    if regions is None:
        return []
    if hasattr(regions, "regions"):  # a SpatialRewardResult
        regions = regions.regions
    out = []
    for index, region in enumerate(regions):
        if not isinstance(region, Mapping) or "bbox_2d" not in region:
            raise ValueError(f"region {index} must be a dict with a 'bbox_2d' list, got {region!r}")
        out.append(region)
    return out


def _text_color(fill: Tuple[int, int, int]) -> Tuple[int, int, int]:
    luminance = 0.299 * fill[0] + 0.587 * fill[1] + 0.114 * fill[2]
    return (0, 0, 0) if luminance > 140 else (255, 255, 255)


def draw_regions(
    image: Image.Image,
    regions: Iterable[Mapping[str, Any]] | Any,
    width: Optional[int] = None,
    font_size: Optional[int] = None,
    show_labels: bool = True,
    show_ids: bool = True,
) -> Image.Image:
    """Overlay the edit regions on (a copy of) the edited image.

    Args:
        image: the edited image (``PIL.Image``; any mode, converted to RGB).
        regions: ``[{"id", "label", "bbox_2d": [x1, y1, x2, y2] in 0..1000}, ...]`` or a result with a
            ``.regions`` attribute (``SpatialRewardResult``).
        width: outline width in pixels (default: ~0.5 % of the shorter side, at least 2).
        font_size: label size in pixels (default: ~3.5 % of the shorter side, at least 11).
        show_labels / show_ids: label text is ``"<id>: <label>"``; either part can be turned off.
    Returns:
        a new RGB image; each region's outline and label background use :func:`region_color` of its id.
    """
    if not isinstance(image, Image.Image):
        raise TypeError(f"draw_regions needs a PIL image, got {type(image).__name__}")
    canvas = image.convert("RGB") if image.mode != "RGB" else image.copy()
    W, H = canvas.size
    short = min(W, H)
    line = int(width) if width else max(2, round(short * 0.005))
    size = int(font_size) if font_size else max(11, round(short * 0.035))
    font = ImageFont.load_default(size=size)
    draw = ImageDraw.Draw(canvas)
    items = _regions(regions)
    for index, region in enumerate(items):
        rid = region.get("id", index)
        rid = int(rid) if isinstance(rid, (int, float)) else index
        color = region_color(rid)
        x1, y1, x2, y2 = bbox_to_pixels(region["bbox_2d"], W, H)
        # x2/y2 are exclusive; Pillow's rectangle includes its end point.
        draw.rectangle((x1, y1, max(x1, x2 - 1), max(y1, y2 - 1)), outline=color, width=line)
        if not (show_labels or show_ids):
            continue
        parts = []
        if show_ids:
            parts.append(str(rid))
        label = str(region.get("label") or "")
        if len(label) > MAX_DRAWN_LABEL:  # a model's runaway label: drawing 200K characters takes tens of seconds
            label = label[:MAX_DRAWN_LABEL - 1] + "\u2026"
        if show_labels and label:
            parts.append(label)
        text = ": ".join(parts)
        if not text:
            continue
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        tw, th = right - left, bottom - top
        pad = max(2, size // 6)
        # Label above the box when there is room, else just inside its top edge; kept inside the image.
        ty = y1 - th - 2 * pad if y1 - th - 2 * pad >= 0 else y1 + line
        tx = min(max(0, x1), max(0, W - tw - 2 * pad))
        draw.rectangle((tx, ty, tx + tw + 2 * pad, ty + th + 2 * pad), fill=color)
        draw.text((tx + pad - left, ty + pad - top), text, fill=_text_color(color), font=font)
    return canvas


__all__ = ["MAX_DRAWN_LABEL", "PALETTE", "bbox_to_pixels", "clamp_pixel_box", "draw_regions", "region_color"]
