"""The reward server's image decoding: header checks before decoding (pixels, aspect ratio), pixel budgets per
sample and per request, and large images decoded reduced towards the model's ``max_pixels`` (JPEG DCT scaling,
``Image.reduce`` otherwise) while small ones decode exactly as ``load_image`` does."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.hub.image_io import load_image, reduction_factor, to_rgb
from modeling_miescore.serving.request_parsing import RequestError, UploadedImage, check_pixel_budgets
from modeling_miescore.serving.settings import ServerSettings

MPX = 1_048_576


def _file(image: Image.Image, fmt: str = "PNG", **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def _gradient(width: int, height: int, mode: str = "RGB") -> Image.Image:
    """A smooth, non-symmetric picture (compresses well, and a wrong flip or channel order shows)."""
    x = np.linspace(0, 255, width)[None, :]
    y = np.linspace(0, 255, height)[:, None]
    rgb = np.stack([np.broadcast_to(x, (height, width)), np.broadcast_to(y, (height, width)),
                    (x + y) / 2 * np.ones((height, width))], axis=-1).astype(np.uint8)
    image = Image.fromarray(rgb)
    if mode == "RGBA":
        alpha = Image.fromarray((np.broadcast_to(x, (height, width))).astype(np.uint8))
        image.putalpha(alpha)
    return image


def _pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.int16)


def test_reduction_factor_keeps_at_least_the_target():
    assert reduction_factor(6200, 6200, MPX) == 6
    assert reduction_factor(2047, 2047, MPX) == 1  # below 4x the target: decoded as it is
    assert reduction_factor(2048, 2048, MPX) == 2
    assert reduction_factor(4000, 3000, None) == 1
    for width, height in [(6200, 6200), (5000, 300), (9999, 4001), (2048, 2048)]:
        f = reduction_factor(width, height, MPX)
        assert -(-width // f) * -(-height // f) >= MPX


@pytest.mark.parametrize("image, fmt", [
    (_gradient(40, 30, "RGBA"), "PNG"),
    (_gradient(40, 30).convert("P"), "PNG"),
    (Image.fromarray(np.arange(1200, dtype=np.uint16).reshape(30, 40) * 50), "PNG"),  # 16-bit grey
    (_gradient(40, 30), "JPEG"),
    (_gradient(40, 30).convert("1"), "BMP"),
])
def test_small_images_decode_exactly_like_load_image(image, fmt):
    data = _file(image, fmt)
    decoded = UploadedImage(data, "edited", 10_000).decode(MPX)
    expected = load_image(Image.open(io.BytesIO(data)))
    assert decoded.mode == "RGB" and decoded.size == expected.size
    assert np.array_equal(_pixels(decoded), _pixels(expected))


def test_a_large_png_is_reduced_by_an_integer_factor_like_a_box_filter():
    original = _gradient(2600, 1700)
    decoded = UploadedImage(_file(original), "sources[0]", 40_000_000).decode(MPX)
    assert decoded.size == (1300, 850)  # factor 2: 2600 x 1700 = 4.4 Mpx -> 1.1 Mpx, not below 1 Mpx
    assert np.abs(_pixels(decoded) - _pixels(original.reduce(2))).max() == 0
    assert UploadedImage(_file(original), "x", 40_000_000).decode(None).size == (2600, 1700)  # no target: full


def test_transparent_and_one_bit_images_reduce_as_their_rgb_would():
    rgba = _gradient(2400, 1800, "RGBA")
    decoded = UploadedImage(_file(rgba), "edited", 40_000_000).decode(MPX)
    reference = to_rgb(rgba).reduce(2)  # alpha over white first, then averaged
    assert decoded.size == reference.size
    assert np.abs(_pixels(decoded) - _pixels(reference)).max() <= 2  # premultiplied averaging, then rounding
    checker = Image.fromarray((np.indices((2400, 1800)).sum(axis=0) % 2 * 255).astype(np.uint8).T).convert("1")
    grey = UploadedImage(_file(checker), "edited", 40_000_000).decode(MPX)
    assert grey.size == (1200, 900) and abs(_pixels(grey).mean() - 127.5) < 1  # 2x2 boxes of black and white


def test_a_large_jpeg_is_decoded_at_a_reduced_scale():
    original = _gradient(4000, 3000)
    data = _file(original, "JPEG", quality=95)
    decoded = UploadedImage(data, "edited", 40_000_000).decode(MPX)
    assert decoded.size == (2000, 1500)  # DCT scaling 1/2 (1/4 would fall below 1 Mpx)
    full = load_image(Image.open(io.BytesIO(data))).reduce(2)
    assert np.abs(_pixels(decoded) - _pixels(full)).mean() < 2


def test_exif_orientation_is_applied_to_reduced_images():
    original = _gradient(2600, 1700)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: display needs a 90-degree clockwise turn
    data = _file(original, "JPEG", quality=95, exif=exif)
    decoded = UploadedImage(data, "edited", 40_000_000).decode(MPX)
    expected = load_image(Image.open(io.BytesIO(data))).reduce(2)
    assert decoded.size == expected.size == (850, 1300)
    assert np.abs(_pixels(decoded) - _pixels(expected)).mean() < 2


@pytest.mark.parametrize("size", [(1, 10000), (2010, 10)])  # 10000:1 and 201:1
def test_aspect_ratios_the_model_cannot_take_are_refused_from_the_header(size):
    with pytest.raises(RequestError) as info:
        UploadedImage(_file(Image.new("L", size)), "sources[1]", 40_000_000)
    error = info.value
    assert (error.status, error.kind, error.field) == (422, "invalid_request", "sources[1]")
    assert "200:1" in error.message
    UploadedImage(_file(Image.new("L", (2000, 10))), "sources[1]", 40_000_000).decode(MPX)  # 200:1 is fine


def test_the_per_image_limit_is_read_from_the_header():
    with pytest.raises(RequestError) as info:
        UploadedImage(_file(Image.new("1", (3000, 3000))), "edited", 5_000_000)
    assert (info.value.status, info.value.kind, info.value.field) == (413, "too_large", "edited")


def test_pixel_budgets_name_the_image_where_they_run_out_and_count_shared_sources_once():
    image = _file(Image.new("1", (1000, 1000)))  # 1 Mpx each
    settings = ServerSettings(max_sample_pixels=3_500_000, max_request_pixels=5_500_000)

    def opened(field):
        return UploadedImage(image, field, 40_000_000)

    shared = [opened("groups[0].sources[0]"), opened("groups[0].sources[1]")]
    group = [[*shared, opened(f"groups[0].edited[{e}]")] for e in range(3)]  # 2 shared + 3 edited = 5 Mpx
    check_pixel_budgets(group, settings)
    with pytest.raises(RequestError) as info:
        check_pixel_budgets([*group, [opened("samples[0].sources[0]"), opened("samples[0].edited")]], settings)
    assert (info.value.status, info.value.field) == (413, "samples[0].sources[0]")  # the 6th distinct Mpx
    assert "per-request budget of 5500000" in info.value.message
    with pytest.raises(RequestError) as info:
        check_pixel_budgets([[opened(f"sources[{i}]") for i in range(3)] + [opened("edited")]], settings)
    assert (info.value.status, info.value.field) == (413, "edited")  # 4 Mpx in one sample
    assert "per-sample budget of 3500000" in info.value.message
