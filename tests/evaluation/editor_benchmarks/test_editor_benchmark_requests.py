"""How ``miescore benchmark gedit`` / ``imgedit`` ask their judge (issue 33.3-4): as the released scripts ask the
published judge, GPT-4.1 (GEdit: Step1X-Edit ``viescore/mllm_tools/openai.py`` @570eba6, the text first, max_tokens
1400, no temperature, JPEG quality 75 at full size; ImgEdit: ``basic_bench.py`` @547185d, no max_tokens or
temperature, PNG at full size), each setting an option whose differences the report lists; and ImgEdit's released
``prompts.json`` keys accepted for both versions of ``basic_edit.json``."""

from __future__ import annotations

import math

import pytest
from editor_bench_helpers import (converted, edit_image, gedit_args, gedit_server_answer, imgedit_answer, is_imgedit,
                                  read_report)
from local_http import RoutedChatServer, request_text

from modeling_miescore.cli.main import main
from modeling_miescore.testing import raw_benchmarks as rb

GEDIT_PLAN = [([6, 8], [9, 4]), ([7, 7], [7, 9]), ([10, 3], [8, 8]), ([9, 9], [4, 6]), ([5, 5], [5, 10])]


@pytest.fixture(scope="module")
def gedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gedit-requests")
    dataset, truth = converted("gedit-bench", folder, languages=("en",))
    for code, t in enumerate(truth):
        edit_image(folder / "edits" / "fullset" / t["task_type"] / "en" / f"{t['key']}.png", code)
    return {"dataset": dataset, "edits": folder / "edits", "en": truth}


@pytest.fixture(scope="module")
def imgedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imgedit-requests")
    dataset, truth = converted("imgedit-bench", folder, per_type=1)
    return {"dataset": dataset, "truth": truth}


def _data_url_parts(body) -> list:
    """``[("text", text) | (mime type, image bytes)]`` of a request's content, in order."""
    import base64

    out = []
    for part in body["messages"][0]["content"]:
        if part["type"] == "text":
            out.append(("text", part["text"]))
        else:
            head, data = part["image_url"]["url"].split(",", 1)
            out.append((head.split(";")[0].removeprefix("data:"), base64.b64decode(data)))
    return out


def test_gedit_requests_are_sent_as_the_released_gpt41_script_sends_them(gedit, tmp_path):
    """Step1X-Edit GEdit-Bench/viescore/mllm_tools/openai.py @570eba6: the text part first, then the images;
    max_tokens 1400, no temperature; each image JPEG with Pillow's default quality at full size. Each is an
    option (images first as the Qwen2.5-VL path, a temperature, PNG), and the report names the differences."""
    import io

    from PIL import Image

    bodies = []

    def answer(body, repeat):
        bodies.append(body)
        return gedit_server_answer(dict(enumerate(GEDIT_PLAN)))(body, repeat)

    out = tmp_path / "released"
    with RoutedChatServer(answer) as server:
        assert main(gedit_args(gedit, out, server.url, "--language", "en", "--no-plots")) == 0
    sizes = {t["key"]: t["source_size"] for t in gedit["en"]}
    sent = set()
    for body in bodies:
        assert body["max_tokens"] == 1400 and "temperature" not in body
        parts = _data_url_parts(body)
        assert parts[0][0] == "text" and [kind for kind, _ in parts[1:]] == ["image/jpeg"] * (len(parts) - 1)
        for _, data in parts[1:]:
            assert Image.open(io.BytesIO(data)).size in sizes.values()  # full size: the source's
            sent.add(data)
    # the bytes are Pillow's default JPEG encoding (quality 75) of the edit resized to its source
    for row in read_report(out)["per_row"]:
        expected = io.BytesIO()
        Image.open(row["edited"]).convert("RGB").resize(sizes[row["key"]]).save(expected, format="JPEG")
        assert expected.getvalue() in sent
    report = read_report(out)
    assert report["run"]["request_differences"] == [] and report["run"]["judge_endpoint"] == server.url
    assert "max_tokens 1400; temperature not sent; images JPEG quality 75, full size" in report["run"]["request"]
    # every setting is an option; the report lists what differs from the released script
    bodies.clear()
    out = tmp_path / "changed"
    with RoutedChatServer(answer) as server:
        assert main(gedit_args(gedit, out, server.url, "--language", "en", "--no-plots", "--parts-order",
                                "images-first", "--max-tokens", "512", "--temperature", "0", "--image-format",
                                "PNG", "--max-pixels", "600")) == 0
    for body in bodies:
        parts = _data_url_parts(body)
        assert body["max_tokens"] == 512 and body["temperature"] == 0 and parts[-1][0] == "text"
        assert {kind for kind, _ in parts[:-1]} == {"image/png"}
        assert all(math.prod(Image.open(io.BytesIO(data)).size) <= 600 for _, data in parts[:-1])
    differences = read_report(out)["run"]["request_differences"]
    assert differences == ["parts: images-first (released: text-first)", "max_tokens: 512 (released: 1400)",
                           "temperature: 0 (released: not sent)",
                           "images: PNG, at most 600 pixels (released: JPEG quality 75, full size)"]
    assert "images-first (released: text-first)" in (out / "report.md").read_text()


def test_imgedit_requests_send_no_budget_or_temperature_and_full_size_images(imgedit, tmp_path):
    """ImgEdit Benchmark/Basic/basic_bench.py @547185d: [rubric, source, edited], no max_tokens, no temperature,
    the images at full size (a 1.2-Mpx edit is not downscaled)."""
    import io

    from PIL import Image

    edits = tmp_path / "edits"
    for code, t in enumerate(imgedit["truth"]):
        edit_image(edits / f"{t['key']}.png", code, size=(1200, 1000))
    bodies = []

    def answer(body, repeat):
        bodies.append(body)
        assert is_imgedit(body)
        return 200, imgedit_answer((4, 4, 4)), None, 0

    with RoutedChatServer(answer) as server:
        assert main(["benchmark", "imgedit", "--dataset", str(imgedit["dataset"]), "--edits", str(edits), "--out",
                     str(tmp_path / "out"), "--backend", "openai", "--base-url", server.url, "--model", "gpt-4.1",
                     "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    assert len(bodies) == len(imgedit["truth"])
    for body in bodies:
        parts = _data_url_parts(body)
        assert "max_tokens" not in body and "temperature" not in body
        assert [kind for kind, _ in parts] == ["text", "image/png", "image/png"]
        assert Image.open(io.BytesIO(parts[2][1])).size == (1200, 1000)



@pytest.mark.parametrize("release", ["current", "c14480a"])
def test_imgedit_judge_accepts_the_released_prompts_json_keys_for_both_versions(tmp_path, release):
    """ImgEdit's prompts.json has the keys replace, add, adjust, remove, style, action, extract, background,
    compose (c14480a and later); a dataset converted from either version of basic_edit.json (c14480a's 'alter'
    included) is judged with them, each edit with its own type's rubric."""
    from modeling_miescore.data.converters import get_converter
    from modeling_miescore.evaluation.editor_benchmarks.judges import rubric_type

    raw = tmp_path / "raw"
    truth = rb.make_raw_imgedit_bench(raw, types=rb.IMGEDIT_PROMPTS_KEYS, per_type=1, release=release)
    get_converter("imgedit-bench")(raw, tmp_path / "data", progress=False, release=release).build()
    for code, t in enumerate(truth):
        edit_image(tmp_path / "edits" / f"{t['key']}.png", code)
    prompts = rb.write_imgedit_prompts_json(tmp_path / "prompts.json")  # the released file's nine keys
    rubrics = []

    def answer(body, repeat):
        rubrics.append(request_text(body).split(" RUBRIC")[0].removeprefix("PLACEHOLDER "))
        return 200, imgedit_answer((4, 3, 3), names=("Criterion A", "Criterion B", "Criterion C")), None, 0

    with RoutedChatServer(answer) as server:
        assert main(["benchmark", "imgedit", "--dataset", str(tmp_path / "data"), "--edits", str(tmp_path / "edits"),
                     "--out", str(tmp_path / "out"), "--backend", "openai", "--base-url", server.url, "--model",
                     "gpt-4.1", "--prompts", str(prompts), "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    assert sorted(rubrics) == sorted(rb.IMGEDIT_PROMPTS_KEYS)  # each type asked with its own rubric
    report = read_report(tmp_path / "out")
    assert set(report["results"]["en"]["full"]["by_category"]) == set(rb.IMGEDIT_PROMPTS_KEYS)
    assert report["run"]["release"].startswith("basic_edit.json of ImgEdit " + {"current": "b3eb8e7",
                                                                               "c14480a": "c14480a"}[release])
    assert rubric_type("alter") == "adjust" and rubric_type("add") == "add"  # a dataset converted before the mapping
