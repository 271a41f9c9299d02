"""podmanager's page of a cluster whose controller is a VM: served inside the channel's server
(the token required, as for every verb) and reached from the laptop through `PageProxy`, which
adds the token itself, so the browser never holds it. No Ray: the controller's records are a
store of this test's, served by the real page data."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest
from dashboard_records import CLUSTER, preempted_run

from podmanager.api.page_data import PageData
from podmanager.channel import identity
from podmanager.channel.server import ChannelServer
from podmanager.client import pinned
from podmanager.client.page_proxy import PageProxy
from podmanager.core.errors import SpecError
from podmanager.state import StateStore
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceStore


class PageApi:
    """The controller's API as far as the page needs it."""

    def __init__(self, store: StateStore):
        self.data = PageData(CLUSTER, store=store, runs=RunStore(store.path), services=ServiceStore(store.path),
                             status=lambda: None, controller="the controller VM")

    def page(self, cluster: str) -> PageData:
        if cluster != CLUSTER:
            raise SpecError(f"--cluster: no cluster named {cluster!r}")
        return self.data


@pytest.fixture
def proxy():
    store = StateStore()
    preempted_run(store=store)
    made = identity.load_or_create(CLUSTER, identity.controller_address(simulated=True))
    with ChannelServer(PageApi(store), made) as server:
        credentials = pinned.install(CLUSTER, pinned.ControllerAddress(host=server.host, port=server.port),
                                     made.cert_pem(), made.token())
        with PageProxy(credentials, ray_url="http://127.0.0.1:8265/") as started:
            yield started, server, made


def get(url: str, **headers: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


def test_the_page_its_replies_and_metrics_come_through_the_proxy(proxy):
    page, _, made = proxy
    bodies = []
    status, kind, body = get(page.url)  # redirected to the cluster's page
    assert status == 200 and kind.startswith("text/html") and "app.js" in body
    status, _, body = get(f"{page.url}{CLUSTER}/api/runs")
    assert status == 200 and [r["run_id"] for r in json.loads(body)["runs"]] == ["r1"]
    status, _, body = get(f"{page.url}{CLUSTER}/api/run/r1")
    assert status == 200 and [a["attempt"] for a in json.loads(body)["timeline"]["attempts"]] == [1, 2]
    status, kind, body = get(f"{page.url}metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    assert f'podmanager_incidents_total{{cluster="{CLUSTER}",kind="preemption"}} 1' in body
    bodies.append(body)
    status, _, body = get(f"{page.url}{CLUSTER}/api/run/nope")
    assert status == 400 and "no run 'nope'" in json.loads(body)["message"]
    for path in ("", "app.js", "timeline.js", "api/cluster", "api/events"):
        bodies.append(get(f"{page.url}{CLUSTER}/{path}")[2])
    assert not any(made.token() in b for b in bodies)  # the browser never sees the token
    status, _, body = get(f"{page.url}_local/ray")  # answered by the proxy: its own forward of the Ray dashboard
    assert status == 200 and json.loads(body) == {"url": "http://127.0.0.1:8265/"}


def test_the_controller_refuses_the_page_without_the_token(proxy):
    _, server, made = proxy
    context = ssl.create_default_context(cadata=made.cert_pem())
    context.check_hostname = False
    url = f"https://{server.host}:{server.port}/v1/page/{CLUSTER}/api/runs"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, context=context, timeout=30)
    assert refused.value.code == 401
    asked = urllib.request.Request(url, headers={"Authorization": f"Bearer {made.token()}"})
    with urllib.request.urlopen(asked, context=context, timeout=30) as reply:
        assert reply.status == 200


def test_the_proxy_answers_only_as_its_own_address(proxy):
    page, _, _ = proxy
    status, _, body = get(f"{page.url}{CLUSTER}/api/runs", Host=f"attacker.example:{page.port}")
    assert status == 421 and "answers only as 127.0.0.1" in body
