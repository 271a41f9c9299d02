"""Finding a cluster by the name `up` recorded it under, or the only one there is."""

from __future__ import annotations

from podmanager.client.pinned import remote_clusters
from podmanager.core.errors import ClusterNotFoundError
from podmanager.core.spec import ClusterSpec
from podmanager.state import StateStore


def known_clusters(store: StateStore) -> list[str]:
    """Every cluster this machine knows, sorted: those recorded here, and those reached through
    their controller VM's channel (the pointers `up` and `connect` write)."""
    return sorted({r.name for r in store.list_clusters()} | set(remote_clusters()))


def stored_spec(name: str, store: StateStore) -> ClusterSpec:
    """The spec the last `up` of `name` stored; ClusterNotFoundError naming the known ones."""
    record = store.get_cluster(name)
    if record is None:
        known = ", ".join(known_clusters(store)) or "none"
        was_up = bool(store.events(name, kind="up"))
        raise ClusterNotFoundError(
            f"--cluster: no cluster named {name!r} (known: {known})"
            + ("; it was torn down: 'podmanager runs' and 'podmanager events' still show its history"
               if was_up else ""),
            hint="Create it with 'podmanager up -f SPEC', or pass -f SPEC to 'down' if its local state was lost.",
        )
    return record.spec


def only_cluster(store: StateStore) -> str:
    """The name of the one cluster there is (recorded here, or reached through its controller
    VM's channel); ClusterNotFoundError when there are none or several."""
    known = known_clusters(store)
    if len(known) != 1:
        listing = ", ".join(known) or "none"
        raise ClusterNotFoundError(
            f"--cluster: {'no cluster exists' if not known else 'several clusters exist'} (known: {listing})",
            hint="Name one with -c NAME, or create one with 'podmanager up -f SPEC'.",
        )
    return known[0]
