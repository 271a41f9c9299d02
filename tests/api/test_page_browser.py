"""podmanager's page in a real browser (headless Chromium, Selenium) over records alone, no
cluster: a run's checkpoints on its timeline, a service's request history drawn by a page
opened after the preemption, and a deleted cluster's history kept by `down`, marked as such.
Screenshots go to $PODMANAGER_SCREENSHOTS when set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import chromium, page_errors
from dashboard_records import CLUSTER, checkpoints_of, preempted_run
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from podmanager.api import dashboard, history_bundle
from podmanager.client import kept_history
from podmanager.state import StateStore
from podmanager.state.service_history import Point, ServiceHistory
from podmanager.state.services import ServiceRecord, ServiceStore

T0 = 1_000_000.0  # preempted_run's


def wait(driver, condition, what: str, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    return WebDriverWait(driver, timeout_s, poll_frequency=0.05).until(lambda d: condition(d), message=what)


def screenshot(driver, name: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    driver.save_screenshot(str(Path(os.environ.get("PODMANAGER_SCREENSHOTS") or tmp_path) / name))


def a_service_preempted_under_load() -> None:
    """Service s1, replica run r1 (preempted at T0+16), with 60 s of its router's seconds: 20
    requests a second, none failed, p99 rising while the replica was away."""
    ServiceStore().create(ServiceRecord(service_id="s1", cluster=CLUSTER, program="serve.py", slices=[2],
                                        replica_runs=["r1"], endpoint="http://127.0.0.1:9", replica_url="ws://x",
                                        status="cancelled", created_at=T0, updated_at=T0 + 60))
    history = ServiceHistory()
    for i in range(60):
        away = 16 <= i < 30
        history.add(CLUSTER, "s1", Point(T0 + i, 1.0, 20, 0, 4.0, 40.0 if away else 9.0, 0 if away else 1))


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


def test_a_runs_checkpoints_and_a_services_history_are_drawn(browser, tmp_path):
    preempted_run()
    saved = checkpoints_of()
    a_service_preempted_under_load()
    page = dashboard.open_page(CLUSTER)
    try:
        browser.get(f"{page.url}#/run/r1")
        marks = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'svg path.mark[data-kind="checkpoint"]'),
                     "the checkpoints on the timeline")
        assert [(int(m.get_attribute("data-step")), float(m.get_attribute("data-time"))) for m in marks] == saved
        first_bar = browser.find_element(By.CSS_SELECTOR, 'svg g.attempt[data-attempt="1"] rect.outline')
        # step 6's checkpoint (T0+11.5) is inside attempt 1's bar (T0+0 to T0+17)
        assert first_bar.rect["x"] < marks[0].rect["x"] < first_bar.rect["x"] + first_bar.rect["width"]
        screenshot(browser, "dashboard-checkpoints.png", tmp_path)

        browser.get(f"{page.url}#/service/s1")  # opened long after the preemption: the router's seconds are there
        requests = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '.chart[data-chart="requests"] path.line'),
                        "the requests chart")
        assert [p.get_attribute("data-points") for p in requests] == ["60", "60"]  # requests, and failed
        assert browser.find_elements(By.CSS_SELECTOR, '.chart[data-chart="requests"] line.preempt')
        latency = browser.find_elements(By.CSS_SELECTOR, '.chart[data-chart="latency"] path')
        assert [p.get_attribute("class") for p in latency] == ["line", "line p99"]
        assert "60 points" in browser.find_element(By.ID, "sv").text
        assert page_errors(browser) == []
        screenshot(browser, "dashboard-service-history.png", tmp_path)
    finally:
        page.stop()


def test_a_deleted_clusters_kept_history_is_marked_on_every_view(browser, tmp_path):
    store = StateStore()
    preempted_run(store=store)
    checkpoints_of(store=store)
    data = history_bundle.bundle(store, CLUSTER)
    store.delete_cluster(CLUSTER)
    for path in list(store.path.parent.glob("state.db*")):
        path.unlink()  # the controller VM's disk, gone
    kept_history.keep(CLUSTER, data, deleted_at=1_700_000_000.0)
    page = dashboard.open_page(CLUSTER)
    try:
        for view in ("#/cluster", "#/run/r1", "#/runs"):
            browser.get(f"{page.url}{view}")
            banner = wait(browser, lambda d: (b := d.find_element(By.ID, "history-banner")).is_displayed() and b,
                          f"the history banner on {view}")
            assert banner.text == ("history: cluster deleted at 2023-11-14 22:13:20 UTC; this copy of its records was "
                                   "kept on this machine by `down` (read-only)")
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, 'tr[data-run="r1"]')) == 1, "the run listed")
        browser.get(f"{page.url}#/run/r1")
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg g.attempt")) == 2, "its two attempts")
        assert len(browser.find_elements(By.CSS_SELECTOR, 'svg path.mark[data-kind="checkpoint"]')) == 3
        browser.get(f"{page.url}#/cluster")
        wait(browser, lambda d: "deleted" in d.find_element(By.ID, "c").text, "the cluster said deleted")
        assert page_errors(browser) == []
        screenshot(browser, "dashboard-history.png", tmp_path)
    finally:
        page.stop()
