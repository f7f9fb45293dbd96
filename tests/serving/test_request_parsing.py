"""Request validation without HTTP: the pydantic request models and the decoding that follows them, each
problem answered as a RequestError with the status, kind and field the client needs."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.serving.request_parsing import RequestError, parse_form, parse_json_body
from modeling_miescore.serving.settings import ServerSettings


def _png(seed: int, size=(12, 10)) -> bytes:
    array = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _sample(seed: int, instruction: str = "edit") -> dict:
    return {"sources": [_b64(_png(100 + seed))], "edited": _b64(_png(seed)), "instruction": instruction}


def _error(body, endpoint="score", **settings) -> RequestError:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(RequestError) as info:
        parse_json_body(data, endpoint, ServerSettings(**settings))
    return info.value


def test_a_valid_sample_is_decoded_with_its_instruction_stripped():
    payload = _sample(1, "  make it blue  ")
    payload["sources"] = "data:image/png;base64," + payload["sources"][0]  # one source, as a data URL
    payload["edited"] = "\n".join(payload["edited"][i:i + 60] for i in range(0, len(payload["edited"]), 60))
    [parsed] = parse_json_body(json.dumps(payload).encode(), "score", ServerSettings())
    assert parsed.sample.instruction == "make it blue"
    assert np.array_equal(np.asarray(parsed.sample.edited), np.asarray(Image.open(io.BytesIO(_png(1))).convert("RGB")))
    assert len(parsed.sample.sources) == 1 and parsed.sample.sources[0].size == (12, 10)


@pytest.mark.parametrize("body, endpoint, status, kind, field", [
    (b"\xff\xfe not utf-8", "score", 422, "malformed_json", "body"),
    ({**_sample(1), "instruction": 5}, "score", 422, "invalid_request", "instruction"),
    ({**_sample(1), "edited": "data:image/png,abc"}, "score", 422, "bad_base64", "edited"),
    ({**_sample(1), "edited": "  "}, "score", 422, "bad_base64", "edited"),
    ({**_sample(1), "sources": {"a": 1}}, "score", 422, "invalid_request", "sources"),
    ({"groups": [{**_sample(1), "edited": []}]}, "score_groups", 422, "invalid_request", "groups[0].edited"),
    ({"groups": [{"sources": [], "instruction": "x", "edited": ["x"]}]}, "score_groups", 422, "invalid_request",
     "groups[0].sources"),
    ({"samples": [_sample(1), {**_sample(2), "group": 1.5}]}, "score_groups", 422, "invalid_request",
     "samples[1].group"),
    ({"samples": [_sample(1), {**_sample(2), "instruction": "y" * 50}]}, "score_groups", 413, "too_large",
     "samples[1].instruction"),
    ({"groups": "all of them"}, "score_groups", 422, "invalid_request", "groups"),
    ({}, "score_groups", 422, "invalid_request", "groups"),
    ({"samples": [_sample(i) for i in range(4)]}, "score_groups", 413, "too_large", "samples"),
])
def test_problems_name_status_kind_and_field(body, endpoint, status, kind, field):
    error = _error(body, endpoint, max_instruction_chars=40, max_samples_per_request=3)
    assert (error.status, error.kind, error.field) == (status, kind, field)
    assert error.message


def test_the_image_limit_counts_a_groups_shared_sources_once():
    group = {"sources": [_b64(_png(1)), _b64(_png(2))], "instruction": "x",
             "edited": [_b64(_png(3 + i)) for i in range(3)]}
    assert len(parse_json_body(json.dumps({"groups": [group]}).encode(), "score_groups",
                               ServerSettings(max_images_per_request=5))) == 3
    error = _error({"groups": [group], "samples": [_sample(9)]}, "score_groups", max_images_per_request=6)
    assert (error.status, error.kind, error.field) == (413, "too_large", "body")


def test_group_labels_and_indices():
    group = {**_sample(1), "edited": [_b64(_png(5)), _b64(_png(6))], "id": "prompt-7"}
    unlabelled = {**_sample(2), "edited": [_b64(_png(7))]}
    samples = [{**_sample(3), "group": "a"}, _sample(4), {**_sample(5), "group": "a"}]
    parsed = parse_json_body(json.dumps({"groups": [group, unlabelled], "samples": samples}).encode(),
                             "score_groups", ServerSettings())
    assert [(p.group, p.index) for p in parsed] == [("prompt-7", 0), ("prompt-7", 1), (1, 0), ("a", 0), (None, 0),
                                                    ("a", 1)]
    assert parsed[0].prefix_key == parsed[1].prefix_key != parsed[2].prefix_key


def test_a_multipart_form_goes_through_the_same_model():
    [source, edited] = [_png(1), _png(2)]
    parsed = parse_form({"sources": [source], "edited": edited, "instruction": " swap "}, ServerSettings())
    assert parsed.sample.instruction == "swap" and parsed.sample.edited.size == (12, 10)
    with pytest.raises(RequestError) as info:
        parse_form({"sources": [source], "edited": b"", "instruction": "swap"}, ServerSettings())
    assert (info.value.status, info.value.kind, info.value.field) == (422, "corrupt_image", "edited")
    with pytest.raises(RequestError) as info:
        parse_form({"sources": [source] * 3, "edited": edited, "instruction": "swap"},
                   ServerSettings(max_sources_per_sample=2))
    assert (info.value.status, info.value.kind, info.value.field) == (413, "too_large", "sources")


@pytest.mark.parametrize("edited, got", [("<one base64 string>", "a string"), ({"a": 1}, "dict"), (7, "int")])
def test_a_groups_edited_that_is_not_a_list_names_the_field_and_the_shape(edited, got):
    error = _error({"groups": [{**_sample(1), "edited": edited}]}, "score_groups")
    assert (error.status, error.kind, error.field) == (422, "invalid_request", "groups[0].edited")
    assert "must be a list of base64-encoded images, one per candidate edit" in error.message
    assert got in error.message


def _big_png(side: int) -> str:
    buffer = io.BytesIO()
    Image.new("1", (side, side)).save(buffer, format="PNG")
    return _b64(buffer.getvalue())


def test_pixel_budgets_are_checked_before_decoding_and_name_the_image():
    mpx = _big_png(1000)
    group = {"sources": [mpx, mpx], "instruction": "x", "edited": [mpx, mpx, mpx]}  # shared sources: 5 Mpx
    body = {"groups": [group], "samples": [{"sources": [mpx], "edited": mpx, "instruction": "y"}]}
    error = _error(body, "score_groups", max_request_pixels=5_500_000)
    assert (error.status, error.kind, error.field) == (413, "too_large", "samples[0].sources[0]")
    error = _error({"sources": [mpx, mpx, mpx], "edited": mpx, "instruction": "z"}, "score",
                   max_sample_pixels=3_500_000)
    assert (error.status, error.kind, error.field) == (413, "too_large", "edited")
    parsed = parse_json_body(json.dumps(body).encode(), "score_groups", ServerSettings(max_request_pixels=7_000_000))
    assert len(parsed) == 4 and parsed[0].sample.sources[0] is parsed[2].sample.sources[0]  # decoded once


def test_large_images_are_decoded_towards_the_models_pixel_budget():
    body = {"sources": [_big_png(2100)], "edited": _big_png(700), "instruction": "x"}
    [parsed] = parse_json_body(json.dumps(body).encode(), "score", ServerSettings(), target_pixels=1_048_576)
    assert parsed.sample.sources[0].size == (1050, 1050) and parsed.sample.edited.size == (700, 700)
    [full] = parse_json_body(json.dumps(body).encode(), "score", ServerSettings())
    assert full.sample.sources[0].size == (2100, 2100)


def test_a_strip_the_model_cannot_take_is_refused_naming_the_image():
    strip = io.BytesIO()
    Image.new("RGB", (1, 10000), (10, 20, 30)).save(strip, format="PNG")
    body = {"groups": [{"sources": [_b64(_png(1))], "instruction": "x", "edited": [_b64(_png(2)),
                                                                                   _b64(strip.getvalue())]}]}
    error = _error(body, "score_groups")
    assert (error.status, error.kind, error.field) == (422, "invalid_request", "groups[0].edited[1]")
    assert "1x10000" in error.message and "200:1" in error.message


def test_samples_carry_the_field_that_holds_them():
    group = {**_sample(1), "edited": [_b64(_png(5)), _b64(_png(6))]}
    parsed = parse_json_body(json.dumps({"groups": [group], "samples": [_sample(3)]}).encode(), "score_groups",
                             ServerSettings())
    assert [p.field for p in parsed] == ["groups[0].edited[0]", "groups[0].edited[1]", "samples[0]"]
    assert parse_json_body(json.dumps(_sample(1)).encode(), "score", ServerSettings())[0].field is None


def test_the_instruction_limit_is_the_models_and_cannot_be_raised():
    from modeling_miescore.hub.processing_miescore import MAX_INSTRUCTION_CHARS

    assert ServerSettings().max_instruction_chars == MAX_INSTRUCTION_CHARS
    with pytest.raises(ValueError, match="model's limit"):
        ServerSettings(max_instruction_chars=MAX_INSTRUCTION_CHARS + 1)
    at_limit = parse_json_body(json.dumps(_sample(1, "x" * MAX_INSTRUCTION_CHARS)).encode(), "score", ServerSettings())
    assert len(at_limit[0].sample.instruction) == MAX_INSTRUCTION_CHARS
    error = _error(_sample(1, "x" * (MAX_INSTRUCTION_CHARS + 1)), "score")
    assert (error.status, error.kind, error.field) == (413, "too_large", "instruction")
