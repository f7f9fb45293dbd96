"""Non-UI logic of the MIEScore Gradio Space (``spaces/miescore/app.py``).

Input checking, lazy thread-safe model holders, result formatting (score bars as HTML, region colours,
highlighted reasoning) and the example files. Nothing here imports gradio, so it is testable without a
server; the Space maps :class:`~modeling_miescore.image_io.MIEScoreInputError` to ``gr.Error``.
"""

from __future__ import annotations

import html
import math
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..drawing import PALETTE
from ..image_io import ImageLoadError, MIEScoreInputError, load_image

MAX_SOURCES = 6
# The Space refuses images above 40 Mpx before decoding: 40x the paper's 1,048,576-pixel budget per image
# (the processor downsizes anything larger anyway), and small enough that six of them fit in memory.
SPACE_MAX_IMAGE_PIXELS = 40_000_000

# Meanings from README.md, "What the scores mean" (MIE-Bench dimensions, MIEScore paper sec. 3).
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

# SpatialReward sub-scores are 0-25 (paper appendix D.1); SC/PQ/reward definitions from DESIGN.md "Models"
# (paper sec. 5.4: SC = 0.6 s_if + 0.4 s_con, PQ = 0.5 nat + 0.5 art, R = (SC/25)^0.8 (PQ/25)^0.2).
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

# Region colours are drawing.PALETTE's (one per region id), so boxes drawn by ``draw_regions`` elsewhere
# (CLI, reports) and the Space's boxes and highlighted reasoning agree.
REGION_PALETTE: tuple[str, ...] = tuple("#%02x%02x%02x" % rgb for rgb in PALETTE)
GLOBAL_CATEGORY = "overall assessment"
GLOBAL_COLOR = "#9e9e9e"
PQ_CATEGORY = "perceptual quality"
PQ_COLOR = "#b0bec5"

_TOKEN_RE = re.compile(r"<\|\s*(?:bbox[\s_]*(\d+)|(global))\s*\|>", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------- inputs


class SpaceInputError(MIEScoreInputError):
    """A Space input is unusable; the message says which one and how to fix it."""


def _file_image(value: Any) -> Any:
    """An image as Gradio hands it over unprocessed -> something :func:`load_image` reads.

    ``FileData``-like dicts give their ``path`` (Gradio has already checked that it is an upload or cache
    file); inline ``data:`` URLs are decoded in memory; paths, PIL images and arrays pass through.
    """
    if isinstance(value, Mapping):
        if value.get("path"):
            return value["path"]
        url = value.get("url") or ""
        if url.startswith("data:"):
            return _decode_data_url(url)
        return None
    return value


def _decode_data_url(url: str):
    import base64
    import binascii
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        raw = base64.b64decode(url.split(",", 1)[1], validate=False)
        image = Image.open(io.BytesIO(raw))
    except (IndexError, binascii.Error, UnidentifiedImageError, OSError):
        raise ImageLoadError("inline image data is not a readable image; upload a PNG, JPEG or WebP file") from None
    return image


def _gallery_item_path(item: Any) -> Any:
    """A gallery entry -> the image it holds: ``(media, caption)`` tuples, ``{"image": FileData, "caption"}``
    dicts (Gradio's unprocessed gallery value) and bare paths / PIL images / arrays are all accepted."""
    if isinstance(item, (tuple, list)) and item:
        item = item[0]
    if isinstance(item, Mapping) and ("image" in item or "video" in item):
        if item.get("image") is None:
            raise SpaceInputError("A source is a video; the sources must be images.")
        item = item["image"]
    return _file_image(item)


def gallery_images(value: Any) -> list:
    """Normalise a ``gr.Gallery`` value (processed or raw) or a plain list of images into a list of images."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike, Mapping)) or hasattr(value, "size"):
        value = [value]
    return [image for image in (_gallery_item_path(item) for item in value) if image is not None]


def check_instruction(instruction: Any) -> str:
    if not isinstance(instruction, str) or not instruction.strip():
        raise SpaceInputError("The instruction is empty: type the editing instruction that produced the edited image.")
    return instruction.strip()


def load_edit_inputs(
    sources: Any,
    edited: Any,
    instruction: Any,
    *,
    max_sources: int = MAX_SOURCES,
    max_image_pixels: int = SPACE_MAX_IMAGE_PIXELS,
) -> tuple[list, Any, str]:
    """Check and load the Space's inputs.

    Returns ``(source_images, edited_image, instruction)`` with RGB PIL images. Raises :class:`SpaceInputError`
    (or :class:`ImageLoadError` with the image named by its role) with a message fit for an end user.
    """
    images = gallery_images(sources)
    if not images:
        raise SpaceInputError("No source images: add 1 to %d source images (the inputs of the edit)." % max_sources)
    if len(images) > max_sources:
        raise SpaceInputError(
            f"Too many source images ({len(images)}): the Space scores edits with 1 to {max_sources} sources; "
            "remove some."
        )
    edited = _file_image(edited)
    if edited is None or (isinstance(edited, str) and not edited.strip()):
        raise SpaceInputError("No edited image: upload the edited result to score.")
    text = check_instruction(instruction)
    loaded = [_load_role(img, f"Source image {i + 1}", max_image_pixels) for i, img in enumerate(images)]
    return loaded, _load_role(edited, "The edited image", max_image_pixels), text


def _load_role(image: Any, role: str, max_image_pixels: int):
    try:
        return load_image(image, max_image_pixels=max_image_pixels)
    except ImageLoadError as err:
        # Uploads live under random temporary names: name the image by its role ("Source image 2") instead.
        message = str(err)
        if isinstance(image, (str, os.PathLike)):
            named = f"image '{os.fspath(image)}'"
        else:
            named = f"{type(image).__name__} image"
        if message.startswith(named):
            message = role + message[len(named):]
        else:
            message = f"{role}: {message}"
        # Space users cannot raise the limit; tell them what the Space accepts instead.
        message = message.replace("downscale it or raise max_image_pixels",
                                  f"downscale it (this Space accepts up to {max_image_pixels:,} pixels per image)")
        raise ImageLoadError(message) from None


# ---------------------------------------------------------------------------------------------- models


class LazyModel:
    """Load a model on first use, once, from several threads safely; remember a failed load's message.

    ``loader(reference)`` returns the model. ``reference`` None means not configured: :meth:`get` then raises
    :class:`SpaceInputError` with ``not_configured`` as the message.
    """

    def __init__(self, reference: str | None, loader: Callable[[str], Any], not_configured: str):
        self.reference = reference or None
        self._loader = loader
        self._not_configured = not_configured
        self._lock = threading.Lock()
        self._model = None

    @property
    def configured(self) -> bool:
        return self.reference is not None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def get(self):
        if self._model is not None:
            return self._model
        if self.reference is None:
            raise SpaceInputError(self._not_configured)
        with self._lock:
            if self._model is None:
                # A load error is not cached: a missing file may appear, or the Hub come back, later.
                self._model = self._loader(self.reference)
        return self._model


# ---------------------------------------------------------------------------------------------- MIEScore output


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{float(value):.{digits}f}"


def _bar_row(key: str, title: str, value: Any, scale: float, meaning: str, color: str, digits: int,
             emphasis: bool = False) -> str:
    ok = isinstance(value, (int, float)) and math.isfinite(float(value))
    fraction = min(max(float(value) / scale, 0.0), 1.0) if ok else 0.0
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


def _score_color(fraction: float) -> str:
    """Red (low) -> amber -> green (high), so a bar's colour reads at a glance."""
    fraction = min(max(fraction, 0.0), 1.0) if math.isfinite(fraction) else 0.0
    if fraction < 0.5:
        r, g = 220, int(70 + 2 * fraction * 130)
    else:
        r, g = int(220 - (fraction - 0.5) * 2 * 170), 180
    return f"rgb({r},{g},60)"


def miescore_html(scores: Mapping[str, float], note: str | None = None) -> str:
    """The MIEScore result as labelled 0-100 bars with a one-line meaning each (HTML, inline styles only).

    Every row carries ``data-key`` and ``data-value`` attributes so that scripts and tests can read values.
    """
    rows = []
    for key, title, meaning in MIESCORE_DIMENSIONS:
        value = scores.get(key)
        fraction = float(value) / 100.0 if isinstance(value, (int, float)) else 0.0
        rows.append(_bar_row(key, title, value, 100.0, meaning, _score_color(fraction), 1, key == "overall"))
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


# ---------------------------------------------------------------------------------------------- SpatialReward output


def _get(result: Any, key: str, default: Any = None) -> Any:
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
    """The region's box in pixels ``(x1, y1, x2, y2)``, clipped to the image.

    Uses the pixel box the model already gave (``bbox_pixels``, as ``SpatialRewardResult`` has), else converts
    ``bbox_2d`` (0-1000 normalised, SpatialReward paper appendix D.1) with the image size.
    """
    box = None
    for key in ("bbox_pixels", "bbox_px", "box_px", "pixel_box"):
        if region.get(key) is not None:
            box = [float(v) for v in region[key]]
            break
    if box is None:
        norm = region.get("bbox_2d") or region.get("box")
        if norm is None or len(norm) != 4:
            return None
        box = [float(norm[0]) * width / 1000.0, float(norm[1]) * height / 1000.0,
               float(norm[2]) * width / 1000.0, float(norm[3]) * height / 1000.0]
    if len(box) != 4 or not all(math.isfinite(v) for v in box):
        return None
    x1, x2 = sorted((box[0], box[2]))
    y1, y2 = sorted((box[1], box[3]))
    x1, x2 = (int(round(min(max(v, 0.0), width))) for v in (x1, x2))
    y1, y2 = (int(round(min(max(v, 0.0), height))) for v in (y1, y2))
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
    for match in _TOKEN_RE.finditer(reasoning or ""):
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
    regions = _get(result, "regions") or []
    pieces = highlight_reasoning(_get(result, "reasoning") or "", regions)
    pq = (_get(result, "pq_reasoning") or "").strip()
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


def _flat_issues(issues: Any) -> list[str]:
    """Issue codes as ``["sc:missing_score", ...]`` from a ``{"sc": [...], "pq": [...]}`` dict or a list."""
    if isinstance(issues, Mapping):
        return [f"{stream}:{code}" for stream, codes in issues.items() for code in (codes or [])]
    return [str(code) for code in (issues or [])]


def spatialreward_html(result: Any) -> str:
    """The four 0-25 sub-scores, SC, PQ and the reward as labelled bars (HTML, inline styles only)."""
    rows = []
    for key, title, scale, meaning in SPATIAL_SCORES:
        value = _get(result, key)
        ok = isinstance(value, (int, float)) and math.isfinite(float(value))
        fraction = float(value) / scale if ok else 0.0
        rows.append(_bar_row(key, title, value, scale, meaning, _score_color(fraction),
                             3 if scale <= 1 else 1, key == "reward"))
    warning = ""
    if _get(result, "failed", False) or not _get(result, "parse_ok", True):
        reasons = list(_get(result, "failure_reasons") or []) or _flat_issues(_get(result, "issues"))
        warning = ('<div class="parse-warning" style="color:#c62828;font-weight:600;margin-bottom:8px">'
                   f"The model's output could not be used ({html.escape(', '.join(reasons) or 'unparseable')}); "
                   "missing scores are shown as n/a and the reward is the configured failure value.</div>")
    return '<div class="spatialreward-scores" id="spatialreward-scores">' + warning + "".join(rows) + "</div>"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if hasattr(value, "item"):
        return _jsonable(value.item())
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return _jsonable(asdict(value))
    return str(value)


def spatialreward_json(result: Any, width: int | None = None, height: int | None = None) -> dict:
    """JSON-safe copy of one SpatialReward result; every region gets ``bbox_pixels`` when the size is known."""
    data = _jsonable(result)
    if not isinstance(data, dict):
        data = {"result": data}
    if width and height and isinstance(data.get("regions"), list):
        for region in data["regions"]:
            if isinstance(region, dict) and region.get("bbox_pixels") is None:
                box = pixel_box(region, width, height)
                region["bbox_pixels"] = list(box) if box else None
    return data


# ---------------------------------------------------------------------------------------------- examples


@dataclass
class ExampleRow:
    id: str
    sources: list[str]
    edited: str
    instruction: str
    note: str


def write_example_files(folder: str | os.PathLike, max_side: int = 384) -> list[ExampleRow]:
    """Write the bundled example edits (real photos, :func:`modeling_miescore.testing.example_edits`) as PNG.

    Files already written by an earlier start are reused; each file is written to a temporary name and
    renamed, so two processes starting together never see a half-written PNG.
    """
    from ..testing import example_edits

    folder = Path(folder) / f"max{max_side}"  # a different size never reuses stale files
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for edit in example_edits(max_side):
        base = folder / edit["id"]
        base.mkdir(exist_ok=True)
        sources = [_write_png(image, base / f"source_{i + 1}.png") for i, image in enumerate(edit["sources"])]
        edited = _write_png(edit["edited"], base / "edited.png")
        rows.append(ExampleRow(edit["id"], sources, edited, edit["instruction"], edit["note"]))
    return rows


def _write_png(image, path: Path) -> str:
    if not path.is_file():
        handle, tmp = tempfile.mkstemp(suffix=".png", dir=path.parent)
        os.close(handle)
        try:
            image.save(tmp, format="PNG")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return str(path)


def default_cache_dir() -> Path:
    """Where the Space keeps its example PNGs: ``$MIESCORE_SPACE_CACHE`` or ``~/.cache/miescore/space``."""
    env = os.environ.get("MIESCORE_SPACE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "miescore" / "space"


__all__ = [
    "GLOBAL_CATEGORY", "MAX_SOURCES", "MIESCORE_DIMENSIONS", "PQ_CATEGORY", "REGION_PALETTE",
    "SPACE_MAX_IMAGE_PIXELS", "SPATIAL_SCORES", "ExampleRow", "LazyModel", "SpaceInputError", "annotations",
    "check_instruction", "default_cache_dir", "gallery_images", "highlight_reasoning", "load_edit_inputs",
    "miescore_html", "miescore_json", "pixel_box", "placeholder_html", "reasoning_color_map",
    "reasoning_pieces", "region_category", "region_color", "region_color_map", "spatialreward_html",
    "spatialreward_json", "write_example_files",
]
