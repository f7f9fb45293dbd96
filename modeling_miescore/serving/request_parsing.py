"""Score requests -> decoded samples at bounded cost, and the one error type the server answers with.

An image's header is read, and its limits and the request's pixel budgets checked, before anything is decoded.
Every problem is a :class:`RequestError` naming the field: 413 ``too_large`` for a limit, 415 for a media type,
422 for malformed content.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import io
import warnings
from concurrent.futures import Executor
from typing import Annotated, Any, Iterable

from PIL import Image, UnidentifiedImageError
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainValidator, ValidationError,
                      ValidationInfo)
from pydantic_core import PydanticCustomError

from ..hub.image_io import ALLOWED_IMAGE_FORMATS, MAX_ASPECT_RATIO, ImageLoadError, decode_image
from ..hub.processing_miescore import EditSample, control_token_problem
from .settings import ServerSettings

STATUS_CLIENT_CLOSED = 499  # nginx's "client closed request": recorded, never sent (nobody is listening)


class RequestError(Exception):
    """An error answered to the client as ``{"error": {"field", "message", "kind"}}`` with ``status``; ``kind`` is
    one of :data:`~modeling_miescore.serving.monitoring.FAILURE_KINDS`, ``field`` the offending part or None."""

    def __init__(self, status: int, kind: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field
        self.headers = headers or {}

    def payload(self) -> dict:
        return {"error": {"field": self.field, "message": self.message, "kind": self.kind}}


_OPEN_ERRORS = (OSError, ValueError, SyntaxError, EOFError)  # what Pillow's decoders raise on bad data


class UploadedImage:
    """One uploaded image file whose header has been read; :meth:`decode` decodes it (once).

    Raises :class:`RequestError` naming ``field``: 422 ``corrupt_image`` for unreadable data, 413
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
        size; :func:`~modeling_miescore.hub.image_io.decode_image`). Decoded once; the file bytes are released
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


_JSON_CONTENT_TYPES = ("", "application/json", "text/plain", "application/x-www-form-urlencoded")


@dataclasses.dataclass
class ParsedSample:
    """One decoded sample plus what the response needs: its group label, index inside the group, the content
    key of its shared prefix (sources + instruction) so batches keep one group's samples adjacent, and the
    request field that holds it (``"samples[2]"``, ``"groups[0].edited[1]"``; None for ``/v1/score``)."""

    sample: EditSample
    prefix_key: str
    group: Any = None
    index: int = 0
    field: str | None = None



def _settings(info: ValidationInfo) -> ServerSettings:
    return info.context["settings"]


def _image_bytes(value: Any) -> bytes:
    """An image field: raw bytes (a multipart upload) or base64 text (JSON), plain or as a data URL."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str):
        raise PydanticCustomError("invalid_request", "expected a base64-encoded image string, got {kind}",
                                  {"kind": type(value).__name__})
    text = value.strip()
    if text.startswith("data:"):  # data URL: "data:image/png;base64,...."
        head, sep, text = text.partition(",")
        if not sep or ";base64" not in head:
            raise PydanticCustomError("bad_base64", "data URL is not base64-encoded (expected 'data:<mime>;base64,')")
    text = "".join(text.split())  # line-wrapped base64 (MIME, the base64 tool) is still base64
    if not text:
        raise PydanticCustomError("bad_base64", "empty image string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise PydanticCustomError("bad_base64", "invalid base64 ({reason}); send standard base64 of the image "
                                  "file bytes", {"reason": str(err)}) from None


def _instruction(value: str, info: ValidationInfo) -> str:
    limit = _settings(info).max_instruction_chars
    if len(value) > limit:
        raise PydanticCustomError("too_large", "instruction has {n} characters, above the limit of {limit}",
                                  {"n": len(value), "limit": limit})
    if not value.strip():
        raise PydanticCustomError("invalid_request", "instruction is empty; send the editing instruction text")
    problem = control_token_problem(value, "the request")
    if problem:  # refused here, before the batch: the same rule as every other entry point
        raise PydanticCustomError("invalid_request", "{problem}", {"problem": problem})
    return value.strip()


def _source_list(value: Any, info: ValidationInfo) -> Any:
    """One image or a list of them; the count is checked before any image is decoded."""
    if isinstance(value, (str, bytes)):
        value = [value]  # a single source image
    if isinstance(value, list):
        limit = _settings(info).max_sources_per_sample
        if not value:
            raise PydanticCustomError("invalid_request", "no source images; send at least one")
        if len(value) > limit:
            raise PydanticCustomError("too_large", "{n} source images, above the limit of {limit} per sample",
                                      {"n": len(value), "limit": limit})
    return value


def _edited_list(value: Any) -> Any:
    """A group's ``edited``: a non-empty list of images, one per candidate edit."""
    if not isinstance(value, list):
        raise PydanticCustomError("invalid_request", "a group's edited must be a list of base64-encoded images, one "
                                  "per candidate edit (e.g. [\"<b64>\", \"<b64>\"]), got {kind}",
                                  {"kind": "a string" if isinstance(value, str) else type(value).__name__})
    if not value:
        raise PydanticCustomError("invalid_request", "edited must be a non-empty list of base64 images")
    return value


def _group_label(value: Any) -> Any:
    if value is not None and not isinstance(value, (str, int)):
        raise PydanticCustomError("invalid_request", "group must be a string or an integer")
    return value


ImageData = Annotated[bytes, PlainValidator(_image_bytes)]
Instruction = Annotated[str, AfterValidator(_instruction)]
SourceImages = Annotated[list[ImageData], BeforeValidator(_source_list)]



class ScoreBody(BaseModel):
    """``POST /v1/score``: one edit. Fields are validated in this order; unknown fields are ignored."""

    instruction: Instruction
    sources: SourceImages
    edited: ImageData


class GroupedSample(ScoreBody):
    """A sample of ``/v1/score_groups``; ``group`` labels it in the response (its index counts per label)."""

    group: Annotated[Any, PlainValidator(_group_label)] = None


class EditGroup(BaseModel):
    """Candidates that share sources and instruction (e.g. the G edits of one RL prompt)."""

    instruction: Instruction
    sources: SourceImages
    edited: Annotated[list[ImageData], BeforeValidator(_edited_list)]
    id: Any = None  # echoed as each result's "group"; the group's position when absent


class ScoreGroupsBody(BaseModel):
    """``POST /v1/score_groups``: groups first, then loose samples; results come back in that order."""

    model_config = ConfigDict(extra="forbid")

    groups: list[EditGroup] = []
    samples: list[GroupedSample] = []



def _field_name(loc: tuple) -> str:
    """pydantic's ``("groups", 0, "edited", 1)`` -> ``"groups[0].edited[1]"``; ``()`` -> ``"body"``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def _as_request_error(error: ValidationError) -> RequestError:
    """The first validation problem as the server's error (pydantic lists them in field order)."""
    first = error.errors(include_url=False)[0]
    kind, loc, field = first["type"], first["loc"], _field_name(first["loc"])
    if kind == "json_invalid":
        return RequestError(422, "malformed_json", f"body is not valid JSON ({first['msg']})", "body")
    if kind == "missing":
        return RequestError(422, "invalid_request", f"missing field '{loc[-1]}'", field)
    if kind == "extra_forbidden":
        return RequestError(422, "invalid_request", f"unknown field '{loc[-1]}'; use 'groups' and/or 'samples'",
                            field)
    if kind == "model_type":
        return RequestError(422, "invalid_request", f"expected a JSON object ({first['msg']})", field)
    if kind == "too_large":
        return RequestError(413, "too_large", first["msg"], field)
    return RequestError(422, kind if kind == "bad_base64" else "invalid_request", first["msg"], field)


def _validate(model: type[BaseModel], data, settings: ServerSettings, *, json_text: bool):
    context = {"settings": settings}
    try:
        if json_text:
            return model.model_validate_json(data, context=context)
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise _as_request_error(err) from None



@dataclasses.dataclass
class _UndecodedSample:
    """A validated sample whose images' headers were read; a group's samples share one ``sources`` list."""

    sources: list[UploadedImage]
    edited: UploadedImage
    instruction: str
    prefix_key: str
    field: str | None
    group: Any = None
    index: int = 0

    def decoded(self, target_pixels: int | None) -> ParsedSample:
        sources = [image.decode(target_pixels) for image in self.sources]  # shared sources: decoded once
        sample = EditSample(sources=sources, edited=self.edited.decode(target_pixels), instruction=self.instruction)
        return ParsedSample(sample, self.prefix_key, self.group, self.index, self.field)


def _prefix_key(source_blobs: list[bytes], instruction: str) -> str:
    digest = hashlib.sha1(instruction.encode("utf-8"))
    for blob in source_blobs:
        digest.update(hashlib.sha1(blob).digest())
    return digest.hexdigest()


def _check_image_count(count: int, settings: ServerSettings) -> None:
    if count > settings.max_images_per_request:
        raise RequestError(413, "too_large", f"{count} images in one request, above the limit of "
                           f"{settings.max_images_per_request}; split it into several requests", "body")


def _opened_sources(sources: list[bytes], field: str, settings: ServerSettings) -> list[UploadedImage]:
    return [UploadedImage(blob, f"{field}[{i}]", settings.max_image_pixels) for i, blob in enumerate(sources)]


def _undecoded_sample(body: ScoreBody, settings: ServerSettings, prefix: str = "",
                      field: str | None = None) -> _UndecodedSample:
    sources = _opened_sources(body.sources, f"{prefix}sources", settings)
    edited = UploadedImage(body.edited, f"{prefix}edited", settings.max_image_pixels)
    return _UndecodedSample(sources, edited, body.instruction, _prefix_key(body.sources, body.instruction), field)


def _check_sample_count(body: ScoreGroupsBody, settings: ServerSettings) -> None:
    count = len(body.samples) + sum(len(group.edited) for group in body.groups)
    if count == 0:
        raise RequestError(422, "invalid_request", "no samples; send 'groups' with edited images or 'samples'",
                           "groups")
    if count > settings.max_samples_per_request:
        raise RequestError(413, "too_large", f"{count} samples in one request, above the limit of "
                           f"{settings.max_samples_per_request}; split it", "groups" if body.groups else "samples")
    _check_image_count(sum(len(g.sources) + len(g.edited) for g in body.groups)
                       + sum(len(s.sources) + 1 for s in body.samples), settings)


def _undecoded_groups(body: ScoreGroupsBody, settings: ServerSettings) -> list[_UndecodedSample]:
    """Groups first (each group's sources opened once), then the samples, with their labels and indices."""
    _check_sample_count(body, settings)
    pending: list[_UndecodedSample] = []
    for g, group in enumerate(body.groups):
        field = f"groups[{g}]"
        sources = _opened_sources(group.sources, f"{field}.sources", settings)
        key = _prefix_key(group.sources, group.instruction)
        label = group.id if "id" in group.model_fields_set else g
        for e, blob in enumerate(group.edited):
            edited = UploadedImage(blob, f"{field}.edited[{e}]", settings.max_image_pixels)
            pending.append(_UndecodedSample(sources, edited, group.instruction, key, f"{field}.edited[{e}]",
                                            label, e))
    seen: dict[Any, int] = {}
    for s, sample in enumerate(body.samples):
        one = _undecoded_sample(sample, settings, prefix=f"samples[{s}].", field=f"samples[{s}]")
        one.group = sample.group
        label = ("g", sample.group) if sample.group is not None else ("s", s)
        one.index = seen.get(label, 0)
        seen[label] = one.index + 1
        pending.append(one)
    return pending


def _decoded(pending: list[_UndecodedSample], settings: ServerSettings,
             target_pixels: int | None) -> list[ParsedSample]:
    """The samples decoded, once the request's pixel budgets allow it (checked from the headers alone)."""
    check_pixel_budgets(([*one.sources, one.edited] for one in pending), settings)
    return [one.decoded(target_pixels) for one in pending]



def parse_json_body(body: bytes, endpoint: str, settings: ServerSettings,
                    target_pixels: int | None = None) -> list[ParsedSample]:
    """A JSON body of ``/v1/score`` (``endpoint="score"``) or ``/v1/score_groups`` -> decoded samples, large
    images reduced towards ``target_pixels`` (the model's ``max_pixels``; None: full size).
    CPU work (JSON, base64, image decoding): run it in a worker thread."""
    if endpoint == "score":
        validated = _validate(ScoreBody, body, settings, json_text=True)
        _check_image_count(len(validated.sources) + 1, settings)
        return _decoded([_undecoded_sample(validated, settings)], settings, target_pixels)
    return _decoded(_undecoded_groups(_validate(ScoreGroupsBody, body, settings, json_text=True), settings),
                    settings, target_pixels)


def parse_form(form: dict, settings: ServerSettings, target_pixels: int | None = None) -> ParsedSample:
    """A multipart upload (``{"sources": [bytes], "edited": bytes, "instruction": str}``) -> one decoded sample."""
    validated = _validate(ScoreBody, form, settings, json_text=False)
    _check_image_count(len(validated.sources) + 1, settings)
    return _decoded([_undecoded_sample(validated, settings)], settings, target_pixels)[0]


async def parse_score_request(request, body: bytes, endpoint: str, settings: ServerSettings,
                              target_pixels: int | None = None, executor: Executor | None = None) -> list[ParsedSample]:
    """The samples of a request whose ``body`` was read already: JSON, or multipart for ``/v1/score``.
    Validation and decoding run on ``executor`` (the server's decode threads), never on the event loop."""
    loop = asyncio.get_running_loop()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        if endpoint != "score":
            raise RequestError(415, "unsupported_media_type", "score_groups takes JSON only", "Content-Type")
        form = await _read_multipart(request, body, settings)
        return [await loop.run_in_executor(executor, parse_form, form, settings, target_pixels)]
    if content_type not in _JSON_CONTENT_TYPES:
        raise RequestError(415, "unsupported_media_type", f"Content-Type '{content_type}' is not accepted; send "
                           "application/json (or multipart/form-data to /v1/score)", "Content-Type")
    return await loop.run_in_executor(executor, parse_json_body, body, endpoint, settings, target_pixels)


async def _read_multipart(request, body: bytes, settings: ServerSettings) -> dict:
    """The form fields ``sources`` (files, repeated), ``edited`` (one file) and ``instruction`` (text)."""
    from starlette import formparsers
    from starlette.formparsers import MultiPartException, MultiPartParser

    if formparsers.multipart is None:  # python-multipart is not installed on the server
        raise RequestError(415, "unsupported_media_type", "multipart uploads need the python-multipart package "
                           "on the server; send JSON with base64 images instead", "Content-Type")

    async def stream():
        yield body
        yield b""

    limit = settings.max_images_per_request
    parser = MultiPartParser(request.headers, stream(), max_files=limit + 1, max_fields=limit + 8,
                             max_part_size=settings.max_instruction_chars * 4 + 1024)
    try:
        form = await parser.parse()
    except MultiPartException as err:
        raise RequestError(422, "invalid_request", f"malformed multipart body ({err.message})", "body") from None
    try:
        payload: dict[str, Any] = {}
        for name, value in form.multi_items():
            if name == "sources":
                payload.setdefault("sources", []).append(await _uploaded_file(value, "sources"))
            elif name == "edited":
                if "edited" in payload:
                    raise RequestError(422, "invalid_request", "send exactly one 'edited' file", "edited")
                payload["edited"] = await _uploaded_file(value, "edited")
            elif name == "instruction":
                payload["instruction"] = value if isinstance(value, str) else (await value.read()).decode(
                    "utf-8", errors="replace")
            else:
                raise RequestError(422, "invalid_request", f"unknown form field '{name}'; use sources, edited, "
                                   "instruction", name)
        return payload
    finally:
        await form.close()


async def _uploaded_file(value, field: str) -> bytes:
    if not hasattr(value, "read"):
        raise RequestError(422, "invalid_request", f"'{field}' must be an uploaded file, not a text field", field)
    return await value.read()


__all__ = ["ParsedSample", "RequestError", "STATUS_CLIENT_CLOSED", "ScoreBody", "ScoreGroupsBody", "UploadedImage",
           "check_pixel_budgets", "parse_form", "parse_json_body", "parse_score_request"]
