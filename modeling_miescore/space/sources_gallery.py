"""The Space's source-images gallery: ``gr.Gallery`` that also takes the shapes API callers naturally send.

Gradio checks a gallery payload against ``GalleryData`` before any handler runs, so a bare list of
``gradio_client.handle_file(...)`` failed with a generic error; anything still unreadable gets a ``gr.Error`` naming
the expected shape. Plain strings are refused: only files uploaded through ``handle_file`` pass Gradio's
upload-folder check.
"""

from __future__ import annotations

from typing import Any, Mapping, Union

import gradio as gr
from gradio.components.gallery import GalleryImage, GalleryVideo
from gradio.data_classes import GradioRootModel
from pydantic import ValidationError

EXPECTED_SHAPE = (
    "send the source images as a list of files: sources=[handle_file('a.png'), handle_file('b.png')] "
    "(gradio_client.handle_file), or in the Gallery's own form [{'image': handle_file('a.png'), 'caption': None}, "
    "...]"
)


def _is_file(value: Any) -> bool:
    """A FileData-like dict (what ``handle_file`` becomes once the client has uploaded it)."""
    return isinstance(value, Mapping) and ("path" in value or "url" in value)


def _gallery_entry(item: Any, index: int) -> Any:
    """One payload entry -> ``{"image": file, "caption": ...}``; gallery entries pass unchanged."""
    if isinstance(item, Mapping) and ("image" in item or "video" in item):
        return item
    if _is_file(item):
        return {"image": item, "caption": None}
    if isinstance(item, (list, tuple)) and len(item) == 2 and _is_file(item[0]):
        return {"image": item[0], "caption": item[1]}
    if isinstance(item, str):
        raise gr.Error(f"Source image {index + 1} is a string, not an uploaded file: {EXPECTED_SHAPE}. Paths on "
                       "the server are not read.", print_exception=False)
    raise gr.Error(f"Source image {index + 1} has an unexpected form ({type(item).__name__}): {EXPECTED_SHAPE}.",
                   print_exception=False)


def gallery_payload(value: Any) -> Any:
    """A sources payload in any accepted shape -> Gradio's gallery form (a list of ``{"image", "caption"}``)."""
    if value is None:
        return None
    if _is_file(value) or (isinstance(value, Mapping) and ("image" in value or "video" in value)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise gr.Error(f"The sources are a {type(value).__name__}: {EXPECTED_SHAPE}.", print_exception=False)
    return [_gallery_entry(item, i) for i, item in enumerate(value)]


class SourcesGalleryData(GradioRootModel):
    """``GalleryData`` that first brings the accepted shapes to the gallery form (:func:`gallery_payload`)."""

    root: list[Union[GalleryImage, GalleryVideo]]

    @classmethod
    def model_validate(cls, obj: Any, *args, **kwargs):
        try:
            return super().model_validate(gallery_payload(obj), *args, **kwargs)
        except ValidationError:
            raise gr.Error(f"The source images could not be read: {EXPECTED_SHAPE}.", print_exception=False) from None


def sources_gallery(**kwargs) -> gr.Gallery:
    """``gr.Gallery(**kwargs)`` whose payload check is :class:`SourcesGalleryData`. The data model is set on the
    instance: a ``gr.Gallery`` subclass would make Gradio's metaclass write a ``.pyi`` stub next to this module."""
    gallery = gr.Gallery(**kwargs)
    gallery.data_model = SourcesGalleryData  # read by Gradio as ``block.data_model`` before any handler runs
    return gallery


__all__ = ["EXPECTED_SHAPE", "SourcesGalleryData", "gallery_payload", "sources_gallery"]
