"""Score requests -> decoded samples: the JSON bodies of ``/v1/score`` and ``/v1/score_groups`` validated by
pydantic models, multipart uploads to ``/v1/score``, base64 and image decoding, and this server's limits.

Every problem becomes a :class:`~.errors.RequestError` naming the field (``"sources[1]"``,
``"groups[0].edited[2]"``, ``"body"``): 413 ``too_large`` for a limit, 415 for a media type, 422 for
malformed content (``malformed_json``, ``bad_base64``, ``corrupt_image``, ``invalid_request``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
from concurrent.futures import Executor
from typing import Annotated, Any

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainValidator, ValidationError,
                      ValidationInfo)
from pydantic_core import PydanticCustomError

from ..processing_miescore import EditSample, control_token_problem
from .errors import RequestError
from .image_decoding import UploadedImage, check_pixel_budgets
from .settings import ServerSettings

__all__ = ["ParsedSample", "ScoreBody", "ScoreGroupsBody", "parse_json_body", "parse_form", "parse_score_request"]

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


# ---------------------------------------------------------------------------------------------- field types


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


# ---------------------------------------------------------------------------------------------- request models


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


# ---------------------------------------------------------------------------------------------- validation errors


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


# ---------------------------------------------------------------------------------------------- images


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


# ---------------------------------------------------------------------------------------------- the request body


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
