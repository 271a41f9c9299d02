"""What a cluster leaves behind: its event log and its runs, readable after `down` too.

A name that never had a cluster, an event or a run is an error (exit 2), as for `status`:
a typo in `-c` must not look like an empty history.
"""

from __future__ import annotations

import time
from typing import Any

from podmanager.channel.run_status import RunStatus
from podmanager.core.errors import ClusterNotFoundError
from podmanager.state import Event, StateStore
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceStore


def cluster_events(name: str, *, store: StateStore | None = None) -> list[Event]:
    """Every event of the cluster, oldest first."""
    from podmanager.client.remote import RemoteCluster, is_remote

    if is_remote(name):
        with RemoteCluster(name) as remote:
            return remote.events()
    store = store or StateStore()
    events = store.events(name)
    if not events and store.get_cluster(name) is None:
        raise _unknown(name, store)
    return events


def run_history(name: str, *, store: StateStore | None = None, runs: RunStore | None = None) -> list[RunStatus]:
    """Every run of the cluster, oldest first, whether the cluster is still up or not."""
    from podmanager.client.remote import RemoteCluster, is_remote

    if is_remote(name):
        with RemoteCluster(name) as remote:
            return remote.runs()
    store = store or StateStore()
    found = (runs or RunStore()).list(name)
    if not found and store.get_cluster(name) is None:
        raise _unknown(name, store)
    return [RunStatus.of(r) for r in found]


def _unknown(name: str, store: StateStore) -> ClusterNotFoundError:
    from podmanager.api.cluster_names import known_clusters

    known = ", ".join(known_clusters(store)) or "none"
    return ClusterNotFoundError(f"--cluster: no cluster named {name!r} (known: {known})",
                                hint="Check the name; 'podmanager up -f SPEC' creates one.")


def service_history(name: str, *, services: ServiceStore | None = None,
                    runs: RunStore | None = None) -> list[dict[str, Any]]:
    """Every service of the cluster as `runs` lists it (kind: service), oldest first."""
    from podmanager.api.service_handle import summarize
    from podmanager.client.remote import RemoteCluster, is_remote

    if is_remote(name):
        with RemoteCluster(name) as remote:
            return [s.model_dump(mode="json") for s in remote.service_summaries()]

    services = services or ServiceStore()
    runs = runs or RunStore(services.path)
    now = time.time()
    return [summarize(service, runs, now) for service in services.list(name)]
