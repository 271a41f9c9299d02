"""The metadata-server notice, against a local HTTP server that answers like GCE's."""

import http.server
import json
import threading
from datetime import datetime, timezone

import pytest

from podmanager.vm.notices import metadata_notice, parse_upcoming_maintenance


@pytest.fixture
def metadata():
    values = {"preempted": "FALSE", "upcoming-maintenance": "{}"}
    codes: dict[str, int] = {}  # key -> a status other than 200
    seen_headers = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen_headers.append(self.headers.get("Metadata-Flavor"))
            key = self.path.partition("?")[0].rsplit("/", 1)[-1]
            body = values.get(key, "").encode()
            self.send_response(codes.get(key, 200) if key in values else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/computeMetadata/v1/instance/", values, codes, seen_headers
    finally:
        server.shutdown()
        server.server_close()


def test_no_notice_then_preempted_then_upcoming_maintenance(metadata):
    url, values, _, headers = metadata
    assert metadata_notice(url) is None
    values["preempted"] = "TRUE"
    assert metadata_notice(url) == "preempted"
    values["preempted"] = "FALSE"
    values["upcoming-maintenance"] = json.dumps({  # the shape GCE's page shows for a VM
        "can_reschedule": "true", "maintenance_status": "PENDING", "type": "SCHEDULED",
        "window_start_time": "2024-12-01T19:00:01Z", "window_end_time": "2024-12-01T21:00:01Z"})
    window = datetime(2024, 12, 1, 19, 0, 1, tzinfo=timezone.utc).timestamp()
    assert metadata_notice(url, now=window - 7 * 86400) is None  # a week ahead: not yet
    notice = metadata_notice(url, now=window - 60)
    assert notice is not None and notice.startswith("maintenance: SCHEDULED PENDING")
    values["upcoming-maintenance"] = json.dumps({"maintenanceStatus": "ONGOING"})  # the API's spelling
    assert metadata_notice(url, now=window - 7 * 86400) is not None  # under way: at once
    values["maintenance-event"] = "TERMINATE_ON_HOST_MAINTENANCE"
    values["upcoming-maintenance"] = "{}"
    assert metadata_notice(url) is None  # a Compute Engine key a TPU VM does not fill: not read
    assert set(headers) == {"Google"}  # the metadata server refuses requests without it


@pytest.mark.parametrize("answer, code", [
    ("{}", 200), ("{ }", 200), ("NONE", 200), ("", 200),
    ('{ "error": "no notifications have been received yet, try again later" }', 503),
    ('{ "error": "no notifications have been received yet, try again later" }', 200),
    ("not found", 404),
])
def test_every_way_of_saying_nothing_is_announced_is_no_notice(metadata, answer, code):
    url, values, codes, _ = metadata
    values["upcoming-maintenance"], codes["upcoming-maintenance"] = answer, code
    assert metadata_notice(url) is None


def test_an_announcement_without_a_readable_window_fires_at_once():
    announced = parse_upcoming_maintenance('{"type": "UNSCHEDULED", "window_start_time": "soon"}')
    assert announced is not None and announced.window_start is None and announced.due(now=0.0)


def test_no_metadata_server_means_no_notice():
    assert metadata_notice("http://127.0.0.1:9/computeMetadata/v1/instance/", timeout_s=0.5) is None
