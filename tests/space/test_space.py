"""The MIEScore Space (spaces/miescore/app.py) through gradio_client, and its modules (modeling_miescore.space).

The Space runs in this process on 127.0.0.1 with the tiny checkpoints; the server is closed at the end of
the module. The slow test starts app.py as its own process, configured from the environment.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from PIL import Image

gradio_client = pytest.importorskip("gradio_client")
gr = pytest.importorskip("gradio")

from browser.space_harness import (  # noqa: E402  (tests/ is on sys.path)
    APP_PATH,
    GROUNDED_REGIONS,
    GROUNDED_SCORES,
    free_port,
    ground_spatialreward,
    launch,
    load_app_module,
    tiny_spatialreward,
)

from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.hub.image_io import ImageLoadError  # noqa: E402
from modeling_miescore.space import inputs, rendering  # noqa: E402
from modeling_miescore.space.models import LazyModel  # noqa: E402

MAX_PIXELS = 1_000_000  # the test Space's image limit, so that "oversized" needs only a 1600x1000 file


@pytest.fixture(scope="session")
def tiny_spatialreward_path(tmp_path_factory):
    return tiny_spatialreward(tmp_path_factory)


@pytest.fixture(scope="module")
def space(tiny_miescore_path, tiny_spatialreward_path, tmp_path_factory):
    demo, url = launch(tiny_miescore_path, tiny_spatialreward_path, tmp_path_factory.mktemp("space-examples"),
                       max_image_pixels=MAX_PIXELS)
    client = gradio_client.Client(url, verbose=False)
    yield demo, client
    client.close() if hasattr(client, "close") else None
    demo.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory, examples):
    """The first bundled example as PNG files, plus a corrupt file and an oversized image."""
    folder = tmp_path_factory.mktemp("space-inputs")
    edit = examples[0]
    sources = []
    for i, image in enumerate(edit["sources"]):
        sources.append(str(folder / f"source_{i + 1}.png"))
        image.save(sources[-1])
    edited = str(folder / "edited.png")
    edit["edited"].save(edited)
    corrupt = folder / "corrupt.png"
    corrupt.write_bytes(b"definitely not image data\n" * 4)
    truncated = folder / "truncated.png"
    whole = open(edited, "rb").read()
    truncated.write_bytes(whole[: len(whole) // 2])
    big = str(folder / "big.png")
    Image.new("RGB", (1600, 1000), (90, 120, 150)).save(big)
    return {"sources": sources, "edited": edited, "instruction": edit["instruction"], "corrupt": str(corrupt),
            "truncated": str(truncated), "big": big}


def gallery(paths):
    from gradio_client import handle_file

    return [{"image": handle_file(p), "caption": None} for p in paths]


def call(client, api_name, sources, edited, instruction):
    from gradio_client import handle_file

    return client.predict(gallery(sources), handle_file(edited) if edited else None, instruction, api_name=api_name)


# ---------------------------------------------------------------------------------------------- endpoints


def test_named_endpoints_only_score_and_spatial_reward(space):
    _, client = space
    info = client.view_api(return_format="dict", print_info=False)
    assert set(info["named_endpoints"]) == {"/score", "/spatial_reward"}
    for endpoint in ("/score", "/spatial_reward"):
        names = [p["parameter_name"] for p in info["named_endpoints"][endpoint]["parameters"]]
        assert names == ["sources", "edited", "instruction"]


def test_score_endpoint_matches_the_model(space, files):
    demo, client = space
    result = call(client, "/score", files["sources"], files["edited"], files["instruction"])
    names = ("visual_quality", "instruction_following", "attribute_preservation")
    for key in (*names, "overall"):
        assert 0.0 <= result[key] <= 100.0, (key, result)
    # Same numbers as the library on the same files: the Space adds no transformation of its own.
    model = demo.miescore_models[0].get()
    direct = model.score(files["sources"], files["edited"], files["instruction"])
    for key in (*names, "overall"):
        assert result[key] == pytest.approx(direct[key], abs=1e-4)
    # Overall = VQ^0.3 * IF^0.4 * AP^0.3 (paper eq. 2).
    expected = math.prod(result[k] ** w for k, w in zip(names, (0.3, 0.4, 0.3)))
    assert result["overall"] == pytest.approx(expected, rel=1e-5)
    assert result["scale"] == [0, 100]


def assert_same_scores(result, direct):
    for key in ("visual_quality", "instruction_following", "attribute_preservation", "overall"):
        assert result[key] == pytest.approx(direct[key], abs=1e-4), key


def test_score_accepts_six_sources_and_a_single_source(space, files):
    demo, client = space
    model = demo.miescore_models[0].get()
    six = (files["sources"] * 3)[:6]
    many = call(client, "/score", six, files["edited"], "Combine all six.")
    one = call(client, "/score", files["sources"][:1], files["edited"], "Make it warmer.")
    # every source reaches the model, in order: the Space's numbers are the library's for the same inputs
    assert_same_scores(many, model.score(six, files["edited"], "Combine all six."))
    assert_same_scores(one, model.score(files["sources"][:1], files["edited"], "Make it warmer."))
    assert many["overall"] != pytest.approx(one["overall"], abs=1e-6)


def test_spatial_reward_endpoint_grounded(space, files):
    demo, client = space
    undo = ground_spatialreward(demo.miescore_models[1].get())
    try:
        result = call(client, "/spatial_reward", files["sources"], files["edited"], files["instruction"])
    finally:
        undo()
    assert result["parse_ok"] is True and result["failed"] is False
    for key, value in GROUNDED_SCORES.items():
        assert result[key] == value
    sc = 0.6 * 18 + 0.4 * 20
    pq = 0.5 * 19 + 0.5 * 16
    assert result["sc"] == pytest.approx(sc) and result["pq"] == pytest.approx(pq)
    assert result["reward"] == pytest.approx((sc / 25) ** 0.8 * (pq / 25) ** 0.2, rel=1e-6)
    width, height = Image.open(files["edited"]).size
    assert [r["id"] for r in result["regions"]] == [0, 1]
    for region in result["regions"]:
        label, box = GROUNDED_REGIONS[region["id"]]
        assert region["label"] == label and region["bbox_2d"] == box
        expected = [round(box[0] * width / 1000), round(box[1] * height / 1000),
                    round(box[2] * width / 1000), round(box[3] * height / 1000)]
        assert region["bbox_pixels"] == expected
    assert "<|bbox_0|>" in result["reasoning"] and "<|global|>" in result["reasoning"]


def test_spatial_reward_unparseable_output_is_flagged_not_raised(space, files):
    _, client = space
    # The tiny random model writes gibberish: the endpoint still answers, with the failure spelled out.
    result = call(client, "/spatial_reward", files["sources"], files["edited"], files["instruction"])
    assert result["failed"] is True and result["parse_ok"] is False
    assert result["reward"] == 0.0  # config.failure_reward, never a random number
    assert result["failure_reasons"]


ERROR_CASES = {
    "no sources": (lambda f: ([], f["edited"], "x"), r"No source images: add 1 to 6 source images"),
    "too many sources": (lambda f: ((f["sources"] * 4)[:7], f["edited"], "x"), r"Too many source images \(7\)"),
    "missing edited": (lambda f: (f["sources"], None, "x"), r"No edited image: upload the edited result"),
    "empty instruction": (lambda f: (f["sources"], f["edited"], "   "), r"The instruction is empty: type the editing"),
    "corrupt edited": (lambda f: (f["sources"], f["corrupt"], "x"),
                       r"The edited image is not an image Pillow can read .*use PNG, JPEG"),
    "truncated source": (lambda f: ([f["sources"][0], f["truncated"]], f["edited"], "x"),
                         r"Source image 2 is truncated or corrupt .*re-export"),
    "oversized source": (lambda f: ([f["big"]], f["edited"], "x"),
                         r"Source image 1 is 1600x1000 .*downscale it \(this Space accepts up to 1,000,000 pixels"),
}


# Every case on /score; the two endpoints share one validator, so three cases show /spatial_reward uses it.
@pytest.mark.parametrize("endpoint, case", [("/score", case) for case in ERROR_CASES] + [
    ("/spatial_reward", case) for case in ("no sources", "corrupt edited", "empty instruction")])
def test_bad_input_gives_a_helpful_error(space, files, case, endpoint):
    _, client = space
    make, pattern = ERROR_CASES[case]
    with pytest.raises(gradio_client.exceptions.AppError) as info:
        call(client, endpoint, *make(files))
    message = str(info.value)
    assert re.search(pattern, message), message
    assert "/tmp" not in message and "Traceback" not in message  # no server paths or tracebacks leak out


def test_sources_as_a_bare_list_of_files_or_pairs(space, files):
    """gradio_client callers send sources as [handle_file(...), ...] or [file, caption] pairs; both score."""
    from gradio_client import handle_file

    demo, client = space
    expected = demo.miescore_models[0].get().score(files["sources"], files["edited"], files["instruction"])
    bare = [handle_file(p) for p in files["sources"]]
    pairs = [[handle_file(p), f"image {i + 1}"] for i, p in enumerate(files["sources"])]
    for sources in (bare, pairs):
        result = client.predict(sources, handle_file(files["edited"]), files["instruction"], api_name="/score")
        assert_same_scores(result, expected)
    one = client.predict(handle_file(files["sources"][0]), handle_file(files["edited"]), "x", api_name="/score")
    assert_same_scores(one, demo.miescore_models[0].get().score(files["sources"][:1], files["edited"], "x"))


@pytest.mark.parametrize("sources, pattern", [
    (lambda f: list(f["sources"]), r"Source image 1 is a string, not an uploaded file"),  # server paths: refused
    (lambda f: [[1, 2, 3]], r"Source image 1 has an unexpected form \(list\)"),
    (lambda f: 42, r"The sources are a int"),
    (lambda f: [{"image": {"path": None, "url": None}, "caption": 7}], r"The source images could not be read"),
])
def test_sources_in_another_shape_name_the_expected_one(space, files, sources, pattern):
    from gradio_client import handle_file

    _, client = space
    with pytest.raises(gradio_client.exceptions.AppError) as info:
        client.predict(sources(files), handle_file(files["edited"]), "x", api_name="/score")
    message = str(info.value)
    assert re.search(pattern, message), message
    assert "sources=[handle_file('a.png'), handle_file('b.png')]" in message
    assert "upstream Gradio app" not in message


def test_a_model_crash_is_reported_and_the_space_keeps_serving(space, files):
    demo, client = space
    model = demo.miescore_models[0].get()

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    model.score = broken
    try:
        with pytest.raises(gradio_client.exceptions.AppError,
                           match=r"MIEScore failed inside the model \(RuntimeError: CUDA out of memory"):
            call(client, "/score", files["sources"], files["edited"], files["instruction"])
    finally:
        del model.score
    recovered = call(client, "/score", files["sources"], files["edited"], files["instruction"])
    assert_same_scores(recovered, model.score(files["sources"], files["edited"], files["instruction"]))


def test_models_not_configured(tmp_path, files):
    demo, url = launch(None, None, tmp_path / "examples")
    try:
        client = gradio_client.Client(url, verbose=False)
        with pytest.raises(gradio_client.exceptions.AppError,
                           match="No MIEScore model configured: start the Space with --model PATH_OR_REPO or set "
                                 "the MIESCORE_MODEL"):
            call(client, "/score", files["sources"], files["edited"], "x")
        with pytest.raises(gradio_client.exceptions.AppError, match="No SpatialReward model configured.*"
                                                                     "SPATIALREWARD_MODEL"):
            call(client, "/spatial_reward", files["sources"], files["edited"], "x")
    finally:
        demo.close()


@pytest.fixture(scope="module")
def choice_examples(tmp_path_factory):
    return tmp_path_factory.mktemp("choice-examples")


def _component(demo, elem_id):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


@pytest.mark.parametrize("models, offered", [
    (("org/miescore", "org/spatialreward"), ["MIEScore", "SpatialReward"]),
    (("org/miescore", None), ["MIEScore"]),
    ((None, "org/spatialreward"), ["SpatialReward"]),
])
def test_the_model_choice_offers_only_the_configured_models(choice_examples, models, offered):
    app = load_app_module()
    demo = app.build_demo(*models, examples_dir=str(choice_examples), example_side=160)  # nothing is loaded
    choice = _component(demo, "model-choice")
    assert [value for _, value in choice.choices] == offered and choice.value == offered[0]
    assert choice.visible is (len(offered) > 1)  # one model: no choice to make
    mie_panel, sr_panel = (next(b for b in demo.blocks.values() if isinstance(b, gr.Group) and child in b.children)
                           for child in (_component(demo, "miescore-result"), _component(demo, "spatialreward-result")))
    assert (mie_panel.visible, sr_panel.visible) == (offered[0] == "MIEScore", offered[0] == "SpatialReward")
    status = _component(demo, "model-status").value
    assert ("SpatialReward model: **not configured**, so it is not offered (start the Space with "
            "`--spatialreward-model PATH_OR_REPO`" in status) is ("SpatialReward" not in offered)
    from modeling_miescore.space.models import model_choices

    assert model_choices(None, None) == (["MIEScore"], "MIEScore")  # its panel says how to configure one


def test_wrong_checkpoint_kind_is_explained(tmp_path, tiny_miescore_path, files):
    demo, url = launch(None, tiny_miescore_path, tmp_path / "examples")  # a MIEScore folder as SpatialReward
    try:
        client = gradio_client.Client(url, verbose=False)
        with pytest.raises(gradio_client.exceptions.AppError, match="not a SpatialReward checkpoint.*--model"):
            call(client, "/spatial_reward", files["sources"], files["edited"], "x")
    finally:
        demo.close()


# ---------------------------------------------------------------------------------------------- command line


def test_arguments_come_from_the_environment_and_the_command_line(monkeypatch):
    app = load_app_module()
    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "MIESCORE_MODEL", "SPATIALREWARD_MODEL"):
        monkeypatch.delenv(name, raising=False)
    args = app.parse_args([])
    assert args.host == "127.0.0.1" and args.model is None and args.spatialreward_model is None
    monkeypatch.setenv("MIESCORE_MODEL", "org/miescore-8b")
    monkeypatch.setenv("SPATIALREWARD_MODEL", "/ckpt/sr")
    args = app.parse_args([])
    assert (args.model, args.spatialreward_model) == ("org/miescore-8b", "/ckpt/sr")
    args = app.parse_args(["--model", "/local/ckpt", "--host", "0.0.0.0", "--port", "9000"])
    assert (args.model, args.host, args.port) == ("/local/ckpt", "0.0.0.0", 9000)


@pytest.mark.slow
def test_app_py_runs_as_a_script(tiny_miescore_path, tiny_miescore, tmp_path, files):
    """`python app.py` with MIESCORE_MODEL set serves /score on 127.0.0.1 (what a Space does)."""
    port = free_port()
    env = dict(os.environ, MIESCORE_MODEL=str(tiny_miescore_path), MIESCORE_SPACE_CACHE=str(tmp_path),
               HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
    env.pop("GRADIO_SERVER_NAME", None)
    proc = subprocess.Popen([sys.executable, str(APP_PATH), "--port", str(port), "--device", "cpu"],
                            cwd=str(APP_PATH.parent), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        deadline = time.time() + 120
        while time.time() < deadline and not any(f"127.0.0.1:{port}" in line for line in lines):
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.5)
        assert any(f"http://127.0.0.1:{port}" in line for line in lines), "".join(lines)
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        result = call(client, "/score", files["sources"], files["edited"], files["instruction"])
        assert result["model"] == str(tiny_miescore_path)
        assert_same_scores(result, tiny_miescore.score(files["sources"], files["edited"], files["instruction"]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---------------------------------------------------------------------------------------------- helpers


def test_gallery_values_in_every_form(tmp_path):
    path = str(tmp_path / "a.png")
    pil = Image.new("RGB", (4, 4))
    raw = {"image": {"path": path, "url": None, "orig_name": "a.png"}, "caption": None}
    assert inputs.gallery_images(None) == [] and inputs.gallery_images([]) == []
    assert inputs.gallery_images([raw, (path, "caption"), pil]) == [path, path, pil]
    assert inputs.gallery_images(path) == [path]
    with pytest.raises(inputs.SpaceInputError, match="video"):
        inputs.gallery_images([{"video": {"path": "x.mp4"}, "caption": None}])


def test_load_edit_inputs_reads_inline_data_urls():
    import base64
    import io

    buffer = io.BytesIO()
    Image.new("RGBA", (8, 6), (255, 0, 0, 0)).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    sources, edited, text = inputs.load_edit_inputs([{"image": {"path": None, "url": url}}],
                                                    {"path": None, "url": url}, "  do it  ")
    assert edited.size == (8, 6) and edited.mode == "RGB" and sources[0].getpixel((0, 0)) == (255, 255, 255)
    assert text == "do it"
    with pytest.raises(ImageLoadError, match="inline image data"):
        inputs.load_edit_inputs([np.zeros((4, 4, 3), np.uint8)], {"path": None, "url": "data:image/png;base64,AAAA"},
                                "x")


def test_space_inputs_share_the_library_limits(tmp_path):
    import base64

    from modeling_miescore.hub.processing_miescore import MAX_INSTRUCTION_CHARS

    for value, message in [(42, "must be text, got int"), (["a"], "must be text, got list"),
                           ("x" * (MAX_INSTRUCTION_CHARS + 1), "4,097 characters; the model takes at most 4,096")]:
        with pytest.raises(inputs.SpaceInputError, match=message):
            inputs.check_instruction(value)
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n%%EOF\n"
    url = "data:application/postscript;base64," + base64.b64encode(eps).decode()
    with pytest.raises(ImageLoadError, match="inline image data is not a readable image"):
        inputs.load_edit_inputs([{"image": {"path": None, "url": url}}], np.zeros((4, 4, 3), np.uint8), "x")
    strip = str(tmp_path / "strip.png")
    Image.new("L", (300, 1)).save(strip)
    with pytest.raises(ImageLoadError, match=r"^Source image 2 is 300x1, an aspect ratio of 300:1"):
        inputs.load_edit_inputs([np.zeros((4, 4, 3), np.uint8), strip], np.zeros((4, 4, 3), np.uint8), "x")
    big = np.zeros((1000, 1000, 3), np.uint8)
    with pytest.raises(inputs.SpaceInputError, match="The 3 images add up to 3 Mpx; this Space decodes at most 2 Mpx"):
        inputs.load_edit_inputs([big, big], big, "x", max_sample_pixels=2_000_000)


def test_lazy_model_loads_once_across_threads():
    calls = []
    barrier = threading.Barrier(8)

    def loader(reference):
        calls.append(reference)
        time.sleep(0.05)  # a slow load: the other threads must wait for it, not start their own
        return object()

    holder = LazyModel("ckpt", loader, "not configured")
    got = []

    def worker():
        barrier.wait()
        got.append(holder.get())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["ckpt"] and len({id(m) for m in got}) == 1 and holder.loaded
    with pytest.raises(inputs.SpaceInputError, match="^not configured$"):
        LazyModel(None, loader, "not configured").get()


def test_lazy_model_retries_after_a_failed_load():
    attempts = []

    def loader(reference):
        attempts.append(reference)
        if len(attempts) == 1:
            raise MIEScoreInputError("not there yet")
        return "model"

    holder = LazyModel("ckpt", loader, "x")
    with pytest.raises(MIEScoreInputError):
        holder.get()
    assert holder.get() == "model" and len(attempts) == 2


def test_miescore_html_bars_and_meanings():
    scores = {"visual_quality": 71.25, "instruction_following": 64.0, "attribute_preservation": 150.0,
              "overall": float("nan")}
    page = rendering.miescore_html(scores, note="<b>random</b>")
    rows = dict(re.findall(r'data-key="(\w+)" data-value="([\d.]*)"', page))
    assert rows == {"visual_quality": "71.2500", "instruction_following": "64.0000",
                    "attribute_preservation": "150.0000", "overall": ""}
    widths = re.findall(r"width:([\d.]+)%", page)
    assert widths == ["71.25", "64.00", "100.00", "0.00"]  # clipped to the bar, NaN shown empty
    assert "n/a" in page and "&lt;b&gt;random&lt;/b&gt;" in page  # escaped, never injected
    for _, title, meaning in rendering.MIESCORE_DIMENSIONS:
        assert title in page and meaning.split(":")[0] in page


def test_region_colours_match_drawing_and_highlights():
    from modeling_miescore.hub.spatialreward_drawing import region_color as drawing_color

    regions = [{"id": 3, "label": "cat", "bbox_2d": [0, 0, 500, 500]},
               {"id": 0, "label": "cup", "bbox_2d": [500, 500, 1000, 1000]}]
    colors = rendering.region_color_map(regions)
    assert colors["[3] cat"] == "#%02x%02x%02x" % drawing_color(3)
    assert colors["[0] cup"] == "#%02x%02x%02x" % drawing_color(0)
    reasoning = "Intro. <|bbox_0|> The cup stays. <| BBOX 3 |> The cat is added. <|bbox_7|> ghost. <|global|> Fine."
    pieces = rendering.highlight_reasoning(reasoning, regions)
    assert pieces == [("Intro. ", None), (" The cup stays. ", "[0] cup"), (" The cat is added. ", "[3] cat"),
                      (" ghost. ", "[7] (no box)"), (" Fine.", rendering.GLOBAL_CATEGORY)]
    cmap = rendering.reasoning_color_map(pieces, regions)
    assert set(cmap) == {"[0] cup", "[3] cat", "[7] (no box)", rendering.GLOBAL_CATEGORY}
    assert cmap["[3] cat"] == colors["[3] cat"] and cmap["[7] (no box)"] == rendering.REGION_PALETTE[7]


def test_annotations_are_pixel_boxes_clipped_to_the_image():
    regions = [{"id": 0, "label": "a", "bbox_2d": [100, 200, 600, 900]},
               {"id": 1, "label": "b", "bbox_2d": [900, 900, 1200, 1100]},  # runs off the image: clipped
               {"id": 2, "label": "c", "bbox_2d": [500, 500, 500, 800]},  # zero width: dropped
               {"id": 3, "label": "d", "bbox_pixels": [1, 2, 30, 40], "bbox_2d": [0, 0, 1, 1]}]
    assert rendering.annotations(regions, 200, 100) == [
        ((20, 20, 120, 90), "[0] a"), ((180, 90, 200, 100), "[1] b"), ((1, 2, 30, 40), "[3] d")]


def test_spatialreward_html_and_json_for_a_failed_result():
    result = {"reward": 0.0, "failed": True, "failure_reasons": ["sc:parse_failed"], "s_if": None, "s_con": 12.5,
              "parse_ok": False, "issues": {"sc": ["no_json_object"], "pq": []}, "regions": [],
              "score": float("inf")}
    page = rendering.spatialreward_html(result)
    assert "could not be used (sc:parse_failed)" in page
    assert re.search(r'data-key="s_if" data-value=""', page) and 'data-key="s_con" data-value="12.5000"' in page
    data = rendering.spatialreward_json(result, 100, 100)
    assert data["score"] is None  # JSON has no infinity
    pieces = rendering.reasoning_pieces(result)
    assert len(pieces) == 1 and "could not be parsed" in pieces[0][0]


def test_example_files_are_written_once_as_png(tmp_path):
    rows = inputs.write_example_files(tmp_path, max_side=96)
    assert len(rows) >= 4 and any(len(r.sources) == 3 for r in rows)
    for row in rows:
        for path in (*row.sources, row.edited):
            with Image.open(path) as image:
                assert image.format == "PNG" and max(image.size) <= 96
        assert row.instruction.strip()
    stamp = os.path.getmtime(rows[0].edited)
    again = inputs.write_example_files(tmp_path, max_side=96)
    assert [r.edited for r in again] == [r.edited for r in rows] and os.path.getmtime(rows[0].edited) == stamp
    assert not list(tmp_path.rglob("*.tmp*")) and not [p for p in tmp_path.rglob("tmp*.png")]
