import io
import os

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.hub.image_io import ImageLoadError, load_image


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


# ---------------------------------------------------------------------------------------------- issue 13 guards


def test_only_the_allowed_formats_are_opened_and_eps_never_reaches_ghostscript(tmp_path, monkeypatch):
    from modeling_miescore.hub.image_io import ALLOWED_IMAGE_FORMATS, open_image_bytes
    from corpus.bad_inputs import install_fake_ghostscript

    assert ALLOWED_IMAGE_FORMATS == ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF")
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after the fake gs is put in front
    ran = install_fake_ghostscript(tmp_path)
    eps = tmp_path / "drawing.eps"
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n%%EOF\n")
    assert Image.open(eps).format == "EPS"  # Pillow alone would take it (and run gs to render it)
    with pytest.raises(ImageLoadError, match="format outside PNG, JPEG"):
        load_image(eps)
    with pytest.raises(ImageLoadError, match="format outside"):
        open_image_bytes(eps.read_bytes())
    tga = tmp_path / "image.tga"
    Image.new("RGB", (4, 4)).save(tga)
    with pytest.raises(ImageLoadError, match="format outside"):
        load_image(tga)
    assert not ran.exists()


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    import threading

    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    errors = []
    worker = threading.Thread(target=lambda: errors.append(pytest.raises(ImageLoadError, load_image, fifo)))
    worker.start()
    worker.join(10)
    if worker.is_alive():  # let the blocked open return before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join()
        pytest.fail("load_image blocked on a FIFO")
    assert "is not a regular file" in str(errors[0].value)


def test_symlink_loops_empty_files_and_closed_images_are_named(tmp_path):
    loop = tmp_path / "loop.png"
    os.symlink(tmp_path / "other.png", loop)
    os.symlink(loop, tmp_path / "other.png")
    with pytest.raises(ImageLoadError, match="symbolic link loop"):
        load_image(loop)
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageLoadError, match=r"empty \(zero bytes\)"):
        load_image(empty)
    closed = Image.new("RGB", (4, 4))
    closed.close()
    with pytest.raises(ImageLoadError, match="PIL image is closed"):
        load_image(closed)
    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    with Image.open(tmp_path / "ok.png") as never_decoded:
        pass
    with pytest.raises(ImageLoadError, match="PIL image is closed"):
        load_image(never_decoded)


def test_aspect_ratio_above_200_is_refused_naming_the_image(tmp_path):
    from modeling_miescore.hub.image_io import MAX_ASPECT_RATIO, check_aspect_ratio

    assert MAX_ASPECT_RATIO == 200  # transformers' smart_resize limit
    strip = tmp_path / "strip.png"
    Image.new("1", (1, 10_000)).save(strip)
    with pytest.raises(ImageLoadError, match=r"strip.png' is 1x10000, an aspect ratio of 10000:1, above the 200:1"):
        load_image(strip)
    with pytest.raises(ImageLoadError, match="ndarray image is 201x1"):
        load_image(np.zeros((1, 201), dtype=np.uint8))
    assert load_image(np.zeros((1, 200), dtype=np.uint8)).size == (200, 1)
    check_aspect_ratio(200, 1, "x")
    with pytest.raises(ImageLoadError, match="request field is 1x300"):
        check_aspect_ratio(1, 300, "request field")


def _noise(width, height):
    return Image.fromarray(np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8))


def test_images_far_above_the_target_are_reduced_while_decoding(tmp_path):
    from modeling_miescore.hub.image_io import decoded_pixels, open_image

    _noise(4000, 3000).save(tmp_path / "big.jpg", quality=80)
    _noise(4000, 3000).save(tmp_path / "big.png")
    _noise(3000, 1000).save(tmp_path / "medium.png")
    target = 1_000_000
    header = open_image(tmp_path / "big.jpg")
    assert decoded_pixels(header, target) == 2000 * 1500  # libjpeg decodes at 1/2 scale
    assert load_image(tmp_path / "big.jpg", target_pixels=target).size == (2000, 1500)
    assert decoded_pixels(open_image(tmp_path / "big.png"), target) == 4000 * 3000  # PNG: full, then reduced
    assert load_image(tmp_path / "big.png", target_pixels=target).size == (1334, 1000)  # 1/3: not below target
    assert load_image(tmp_path / "medium.png", target_pixels=target).size == (3000, 1000)  # < 4x: untouched
    assert load_image(tmp_path / "big.png").size == (4000, 3000)  # no target: full size
    bits = tmp_path / "bits.png"
    Image.new("1", (6200, 6200), 1).save(bits)
    reduced = load_image(bits, target_pixels=131_072)
    assert reduced.size == (365, 365) and reduced.mode == "RGB" and reduced.getpixel((3, 3)) == (255, 255, 255)


def test_reduction_keeps_the_exif_orientation(tmp_path):
    upright = _noise(3000, 2000)
    exif = Image.Exif()
    exif[0x0112] = 6
    upright.transpose(Image.Transpose.ROTATE_90).save(tmp_path / "rotated.jpg", exif=exif, quality=95)
    upright.save(tmp_path / "upright.jpg", quality=95)
    rotated = load_image(tmp_path / "rotated.jpg", target_pixels=500_000)
    straight = load_image(tmp_path / "upright.jpg", target_pixels=500_000)
    assert rotated.size == straight.size == (1500, 1000)
    difference = np.abs(np.asarray(rotated, dtype=float) - np.asarray(straight, dtype=float)).mean()
    assert difference < 8, difference  # same picture, different JPEG blocks
