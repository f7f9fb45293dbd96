"""The Space's inputs: Gradio values (gallery entries, uploads, inline data URLs) -> checked RGB images + text.

Errors are :class:`SpaceInputError` / ``image_io.ImageLoadError`` with a message for an end user: images are
named by their role ("Source image 2"), never by the temporary upload path.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ..image_io import ImageLoadError, MIEScoreInputError, load_image

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


__all__ = ["MAX_SOURCES", "SPACE_MAX_IMAGE_PIXELS", "SpaceInputError", "check_instruction", "gallery_images",
           "load_edit_inputs"]
