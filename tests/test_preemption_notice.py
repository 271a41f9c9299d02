"""The metadata-server notice, against a local HTTP server that answers like GCE's."""

import http.server
import threading

import pytest

from podmanager.hosts.notices import metadata_notice


@pytest.fixture
def metadata():
    values = {"preempted": "FALSE", "maintenance-event": "NONE"}
    seen_headers = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen_headers.append(self.headers.get("Metadata-Flavor"))
            key = self.path.rsplit("/", 1)[-1]
            body = values.get(key, "").encode()
            self.send_response(200 if key in values else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/computeMetadata/v1/instance/", values, seen_headers
    finally:
        server.shutdown()
        server.server_close()


def test_no_notice_then_preempted_then_maintenance(metadata):
    url, values, headers = metadata
    assert metadata_notice(url) is None
    values["preempted"] = "TRUE"
    assert metadata_notice(url) == "preempted"
    values["preempted"] = "FALSE"
    values["maintenance-event"] = "TERMINATE_ON_HOST_MAINTENANCE"
    assert metadata_notice(url) == "maintenance: TERMINATE_ON_HOST_MAINTENANCE"
    assert set(headers) == {"Google"}  # the metadata server refuses requests without it


def test_no_metadata_server_means_no_notice():
    assert metadata_notice("http://127.0.0.1:9/computeMetadata/v1/instance/", timeout_s=0.5) is None
