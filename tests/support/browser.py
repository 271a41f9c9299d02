"""A headless Chromium driven by Selenium (Debian's `chromium` and `chromium-driver`; `.ci/run`
installs them when missing). A test that needs it is skipped, saying why, only when the browser
or its driver is truly absent."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")


def browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("no headless browser here: install Debian's packages 'chromium' and 'chromium-driver' "
                    "(apt-get install -y chromium chromium-driver; .ci/run does)")
    return chromium, driver


@contextmanager
def chromium() -> Iterator["object"]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    profile = tempfile.mkdtemp(prefix="pm-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def page_errors(driver) -> list[str]:  # type: ignore[no-untyped-def]
    """What the page's scripts reported as errors (an uncaught exception, a failed fetch)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
