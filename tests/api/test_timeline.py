"""`podmanager timeline RUN --html FILE`: one file that draws the run's timeline with nothing
fetched (no src or href, the data inline), and a clear exit 2 with nothing written on bad input."""

from __future__ import annotations

import json
import re

from browser import chromium, page_errors
from dashboard_records import CLUSTER, checkpoints_of, preempted_run
from selenium.webdriver.common.by import By
from typer.testing import CliRunner

from podmanager.attempts.logs import RunFolder
from podmanager.cli import app
from podmanager.state.run_records import RunStore


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def embedded(text: str) -> dict:
    found = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>', text, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_the_file_holds_the_timeline_and_fetches_nothing(tmp_path):
    preempted_run()
    out = tmp_path / "r1.html"
    result = invoke("timeline", "r1", "--html", str(out), "-c", CLUSTER)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert not re.search(r"\b(src|href)\s*=", text)  # nothing loaded from anywhere: no script, style or link
    assert "default-src 'none'" in text  # and the browser is told so
    timeline = embedded(text)
    assert [a["attempt"] for a in timeline["attempts"]] == [1, 2]
    assert timeline["incidents"][0]["detect_s"] == 1.5 and timeline["incidents"][0]["recover_s"] == 14.0
    assert sum(b["seconds"] for b in timeline["buckets"]) == timeline["wall_s"] == 44.0


def test_a_closing_script_tag_in_the_data_cannot_end_its_element(tmp_path):
    run = preempted_run()
    run.result = run.result.model_copy(update={"message": "</script><script>alert(1)</script>"})
    RunStore().save(run)
    out = tmp_path / "r1.html"
    assert invoke("timeline", "r1", "--html", str(out), "-c", CLUSTER).exit_code == 0
    text = out.read_text()
    assert "<script>alert(1)" not in text
    assert embedded(text)["message"] == "</script><script>alert(1)</script>"


def test_an_unknown_run_or_folder_exits_2_and_writes_nothing(tmp_path):
    preempted_run()
    out = tmp_path / "x.html"
    unknown = invoke("timeline", "nope", "--html", str(out), "-c", CLUSTER)
    assert unknown.exit_code == 2 and "no run 'nope'" in unknown.output and not out.exists()
    missing = invoke("timeline", "r1", "--html", str(tmp_path / "no" / "x.html"), "-c", CLUSTER)
    assert missing.exit_code == 2 and "--html" in missing.output
    folder = invoke("timeline", "r1", "--html", str(tmp_path), "-c", CLUSTER)
    assert folder.exit_code == 2 and "is a folder" in folder.output


def test_the_file_draws_in_a_browser_with_no_network(tmp_path):
    preempted_run()
    series = RunFolder(CLUSTER, "r1")  # the metrics the supervisor kept while the run ran
    for step in range(0, 21):
        series.append_progress(0 if step <= 10 else 1, step, 1000.0 + step, 2.0 / (step + 1), {"accuracy": step / 20})
    out = tmp_path / "r1.html"
    assert invoke("timeline", "r1", "--html", str(out), "-c", CLUSTER).exit_code == 0
    with chromium() as driver:
        driver.get(out.as_uri())
        bars = driver.find_elements(By.CSS_SELECTOR, "svg g.attempt")
        assert [b.get_attribute("data-attempt") for b in bars] == ["1", "2"]
        seconds = [float(r.get_attribute("data-seconds")) for r in driver.find_elements(By.CSS_SELECTOR, "tr[data-bucket]")]
        assert sum(seconds) == 44.0
        assert driver.find_element(By.CSS_SELECTOR, "tr.incident-row").get_attribute("data-recover-s") == "14"
        charts = driver.find_elements(By.CSS_SELECTOR, "svg.metric")
        assert [c.get_attribute("data-metric") for c in charts] == ["loss", "accuracy"]
        assert len(charts[0].find_elements(By.CSS_SELECTOR, "line.attempt-start")) == 1  # attempt 1 begins
        assert page_errors(driver) == []


def test_each_checkpoint_is_marked_on_the_files_timeline_at_its_time_and_step(tmp_path):
    preempted_run()
    saved = checkpoints_of()
    out = tmp_path / "r1.html"
    assert invoke("timeline", "r1", "--html", str(out), "-c", CLUSTER).exit_code == 0
    assert [(m["step"], m["time"]) for m in embedded(out.read_text())["marks"] if m["kind"] == "checkpoint"] == saved
    with chromium() as driver:
        driver.get(out.as_uri())
        marks = driver.find_elements(By.CSS_SELECTOR, 'svg path.mark[data-kind="checkpoint"]')
        assert [(int(m.get_attribute("data-step")), float(m.get_attribute("data-time"))) for m in marks] == saved
        # drawn in time order along the axis, each at its own place
        lefts = [m.rect["x"] for m in marks]
        assert lefts == sorted(lefts) and len(set(lefts)) == 3
        rows = driver.find_elements(By.CSS_SELECTOR, '.marks tr[data-kind="checkpoint"]')
        assert [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows] == ["6", "12", "18"]
        assert page_errors(driver) == []
