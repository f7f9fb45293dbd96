"""Headless Chromium for the browser tests (Selenium), offline: Debian's ``chromium`` and ``chromium-driver``
(``/usr/bin/chromium``, ``/usr/bin/chromedriver``; override with ``CHROMIUM_BINARY`` / ``CHROMEDRIVER``).

Selenium gets the driver's path, so its driver manager never downloads anything. Import this module after
``pytest.importorskip("selenium.webdriver")``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

CHROMIUM = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
MISSING = (None if os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK) else
           f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install -y chromium chromium-driver)")


@contextmanager
def headless_chromium(window_size: str, *, console_log: bool = False) -> Iterator:
    """A Chrome WebDriver on a throw-away profile, quit and removed on exit. ``console_log`` keeps the page's
    console for ``driver.get_log("browser")``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never fetch anything
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={window_size}"):
        options.add_argument(flag)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
