"""podmanager's page for a cluster, opened on this machine (`podmanager dashboard`): served here
when this machine is the cluster's controller, else relayed from the controller VM over the
channel (`client/page_proxy.py`). Either way a local address, 127.0.0.1 only."""

from __future__ import annotations

from podmanager.api.page_data import PageData
from podmanager.channel.cluster_status import ClusterStatus
from podmanager.channel.loop_thread import LoopServer
from podmanager.state import StateStore
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceStore


def local_page(name: str, *, store: StateStore | None = None) -> PageData:
    """The page's data of a cluster whose records are on this machine (up, or down: its history)."""
    from podmanager.api.cluster import Cluster

    store = store or StateStore()
    cluster: list[Cluster] = []

    def status() -> ClusterStatus:
        if not cluster:
            found = Cluster.from_name(name, store=store)  # a cluster that is down: its clear error
            assert isinstance(found, Cluster)
            cluster.append(found)
        return cluster[0].status()

    return PageData(name, store=store, runs=RunStore(store.path), services=ServiceStore(store.path), status=status)


def kept_page(name: str) -> PageData | None:
    """The page's data of a deleted cluster from the copy of its records `down` kept here
    (`client/kept_history.py`): no status (the cluster is gone), said on every view; None without one."""
    from podmanager.client.kept_history import kept

    found = kept(name)
    if found is None:
        return None
    return PageData(name, store=StateStore(found.database, folder=found.folder), runs=RunStore(found.database),
                    services=ServiceStore(found.database), status=lambda: None, controller="deleted with the cluster",
                    ray_link=False, runs_root=found.runs_root, history=found.note())


class _Both:
    """The page's proxy and the Ray dashboard's forward, stopped together."""

    def __init__(self, proxy: "LoopServer", ray: "LoopServer"):
        self.proxy, self.ray = proxy, ray
        self.url: str = proxy.url  # type: ignore[attr-defined]
        self.port = proxy.port

    def stop(self) -> None:
        try:
            self.proxy.stop()
        finally:
            self.ray.stop()


def open_page(name: str, *, port: int = 0) -> "LoopServer | _Both":
    """The page of cluster `name` on 127.0.0.1:`port` (0: any free one), started; its `url`
    says where; the caller stops it. A cluster known here only by its history (after `down`)
    is shown from its records: this machine's store (a local controller's), or the copy `down`
    kept of a controller VM's (`client/kept_history.py`)."""
    from podmanager.client.remote import is_remote

    if is_remote(name):
        from podmanager.channel import records
        from podmanager.client import pinned
        from podmanager.client.channel_client import ChannelClient
        from podmanager.client.forward import Forward
        from podmanager.client.page_proxy import PageProxy

        credentials = pinned.load(name)
        with ChannelClient(credentials) as client:
            client.status(name)  # a refused token or an unreachable controller is said now, not in the browser
        ray = Forward(credentials, records.DASHBOARD)  # the Ray dashboard, one link away on the page
        ray.start()
        try:
            proxy = PageProxy(credentials, port=port, ray_url=f"http://127.0.0.1:{ray.port}/")
            proxy.start()
        except BaseException:
            ray.stop()
            raise
        return _Both(proxy, ray)
    from podmanager.channel.page_server import LocalPageServer

    store = StateStore()
    # A cluster whose controller was a VM, deleted by `down`: the copy of its records kept here.
    page = (kept_page(name) if store.get_cluster(name) is None else None) or local_page(name, store=store)
    page.cluster()  # a name that never had a cluster: its clear error (exit 2), before any port opens
    server = LocalPageServer(name, lambda cluster: _only(name, cluster, page), port=port)
    server.start()
    return server


def _only(name: str, asked: str, page: PageData) -> PageData:
    from podmanager.core.errors import SpecError

    if asked != name:
        raise SpecError(f"this page serves cluster {name}, not {asked!r}")
    return page
