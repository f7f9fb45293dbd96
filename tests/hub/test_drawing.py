"""Box overlay: pixel boxes from 0-1000 coordinates, one colour per region id, readable labels."""

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.hub.spatialreward_drawing import PALETTE, bbox_to_pixels, draw_regions, region_color
from modeling_miescore.hub.spatialreward_judgement import SpatialRewardResult

GREY = (128, 128, 128)


def test_bbox_to_pixels_scales_clamps_and_orders():
    assert bbox_to_pixels([0, 0, 1000, 1000], 640, 480) == [0, 0, 640, 480]
    assert bbox_to_pixels([250, 500, 750, 1000], 200, 100) == [50, 50, 150, 100]
    assert bbox_to_pixels([900, 800, 100, -50], 100, 100) == [10, 0, 90, 80]  # swapped and clamped
    assert bbox_to_pixels([0, 0, 2000, 1200], 50, 40) == [0, 0, 50, 40]
    with pytest.raises(ValueError, match="4 coordinates"):
        bbox_to_pixels([1, 2, 3], 10, 10)


def test_outline_pixels_have_the_region_colour_and_the_inside_is_untouched():
    image = Image.new("RGB", (400, 300), GREY)
    regions = [{"id": 0, "label": "cat", "bbox_2d": [100, 200, 500, 900]},
               {"id": 3, "label": "hat", "bbox_2d": [600, 100, 900, 400]}]
    drawn = np.asarray(draw_regions(image, regions, width=3, show_labels=False, show_ids=False))
    assert np.asarray(image).tolist() == np.full((300, 400, 3), 128).tolist()  # the input is not modified
    for region in regions:
        x1, y1, x2, y2 = bbox_to_pixels(region["bbox_2d"], 400, 300)
        color = list(region_color(region["id"]))
        mid_x, mid_y = (x1 + x2) // 2, (y1 + y2) // 2
        assert drawn[y1, mid_x].tolist() == color  # top edge
        assert drawn[y2 - 1, mid_x].tolist() == color  # bottom edge (x2/y2 exclusive)
        assert drawn[mid_y, x1].tolist() == color  # left edge
        assert drawn[mid_y, x2 - 1].tolist() == color  # right edge
        assert drawn[mid_y, mid_x].tolist() == list(GREY)  # inside untouched
        assert drawn[mid_y, x1 - 2].tolist() == list(GREY)  # just outside untouched
    assert region_color(0) != region_color(3)
    assert len(set(PALETTE)) == 16


def test_labels_are_drawn_on_the_region_colour_with_contrasting_text():
    image = Image.new("RGB", (320, 320), GREY)
    region = {"id": 1, "label": "a red hat", "bbox_2d": [250, 500, 750, 900]}
    drawn = np.asarray(draw_regions(image, [region], font_size=16))
    x1, y1, x2, y2 = bbox_to_pixels(region["bbox_2d"], 320, 320)
    label_band = drawn[max(0, y1 - 26):y1, x1:x2]  # the label sits above the box
    colors = {tuple(int(v) for v in p) for p in label_band.reshape(-1, 3)}
    assert region_color(1) in colors  # label background
    r, g, b = region_color(1)
    text_color = (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 140 else (255, 255, 255)
    assert any(sum(abs(a - b) for a, b in zip(c, text_color)) < 60 for c in colors)  # glyph pixels
    bare = np.asarray(draw_regions(image, [region], show_labels=False, show_ids=False))
    assert (bare[max(0, y1 - 26):y1, x1:x2] == 128).all()


def test_label_of_a_box_at_the_top_stays_inside_the_image():
    image = Image.new("RGB", (200, 120), GREY)
    drawn = draw_regions(image, [{"id": 2, "label": "sky", "bbox_2d": [0, 0, 1000, 300]}])
    assert drawn.size == image.size
    assert tuple(np.asarray(drawn)[5, 5]) != GREY


def test_accepts_results_and_rejects_bad_regions():
    image = Image.new("L", (100, 100), 128)  # any mode is converted
    result = SpatialRewardResult(reward=0.5, failed=False,
                                 regions=[{"id": 0, "label": "x", "bbox_2d": [0, 0, 500, 500],
                                           "bbox_pixels": [0, 0, 50, 50]}])
    drawn = draw_regions(image, result)
    assert drawn.mode == "RGB" and tuple(np.asarray(drawn)[25, 0]) == region_color(0)
    assert np.asarray(draw_regions(image.convert("RGB"), [])).tolist() == np.asarray(image.convert("RGB")).tolist()
    with pytest.raises(ValueError, match="bbox_2d"):
        draw_regions(image, [{"id": 0, "label": "no box"}])
    with pytest.raises(TypeError):
        draw_regions(np.zeros((4, 4, 3)), [])
