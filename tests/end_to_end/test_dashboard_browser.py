"""podmanager's page in a real browser (Debian's headless Chromium, driven by Selenium) over a
dry-run cluster of real local Ray hosts with hot spares, its programs written to a folder
outside the clone:

- a run preempted once shows two attempt bars, its incident with the ledger's detect and
  recover times, badput buckets that sum to its wall time, and its loss by step; the cluster
  page shows the swap;
- a service whose replica's slice is preempted under load shows the preemption and no failed
  request, and a page opened afterwards still draws every second of it (the router kept them);
- a line a host prints is on the run's page in under a second.

Screenshots of each go to $PODMANAGER_SCREENSHOTS when set (docs/ holds the ones made so)."""

from __future__ import annotations

import os
import statistics
import textwrap
import time
from pathlib import Path

import pytest
from browser import chromium, page_errors
from cluster_specs import ONE_CHIP_PAIR_AND_A_SPARE
from fired_faults import FiredFaults
from ray_fixtures import module_cluster
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_inference import Load
from test_recovery import PreemptAt, train
from test_spares_ray import DOUBLER

from podmanager import api
from podmanager.api import simulation
from podmanager.api.serve import ServeOptions
from podmanager.core.clock import RealClock, poll_until
from podmanager.core.workload import Workload
from podmanager.state.service_history import ServiceHistory

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
SPEC = ONE_CHIP_PAIR_AND_A_SPARE  # shared with test_spares_ray.py
NAME = SPEC["name"]

home, cluster, _shared_home = module_cluster(SPEC)


@pytest.fixture
def page(cluster):
    server = api.open_page(NAME)
    try:
        yield server.url  # type: ignore[attr-defined]
    finally:
        server.stop()


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


def screenshot(driver, name: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = Path(os.environ.get("PODMANAGER_SCREENSHOTS") or tmp_path)
    driver.save_screenshot(str(folder / name))


def wait(driver, condition, what: str, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    """`condition`'s first true answer. The page redraws its tables as new data comes: an element
    found and then redrawn before it is read (stale) is a poll to make again, not a failure."""
    return WebDriverWait(driver, timeout_s, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: condition(d), message=what)


def a_ready_spare(cluster) -> int:  # type: ignore[no-untyped-def]
    ready = poll_until(lambda: [x.index for x in cluster.status().slices if x.spare and x.state == "READY"],
                       timeout_s=120.0, interval_s=0.5, clock=RealClock(), what="a READY spare")
    return ready[0]


def test_a_preempted_run_shows_two_attempts_its_incident_and_where_its_time_went(cluster, page, browser, tmp_path):
    a_ready_spare(cluster)
    working = [s.index for s in cluster.status().slices if not s.spare]  # shared: a swap moves the spare
    with FiredFaults(cluster.runtime) as faults:  # its preemption over before the next test
        result = cluster.run(train(tmp_path / "ck", steps=120), printer=PreemptAt(faults, working[-1], step=40))
    assert result.status == "succeeded" and (result.attempts, result.preemptions) == (2, 1), result.message
    [incident] = result.incidents
    assert incident.swaps, "the preempted slice was swapped for the spare"

    browser.get(f"{page}#/run/{result.run_id}")
    bars = wait(browser, lambda d: len(found := d.find_elements(By.CSS_SELECTOR, "svg g.attempt")) == 2 and found,
                "two attempt bars")
    assert [b.get_attribute("data-attempt") for b in bars] == [str(a.attempt) for a in result.attempt_log]
    [row] = browser.find_elements(By.CSS_SELECTOR, "tr.incident-row")
    assert float(row.get_attribute("data-detect-s")) == incident.detect_s
    assert float(row.get_attribute("data-recover-s")) == incident.recover_s
    assert browser.find_elements(By.CSS_SELECTOR, 'svg g.incident[data-kind="preemption"]')
    buckets = [float(r.get_attribute("data-seconds")) for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-bucket]")]
    assert sum(buckets) == pytest.approx(result.wall_s, rel=0.01)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'svg.metric[data-metric="loss"] line.attempt-start'),
         "the loss by step, the second attempt's start marked")
    assert page_errors(browser) == []
    screenshot(browser, "dashboard-run.png", tmp_path)

    browser.get(f"{page}#/cluster")
    swap = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#swaps tr.swap"), "the spare swap")
    lost, spare = incident.swaps[0]
    assert f"takes the place of lost slice {lost}" in swap[0].text and f"slice {spare}" in swap[0].text
    assert {r.get_attribute("data-slice") for r in browser.find_elements(By.CSS_SELECTOR, "#slices tr[data-slice]")} \
        >= {"0", "1", "2"}
    screenshot(browser, "dashboard-cluster.png", tmp_path)


def test_a_services_page_shows_its_preemption_and_no_failed_request(cluster, page, browser, tmp_path):
    spare = a_ready_spare(cluster)
    (tmp_path / "doubler.py").write_text(DOUBLER)
    handle = cluster.serve(Workload(entrypoint="doubler.py", working_dir=str(tmp_path)), ServeOptions())
    try:
        handle.wait_ready(timeout_s=120)
        replica = handle.replicas()[0].replica
        run_id = handle.record().replica_runs[0]
        browser.get(f"{page}#/service/{handle.service_id}")
        with Load(handle.endpoint) as load:
            poll_until(lambda: load.count() >= 50, timeout_s=60, interval_s=0.05, what="the load to start")
            simulation.preempt(cluster.runtime, replica, notice_s=0.0)
            poll_until(lambda: (r := cluster.runs_store.get(run_id)) is not None and r.slices == [spare]
                       and r.status == "running" and r.ledger.incidents, timeout_s=60, interval_s=0.1,
                       what="the replica served again on the spare")
            after = time.monotonic()
            poll_until(lambda: len(load.since(after)) >= 50, timeout_s=60, interval_s=0.05, what="load afterwards")
        assert [a for a in load.answers if a.status != 200 or a.error] == []
        # Each read inside its wait: the page redraws these tables, so an element kept is stale later.
        mark = wait(browser, lambda d: (m := d.find_elements(By.CSS_SELECTOR, '#preemptions tr.preemption'))
                    and m[0].text, "the preemption")
        assert "preemption" in mark
        failed = wait(browser, lambda d: (c := d.find_elements(By.CSS_SELECTOR, "#counters")) and
                      int(c[0].find_elements(By.TAG_NAME, "td")[0].text) >= len(load.answers)
                      and c[0].get_attribute("data-failed"), "the router's counters with every request of the load")
        assert failed == "0"
        assert browser.find_elements(By.CSS_SELECTOR, ".chart line.preempt")  # marked on the charts
        assert page_errors(browser) == []
        screenshot(browser, "dashboard-service.png", tmp_path)
        # A page opened after the preemption still has every second of it: the router kept them.
        browser.get(f"{page}#/cluster")
        browser.get(f"{page}#/service/{handle.service_id}")
        kept = wait(browser, lambda d: (p := d.find_elements(By.CSS_SELECTOR, '.chart[data-chart="requests"] path.line'))
                    and (points := int(p[0].get_attribute("data-points"))) >= 5 and points,
                    "the requests' history, kept by the router")
        assert browser.find_elements(By.CSS_SELECTOR, '.chart[data-chart="requests"] line.preempt')
        rows = poll_until(lambda: (found := ServiceHistory().series(handle.service_id))
                          and sum(r.requests for r in found) >= len(load.answers) and found,
                          timeout_s=30, interval_s=0.2, what="every request of the load in the service's history")
        assert sum(r.failed for r in rows) == 0 and kept <= len(rows)
    finally:
        cluster.cancel_service(handle.service_id)


# Prints each new line written to the trigger file (the test's), at once.
ECHOER = textwrap.dedent("""
    import pathlib, sys, time
    trigger, said = pathlib.Path(sys.argv[1]), set()
    print("echoer ready", flush=True)
    while True:
        text = trigger.read_text() if trigger.exists() else ""
        for line in text.splitlines():
            if line not in said:
                said.add(line)
                print(line, flush=True)
        if "stop" in said:
            break
        time.sleep(0.01)
""")


def test_a_line_a_host_prints_is_on_the_page_within_a_second(cluster, page, browser, tmp_path):
    (tmp_path / "echoer.py").write_text(ECHOER)
    trigger = tmp_path / "trigger.txt"
    handle = cluster.submit(Workload(entrypoint="echoer.py", args=[str(trigger)], working_dir=str(tmp_path)))
    try:
        browser.get(f"{page}#/run/{handle.run_id}")
        wait(browser, lambda d: "echoer ready" in d.find_element(By.ID, "log").text, "the program's first line", 120)
        delays = []
        for i in range(5):
            marker = f"marker-{i}-{time.time()}"
            with trigger.open("a") as out:
                out.write(marker + "\n")
            written = time.monotonic()
            wait(browser, lambda d: marker in d.execute_script("return document.getElementById('log').textContent"),
                 f"{marker} on the page", 10)
            delays.append(time.monotonic() - written)
        print(f"a host's line on the page after {', '.join(f'{d:.2f}' for d in delays)} s")
        assert statistics.median(delays) < 1.0, delays
    finally:
        with trigger.open("a") as out:
            out.write("stop\n")
        handle.wait(timeout_s=60)
