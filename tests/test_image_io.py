import io

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.image_io import ImageLoadError, load_image


def _rgb(image):
    return np.asarray(load_image(image))


def test_rgba_alpha_composited_over_white():
    image = Image.new("RGBA", (4, 2), (255, 0, 0, 255))
    image.putpixel((1, 0), (0, 0, 255, 0))  # fully transparent -> white
    image.putpixel((2, 0), (0, 0, 0, 128))  # half transparent black -> mid grey
    out = _rgb(image)
    assert out.shape == (2, 4, 3)
    assert tuple(out[0, 0]) == (255, 0, 0)
    assert tuple(out[0, 1]) == (255, 255, 255)
    assert all(abs(int(v) - 127) <= 1 for v in out[0, 2])


def test_la_and_palette_with_transparency():
    la = Image.new("LA", (2, 1), (0, 0))
    assert tuple(_rgb(la)[0, 0]) == (255, 255, 255)
    pal = Image.new("P", (2, 1), 0)
    pal.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    pal.putpixel((1, 0), 1)
    assert tuple(_rgb(pal)[0, 0]) == (10, 20, 30) and tuple(_rgb(pal)[0, 1]) == (200, 100, 50)
    pal.info["transparency"] = 0
    assert tuple(_rgb(pal)[0, 0]) == (255, 255, 255)


def test_cmyk_and_bilevel():
    cmyk = Image.new("CMYK", (1, 1), (0, 255, 255, 0))  # pure red in CMYK
    assert tuple(_rgb(cmyk)[0, 0]) == (255, 0, 0)
    bilevel = Image.new("1", (2, 1), 0)
    bilevel.putpixel((1, 0), 1)
    out = _rgb(bilevel)
    assert tuple(out[0, 0]) == (0, 0, 0) and tuple(out[0, 1]) == (255, 255, 255)


def test_16_bit_is_rescaled_not_clipped(tmp_path):
    array = np.array([[0, 32768, 65535]], dtype=np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(array).save(path)  # stored as a 16-bit PNG
    assert Image.open(path).mode.startswith("I")
    out = _rgb(path)[0, :, 0]
    assert list(out) == [0, 128, 255]


def test_float_mode_and_numpy_inputs():
    assert list(_rgb(Image.fromarray(np.array([[0.0, 1.0]], dtype=np.float32)))[0, :, 0]) == [0, 255]
    assert _rgb(np.zeros((3, 5), dtype=np.uint8)).shape == (3, 5, 3)
    assert tuple(_rgb(np.full((2, 2, 4), 255, dtype=np.uint8) * np.array([1, 0, 0, 0], dtype=np.uint8))[0, 0]) == (255, 255, 255)
    assert list(_rgb(np.array([[0.0, 0.5, 1.0]]))[0, :, 0]) == [0, 128, 255]
    assert list(_rgb(np.array([[0, 65535]], dtype=np.uint16))[0, :, 0]) == [0, 255]
    with pytest.raises(ImageLoadError, match="channels-last"):
        load_image(np.zeros((3, 8, 8), dtype=np.uint8))
    with pytest.raises(ImageLoadError, match=r"\[0, 1\]"):
        load_image(np.full((2, 2), 3.0))


def test_exif_rotated_equals_upright(tmp_path):
    rng = np.random.default_rng(0)
    upright = Image.fromarray(rng.integers(0, 255, (6, 10, 3), dtype=np.uint8))
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # what a camera held sideways writes
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display
    path = tmp_path / "rotated.png"
    stored.save(path, exif=exif)
    assert Image.open(path).size == (6, 10)
    np.testing.assert_array_equal(_rgb(path), np.asarray(upright))


def test_missing_directory_and_non_image(tmp_path):
    with pytest.raises(ImageLoadError, match="does not exist"):
        load_image(tmp_path / "nope.png")
    with pytest.raises(ImageLoadError, match="directory"):
        load_image(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    with pytest.raises(ImageLoadError, match="not an image"):
        load_image(text)
    with pytest.raises(ImageLoadError, match="unsupported image type"):
        load_image(12345)


def test_corrupt_and_truncated(tmp_path):
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buffer, "PNG")
    data = buffer.getvalue()
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageLoadError, match="truncated or corrupt"):
        load_image(truncated)
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(data[:16] + b"\x00" * 200)
    with pytest.raises(ImageLoadError):
        load_image(corrupt)


def test_decompression_bomb_refused_before_decoding(tmp_path):
    bomb = tmp_path / "bomb.png"
    Image.new("1", (11_000, 11_000)).save(bomb)  # 121 Mpx that compresses to a few kB
    assert bomb.stat().st_size < 200_000
    with pytest.raises(ImageLoadError, match="safety limit"):
        load_image(bomb)
    with pytest.raises(ImageLoadError, match="raise max_image_pixels"):
        load_image(np.zeros((100, 100), dtype=np.uint8), max_image_pixels=1000)
