"""The Space's inputs: Gradio values (gallery entries, uploads, inline data URLs) -> checked RGB images + text,
and the example edits as PNG files (Gradio examples need files).

Errors are :class:`SpaceInputError` / ``image_io.ImageLoadError`` with a message for an end user: images are
named by their role ("Source image 2"), never by the temporary upload path.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..data.example_edits import example_edits
from ..hub.errors import MIEScoreInputError
from ..hub.image_io import ImageLoadError, decode_image, decoded_pixels, describe_image, open_image, open_image_bytes
from ..hub.processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS, MAX_INSTRUCTION_CHARS
from ..utils.atomic_files import atomic_write

MAX_SOURCES = 6
# The Space refuses images above 40 Mpx before decoding: 40x the paper's 1,048,576-pixel budget per image
# (the processor downsizes anything larger anyway), and small enough that six of them fit in memory.
SPACE_MAX_IMAGE_PIXELS = 40_000_000


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
    """An inline ``data:`` URL -> a lazily decoded image, identified among ``image_io``'s allowed formats only."""
    try:
        raw = base64.b64decode(url.split(",", 1)[1], validate=False)
        return open_image_bytes(raw, "inline image data")
    except (IndexError, binascii.Error, ImageLoadError):
        raise ImageLoadError("inline image data is not a readable image; upload a PNG, JPEG or WebP file") from None


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
    if instruction is not None and not isinstance(instruction, str):
        raise SpaceInputError(f"The instruction must be text, got {type(instruction).__name__}.")
    if not instruction or not instruction.strip():
        raise SpaceInputError("The instruction is empty: type the editing instruction that produced the edited image.")
    text = instruction.strip()
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise SpaceInputError(f"The instruction has {len(text):,} characters; the model takes at most "
                              f"{MAX_INSTRUCTION_CHARS:,}. Shorten it.")
    return text


def load_edit_inputs(
    sources: Any,
    edited: Any,
    instruction: Any,
    *,
    max_sources: int = MAX_SOURCES,
    max_image_pixels: int = SPACE_MAX_IMAGE_PIXELS,
    max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS,
) -> tuple[list, Any, str]:
    """Check and load the Space's inputs.

    Returns ``(source_images, edited_image, instruction)`` with RGB PIL images at full size (regions are drawn
    on the edited one). Every header is checked (format, size, aspect ratio, the pixels of all images together
    against ``max_sample_pixels``) before any image is decoded. Raises :class:`SpaceInputError` (or
    :class:`ImageLoadError` with the image named by its role) with a message fit for an end user.
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
    roles = [*(f"Source image {i + 1}" for i in range(len(images))), "The edited image"]
    opened = [_as_role(role, max_image_pixels, open_image, image, max_image_pixels=max_image_pixels)
              for role, image in zip(roles, [*images, edited])]
    total = sum(decoded_pixels(image) for image in opened)
    if total > max_sample_pixels:
        raise SpaceInputError(f"The {len(opened)} images add up to {total / 1e6:.0f} Mpx; this Space decodes at most "
                              f"{max_sample_pixels / 1e6:.0f} Mpx per edit. Downscale them.")
    loaded = [_as_role(role, max_image_pixels, decode_image, image, role) for role, image in zip(roles, opened)]
    return loaded[:-1], loaded[-1], text


def _as_role(role: str, space_limit: int, step, image: Any, *args, **kwargs):
    """``step(image, ...)`` with an :class:`ImageLoadError` naming the image by its role ("Source image 2"):
    uploads live under random temporary names."""
    try:
        return step(image, *args, **kwargs)
    except ImageLoadError as err:
        message = str(err)
        named = describe_image(image)
        if message.startswith(named):
            message = role + message[len(named):]
        elif not message.startswith(role):
            message = f"{role}: {message}"
        # Space users cannot raise the limit; tell them what the Space accepts instead.
        message = message.replace("downscale it or raise max_image_pixels",
                                  f"downscale it (this Space accepts up to {space_limit:,} pixels per image)")
        raise ImageLoadError(message) from None


@dataclass
class ExampleRow:
    """One example edit as files: its id, source PNG paths, edited PNG path, instruction and a one-line note."""

    id: str
    sources: list[str]
    edited: str
    instruction: str
    note: str


def write_example_files(folder: str | os.PathLike, max_side: int = 384) -> list[ExampleRow]:
    """Write the bundled example edits (real photos, :func:`modeling_miescore.data.example_edits.example_edits`) as PNG.

    Files already written by an earlier start are reused; each file is written atomically
    (``utils.atomic_files``), so two processes starting together never see a half-written PNG.
    """
    folder = Path(folder) / f"max{max_side}"  # a different size never reuses stale files
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for edit in example_edits(max_side):
        base = folder / edit["id"]
        base.mkdir(exist_ok=True)
        sources = [_write_png_once(image, base / f"source_{i + 1}.png") for i, image in enumerate(edit["sources"])]
        edited = _write_png_once(edit["edited"], base / "edited.png")
        rows.append(ExampleRow(edit["id"], sources, edited, edit["instruction"], edit["note"]))
    return rows


def default_cache_dir() -> Path:
    """Where the Space keeps its example PNGs: ``$MIESCORE_SPACE_CACHE`` or ``~/.cache/miescore/space``."""
    env = os.environ.get("MIESCORE_SPACE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "miescore" / "space"


def _write_png_once(image, path: Path) -> str:
    if not path.is_file():
        with atomic_write(path, "wb") as handle:
            image.save(handle, format="PNG")
    return str(path)


__all__ = ["ExampleRow", "MAX_SOURCES", "SPACE_MAX_IMAGE_PIXELS", "SpaceInputError", "check_instruction",
           "default_cache_dir", "gallery_images", "load_edit_inputs", "write_example_files"]
