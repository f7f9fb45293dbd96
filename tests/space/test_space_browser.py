"""The MIEScore Space in a real browser: headless Chromium driven by Selenium.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``;
override with ``CHROMIUM_BINARY`` / ``CHROMEDRIVER``) and pip ``selenium``; skipped when any is missing.
Nothing is downloaded: Selenium gets the driver's path and its driver manager runs offline.

Screenshots go to ``$MIESCORE_TEST_ARTIFACTS`` (e.g. ``tests/artifacts``) or else to a pytest temporary
folder; their paths are printed (see them with ``-s``) and attached as ``screenshot`` user properties.

Run: ``python -m pytest -q -m slow tests/space/test_space_browser.py -s``
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~40-90 s on 2 shared cores: browser start, page loads, three model calls

pytest.importorskip("selenium.webdriver", reason="pip install selenium")
pytest.importorskip("gradio")

from browser.chromium import MISSING, headless_chromium  # noqa: E402
from browser.space_harness import (  # noqa: E402
    GROUNDED_SCORES,
    ground_spatialreward,
    launch,
    tiny_spatialreward,
)

if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TIMEOUT = 120  # seconds for any one wait (the first score also loads the model)


@pytest.fixture(scope="session")
def tiny_spatialreward_path(tmp_path_factory):
    return tiny_spatialreward(tmp_path_factory)


@pytest.fixture(scope="module")
def space(tiny_miescore_path, tiny_spatialreward_path, tmp_path_factory):
    examples_dir = tmp_path_factory.mktemp("space-examples")
    demo, url = launch(tiny_miescore_path, tiny_spatialreward_path, examples_dir)
    undo = ground_spatialreward(demo.miescore_models[1].get())
    yield demo, url, examples_dir
    undo()
    demo.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with headless_chromium("1400,1800") as driver:
        driver.set_page_load_timeout(TIMEOUT)
        yield driver


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = os.environ.get("MIESCORE_TEST_ARTIFACTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot(driver, artifacts, name, request):
    path = artifacts / f"{name}.png"
    driver.save_screenshot(str(path))
    request.node.user_properties.append(("screenshot", str(path)))
    print(f"\nscreenshot: {path}")
    return path


def wait(driver, condition, timeout=TIMEOUT):
    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(condition)


def open_page(driver, url):
    driver.get(url)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#sources input[type=file]"))


def upload(driver, sources, edited):
    # The file inputs are hidden; Selenium can still type paths into them (several at once, newline-separated).
    driver.find_element(By.CSS_SELECTOR, "#sources input[type=file]").send_keys("\n".join(map(str, sources)))
    driver.find_element(By.CSS_SELECTOR, "#edited input[type=file]").send_keys(str(edited))
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sources img")) >= len(sources)
         and d.find_elements(By.CSS_SELECTOR, "#edited img"))


def type_instruction(driver, text):
    box = driver.find_element(By.CSS_SELECTOR, "#instruction textarea")
    box.clear()
    box.send_keys(text)


def choose(driver, model):
    driver.find_element(By.XPATH, f"//*[@id='model-choice']//label[contains(., '{model}')]").click()


def read_rows(driver, panel_id):
    rows = driver.find_elements(By.CSS_SELECTOR, f"#{panel_id} .score-row")
    return {r.get_attribute("data-key"): (r.get_attribute("data-value"),
                                          r.find_element(By.CSS_SELECTOR, ".score-value").text,
                                          r.find_element(By.CSS_SELECTOR, ".score-meaning").text) for r in rows}


def example_files(examples_dir, name="cat-coffee"):
    folder = Path(examples_dir) / "max160" / name
    return sorted(folder.glob("source_*.png")), folder / "edited.png"


def rgb(style):
    match = re.search(r"rgba?\((\d+),\s*(\d+),\s*(\d+)", style or "")
    return tuple(int(v) for v in match.groups()) if match else None


def test_score_in_the_browser(space, browser, artifacts, request):
    demo, url, examples_dir = space
    sources, edited = example_files(examples_dir)
    instruction = "Place the cat from image 2 on the table next to the coffee cup in image 1."
    open_page(browser, url)
    upload(browser, sources, edited)
    type_instruction(browser, instruction)
    browser.find_element(By.ID, "score-button").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#miescore-scores .score-row")) == 4)
    rows = read_rows(browser, "miescore-scores")
    path = screenshot(browser, artifacts, "space_miescore", request)

    expected = demo.miescore_models[0].get().score([str(s) for s in sources], str(edited), instruction)
    assert set(rows) == {"visual_quality", "instruction_following", "attribute_preservation", "overall"}
    for key, (value, shown, meaning) in rows.items():
        assert float(value) == pytest.approx(expected[key], abs=1e-3)  # the page shows the model's numbers
        assert shown.startswith(f"{expected[key]:.1f}") and shown.endswith("/ 100")
        assert meaning  # every bar has its one-line meaning
    assert "instruction following weighs most" in rows["overall"][2]
    assert browser.find_element(By.ID, "miescore-result").is_displayed()
    assert path.stat().st_size > 20_000  # a real rendering, not a blank page


def test_spatialreward_regions_and_reasoning_in_the_browser(space, browser, artifacts, request):
    _, url, examples_dir = space
    sources, edited = example_files(examples_dir)
    open_page(browser, url)
    upload(browser, sources, edited)
    type_instruction(browser, "Place the cat from image 2 on the table next to the coffee cup in image 1.")
    choose(browser, "SpatialReward")
    browser.find_element(By.ID, "score-button").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#spatialreward-scores .score-row"))
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#spatialreward-regions .legend-item")) == 2)
    screenshot(browser, artifacts, "space_spatialreward", request)

    rows = read_rows(browser, "spatialreward-scores")
    for key, value in GROUNDED_SCORES.items():
        assert float(rows[key][0]) == value
    sc, pq = 0.6 * 18 + 0.4 * 20, 0.5 * 19 + 0.5 * 16
    assert float(rows["reward"][0]) == pytest.approx((sc / 25) ** 0.8 * (pq / 25) ** 0.2, abs=1e-4)
    assert not browser.find_elements(By.CSS_SELECTOR, "#spatialreward-scores .parse-warning")
    # Only the chosen model's panel is shown (Gradio 6 removes hidden groups from the page).
    assert not [e for e in browser.find_elements(By.ID, "miescore-result") if e.is_displayed()]

    # Each region's box colour (AnnotatedImage legend) is the colour of its sentences in the reasoning.
    box_colors = {b.text.strip(): rgb(b.get_attribute("style"))
                  for b in browser.find_elements(By.CSS_SELECTOR, "#spatialreward-regions .legend-item")}
    # spatialreward_drawing.PALETTE[0], [1]
    assert box_colors == {"[0] cat": (230, 25, 75), "[1] coffee cup": (60, 180, 75)}
    tokens = browser.find_elements(By.CSS_SELECTOR, "#spatialreward-reasoning .token.highlighted")
    by_text = {t.text.strip(): rgb(t.get_attribute("style")) for t in tokens}
    assert by_text["The cat from image 2 now sits on the table, slightly cut off."] == box_colors["[0] cat"]
    assert by_text["the coffee cup from image 1 unchanged."] == box_colors["[1] coffee cup"]
    assert "Overall the fusion is plausible." in by_text


def test_bad_input_shows_the_message_in_the_page(space, browser, artifacts, request):
    _, url, examples_dir = space
    sources, edited = example_files(examples_dir)
    open_page(browser, url)
    upload(browser, sources, edited)
    browser.find_element(By.ID, "score-button").click()  # no instruction typed
    toast = wait(browser, lambda d: [t for t in d.find_elements(By.CSS_SELECTOR, ".toast-body") if t.text])
    screenshot(browser, artifacts, "space_error", request)
    assert "The instruction is empty: type the editing instruction" in toast[0].text


def test_example_fills_the_inputs(space, browser):
    _, url, _ = space
    open_page(browser, url)
    button = wait(browser, lambda d: d.find_elements(By.XPATH, "//button[contains(., 'cat-astronaut-coffee')]"))
    button[0].click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sources img")) == 3)
    text = browser.find_element(By.CSS_SELECTOR, "#instruction textarea").get_attribute("value")
    assert text.startswith("Seat the cat from image 2 and the astronaut from image 3")
    assert browser.find_elements(By.CSS_SELECTOR, "#edited img")
