"""``report.html`` in a real browser: headless Chromium opens a MIE-Bench and a MER-Bench report (with the
aggregation grid) from ``file://`` and must log no console error and show every plot.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``;
override with ``CHROMIUM_BINARY`` / ``CHROMEDRIVER``) and pip ``selenium``; skipped when any is missing. Screenshots
go to ``$MIESCORE_TEST_ARTIFACTS`` or a pytest temporary folder.

Run: ``python -m pytest -q -m slow tests/evaluation/test_benchmark_report_browser.py -s``
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # ~20-40 s on 2 shared cores: browser start, two pages

pytest.importorskip("selenium.webdriver", reason="pip install selenium")

from browser.chromium import MISSING, headless_chromium  # noqa: E402

if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402

from modeling_miescore.evaluation.aggregation_grid import aggregation_grid, grid_summary  # noqa: E402
from modeling_miescore.evaluation.instance_bootstrap import BootstrapSettings  # noqa: E402
from modeling_miescore.evaluation.mie_bench_report import mie_bench_report  # noqa: E402
from modeling_miescore.evaluation.plots import (  # noqa: E402
    aggregation_grid_plot,
    mer_bench_plots,
    mie_bench_plots,
)
from modeling_miescore.evaluation.report import write_report  # noqa: E402
from report_checks import mer_report, mie_frame  # noqa: E402



@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """A MIE-Bench report (7 sections, a folded table, 5 plots) and a MER-Bench report with the grid (3 plots)."""
    mie = tmp_path_factory.mktemp("mie-report")
    frame = mie_frame(3)
    report = mie_bench_report(frame, bootstrap=BootstrapSettings(n=20, progress=False))
    report["plots"] = mie_bench_plots(frame, report, mie)
    write_report(mie, report)

    mer = tmp_path_factory.mktemp("mer-report")
    rng = np.random.default_rng(0)
    subs = [np.clip(np.linspace(20, 5, k)[:, None] + rng.normal(0, 5, (k, 4)), 0, 25) for k in (2, 3, 4) * 4]
    cells = aggregation_grid(subs)
    report = {**mer_report(), "aggregation_grid": grid_summary(cells, len(subs))}
    report["plots"] = mer_bench_plots(report, mer)
    report["plots"]["aggregation_grid"] = aggregation_grid_plot(cells, report["aggregation_grid"], mer)
    write_report(mer, report)
    return {"mie": mie, "mer": mer}


@pytest.fixture(scope="module")
def browser():
    with headless_chromium("1280,1000", console_log=True) as driver:  # the console, for get_log("browser")
        driver.set_page_load_timeout(60)
        yield driver


def _screenshot_dir(tmp_path_factory) -> Path:
    folder = os.environ.get("MIESCORE_TEST_ARTIFACTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize("kind, n_plots", [("mie", 5), ("mer", 3)])
def test_report_html_opens_without_console_errors_and_shows_every_plot(reports, browser, kind, n_plots,
                                                                        tmp_path_factory, record_property):
    page = reports[kind] / "report.html"
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors
    assert browser.title.endswith("evaluation report")
    images = browser.find_elements(By.TAG_NAME, "img")
    assert len(images) == n_plots
    main_width = browser.find_element(By.TAG_NAME, "main").size["width"]
    for img in images:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", img)
        loaded = browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)
        assert loaded and loaded > 200, f"{img.get_attribute('alt')} did not decode"
        assert img.is_displayed(), img.get_attribute("alt")
        assert 200 < img.size["width"] <= main_width and img.size["height"] > 100  # scaled into the page
    assert len(browser.find_elements(By.TAG_NAME, "table")) >= 3
    shot = _screenshot_dir(tmp_path_factory) / f"report-{kind}.png"
    browser.get_screenshot_as_file(str(shot))
    record_property("screenshot", str(shot))
    print(f"screenshot: {shot}")


@pytest.fixture(scope="module")
def editor_comparison(tmp_path_factory) -> Path:
    """An editors comparison (GEdit-Bench + ImgEdit-Bench, two runs, scripted judge) with plots and pictures."""
    from editor_bench_helpers import make_editor_runs

    from modeling_miescore.cli.main import main

    reports, folder = make_editor_runs(tmp_path_factory.mktemp("editor-runs"))
    out = folder / "cmp"
    assert main(["benchmark", "editors", "--runs", f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
                 f"tuned={reports[('gedit', 'tuned')]},{reports[('imgedit', 'tuned')]}", "--out", str(out),
                 "--bootstrap", "50", "--grid-size", "2"]) == 0
    return out


def test_editor_comparison_page_shows_the_table_plots_and_source_base_tuned_pictures(editor_comparison, browser,
                                                                                      tmp_path_factory):
    browser.get_log("browser")
    browser.get((editor_comparison / "report.html").as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors
    assert browser.title == "Editor comparison (SpatialReward paper, Table 3 layout)"
    table = browser.find_elements(By.TAG_NAME, "table")[0]
    assert "w/ EditReward" in table.text and "tuned" in table.text  # the paper's rows beside ours
    images = browser.find_elements(By.TAG_NAME, "img")
    pictures = [img for img in images if img.get_attribute("alt").startswith(("gain", "loss"))]
    # 2 plots; per benchmark the 2 largest gains and the one loss the tuned run has (GEdit: +4, +2 and -2; ImgEdit:
    # +2, +1 and -1)
    assert len(images) == 2 + len(pictures) and len(pictures) == 6
    main_width = browser.find_element(By.TAG_NAME, "main").size["width"]
    for img in images:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", img)
        natural = browser.execute_script("return [arguments[0].naturalWidth, arguments[0].naturalHeight]", img)
        assert natural[0] > 300 and natural[1] > 200, img.get_attribute("alt")  # decoded, not a broken icon
        assert img.is_displayed() and 200 < img.size["width"] <= main_width
    shot = _screenshot_dir(tmp_path_factory) / "report-editors.png"
    browser.get_screenshot_as_file(str(shot))
    print(f"screenshot: {shot}")
