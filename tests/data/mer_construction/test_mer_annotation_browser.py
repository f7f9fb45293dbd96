"""The MER-Bench annotation app in a real browser (headless Chromium, Selenium): five annotators rate every
candidate (SC, PQ, overall) through the page, one reloads in the middle and continues where they left off,
an incomplete form is refused; then ``miescore mer-bench export``, ``miescore build-dataset mer-bench`` and
``datasets.load_dataset`` of the built Parquet.

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (``apt-get install -y chromium chromium-driver``) and
pip ``selenium``; skipped when any is missing. Run: ``python -m pytest -q -m slow tests/data/mer_construction/test_mer_annotation_browser.py``
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # ~60-90 s on 2 shared cores: browser start and 10 submissions of 18 ratings

pytest.importorskip("selenium.webdriver", reason="pip install selenium")
pytest.importorskip("gradio")

from browser.chromium import MISSING, headless_chromium  # noqa: E402
from browser.space_harness import free_port  # noqa: E402
from mer_construction_helpers import construction_folder, form_values  # noqa: E402

if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from modeling_miescore.cli.main import main  # noqa: E402
from modeling_miescore.data.mer_construction import AnnotationStore, build_annotation_app  # noqa: E402
from modeling_miescore.data.mer_construction.annotation_app import RATING_FIELDS  # noqa: E402

TIMEOUT = 60


@pytest.fixture
def app(tmp_path):
    folder = construction_folder(tmp_path, 1, 1)
    demo = build_annotation_app(AnnotationStore(folder))
    demo.queue(default_concurrency_limit=2)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    yield folder, url
    demo.close()


def _status(driver) -> str:
    return " ".join(driver.find_element(By.CSS_SELECTOR, "#status-message").text.split())  # code spans: own lines


def _enter(driver, url, annotator):
    driver.get(url)
    box = WebDriverWait(driver, TIMEOUT).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#annotator-id textarea, #annotator-id input"))
    box.send_keys(annotator)
    driver.find_element(By.CSS_SELECTOR, "#start-button").click()
    WebDriverWait(driver, TIMEOUT).until(lambda d: f"{annotator}" in _status(d))


def _fill(driver, values):
    for index, value in enumerate(values):
        if value is None:
            continue
        slot, field = divmod(index, len(RATING_FIELDS))
        radio = driver.find_element(
            By.CSS_SELECTOR, f"#candidate-{slot}-{RATING_FIELDS[field]} input[value='{value}']")
        driver.execute_script("arguments[0].click();", radio)


def _submit(driver, expect):
    driver.find_element(By.CSS_SELECTOR, "#submit-button").click()
    WebDriverWait(driver, TIMEOUT).until(lambda d: expect in _status(d))


def test_annotate_in_the_browser_then_export_build_load(app, tmp_path):
    folder, url = app
    samples = [json.loads(line)["id"] for line in (folder / "instructions.jsonl").read_text().splitlines()]
    with headless_chromium("1600,2000") as driver:
        driver.set_page_load_timeout(TIMEOUT)
        for k, annotator in enumerate(("A1", "A2", "A3", "A4", "A5")):
            _enter(driver, url, annotator)
            assert f"Sample {samples[0]}" in _status(driver)
            assert driver.find_element(By.CSS_SELECTOR, "#candidate-5-image").is_displayed()
            values = form_values(6, k, split_slot=0)
            if k == 0:  # an incomplete form is refused and nothing is stored
                _fill(driver, values[:-1])
                _submit(driver, "Not saved")
                assert "candidate 6: Overall" in _status(driver) and not (folder / "annotations.jsonl").exists()
            _fill(driver, values)
            _submit(driver, f"Saved {samples[0]}")
            if k == 0:  # the page is reloaded: the annotator continues at the next sample
                _enter(driver, url, annotator)
                assert f"Sample {samples[1]}" in _status(driver) and "1 sample(s) done" in _status(driver)
            _fill(driver, form_values(6, k))
            _submit(driver, "nothing left to annotate")
    submissions = (folder / "annotations.jsonl").read_text().splitlines()
    assert len(submissions) == 10 and len({json.loads(s)["id"] for s in submissions}) == 10

    raw, built = tmp_path / "raw", tmp_path / "built"
    assert main(["mer-bench", "export", "--folder", str(folder), "--out", str(raw), "--groups-per-type", "2"]) == 0
    assert main(["build-dataset", "mer-bench", "--raw", str(raw), "--out", str(built), "--groups-per-type", "2",
                 "--no-progress"]) == 0
    import datasets

    ds = datasets.load_dataset(str(built), cache_dir=str(tmp_path / "hf"))
    report = json.loads((raw / "export_report.json").read_text())
    formed = {name: n for name, n in report["groups"].items() if n}  # the builder writes no empty split
    assert {name: ds[name].num_rows for name in ds} == formed and report["needs_review"] == 1
    assert ds["4pair"].num_rows >= 1 and ds["4pair"][0]["overall_tiers"][0] == "good"
