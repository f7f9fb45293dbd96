"""Uploaded image bytes -> upright RGB ``PIL.Image`` for the reward server, at bounded cost.

Three steps, so that no request costs more than its limits:

1. :class:`UploadedImage` reads only the header (``Image.open`` is lazy): format, width, height. The per-image
   pixel limit, zero sizes and the aspect ratio are checked there.
2. :func:`check_pixel_budgets` adds the header pixel counts of a request's samples and refuses the request
   (413, naming the image where a budget runs out) before anything is decoded.
3. :meth:`UploadedImage.decode` decodes with :func:`~modeling_miescore.image_io.decode_image`, the library's
   own decoder: large images reduced towards the model's ``max_pixels`` while decoding (JPEG with DCT scaling,
   ``Image.draft``; other formats with ``Image.reduce``) by an integer factor that keeps at least
   ``target_pixels`` pixels, so the model's own resize still does the final step.

The accepted formats (:data:`~modeling_miescore.image_io.ALLOWED_IMAGE_FORMATS`) and the aspect-ratio limit
are ``image_io``'s, shared with every other entry point.
"""

from __future__ import annotations

import io
import warnings
from typing import Iterable

from PIL import Image, UnidentifiedImageError

from ..image_io import ALLOWED_IMAGE_FORMATS, MAX_ASPECT_RATIO, ImageLoadError, decode_image
from .errors import RequestError
from .settings import ServerSettings

__all__ = ["UploadedImage", "check_pixel_budgets"]

_OPEN_ERRORS = (OSError, ValueError, SyntaxError, EOFError)  # what Pillow's decoders raise on bad data


class UploadedImage:
    """One uploaded image file whose header has been read; :meth:`decode` decodes it (once).

    Raises :class:`~.errors.RequestError` naming ``field``: 422 ``corrupt_image`` for unreadable data, 413
    ``too_large`` above ``max_pixels``, 422 ``invalid_request`` for a zero size or an aspect ratio the model
    cannot take.
    """

    def __init__(self, data: bytes, field: str, max_pixels: int):
        self.field = field
        if not data:
            raise RequestError(422, "corrupt_image", "empty image data", field)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit below decides
                self._image: Image.Image | None = Image.open(io.BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)
        except Image.DecompressionBombError as err:
            raise RequestError(413, "too_large", f"image is too large to decode safely ({err}); downscale it",
                               field) from None
        except UnidentifiedImageError:
            raise RequestError(422, "corrupt_image", "not a readable image (corrupt data or an unsupported format; "
                               f"send one of {', '.join(ALLOWED_IMAGE_FORMATS)})", field) from None
        except _OPEN_ERRORS as err:
            raise RequestError(422, "corrupt_image", f"image data is corrupt ({err})", field) from None
        self.width, self.height = self._image.size
        self._decoded: Image.Image | None = None
        self._check_shape(max_pixels)

    @property
    def pixels(self) -> int:
        return self.width * self.height

    def _check_shape(self, max_pixels: int) -> None:
        width, height = self.width, self.height
        if width * height > max_pixels:
            raise RequestError(413, "too_large", f"image is {width}x{height} = {width * height} pixels, above the "
                               f"server limit of {max_pixels}; downscale it", self.field)
        if width == 0 or height == 0:
            raise RequestError(422, "corrupt_image", f"image has zero size ({width}x{height})", self.field)
        if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
            raise RequestError(422, "invalid_request", f"image is {width}x{height}, an aspect ratio of "
                               f"{max(width, height) / min(width, height):.0f}:1; the model takes at most "
                               f"{MAX_ASPECT_RATIO}:1 (Qwen-VL's smart_resize); crop or pad it", self.field)

    def decode(self, target_pixels: int | None = None) -> Image.Image:
        """The upright RGB image, reduced towards ``target_pixels`` when it is at least 4x larger (None: full
        size; :func:`~modeling_miescore.image_io.decode_image`). Decoded once; the file bytes are released
        afterwards."""
        if self._decoded is None:
            try:
                self._decoded = decode_image(self._image, "image", target_pixels)
            except ImageLoadError as err:
                raise RequestError(422, "corrupt_image", f"image data is corrupt or truncated ({err})",
                                   self.field) from None
            finally:
                self._image = None
        return self._decoded


def check_pixel_budgets(samples: Iterable[list[UploadedImage]], settings: ServerSettings) -> None:
    """413 unless each sample's images (sources + edited) and the request's distinct images stay within
    ``max_sample_pixels`` and ``max_request_pixels``, counted from the headers; the error names the image where
    a budget runs out."""
    counted: set[int] = set()
    request_total = 0
    for images in samples:
        sample_total = 0
        for image in images:
            sample_total += image.pixels
            if sample_total > settings.max_sample_pixels:
                raise RequestError(413, "too_large", f"this sample's images add up to {sample_total} pixels with "
                                   f"this one, above the per-sample budget of {settings.max_sample_pixels}; "
                                   "downscale them (the model resizes every image to its own pixel budget anyway)",
                                   image.field)
            if id(image) not in counted:  # a group's shared sources count once
                counted.add(id(image))
                request_total += image.pixels
                if request_total > settings.max_request_pixels:
                    raise RequestError(413, "too_large", f"this request's images add up to {request_total} pixels "
                                       f"with this one, above the per-request budget of "
                                       f"{settings.max_request_pixels}; split the request or downscale the images",
                                       image.field)
