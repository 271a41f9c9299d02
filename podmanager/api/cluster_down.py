"""`down` however the cluster is known: its spec file, its local record, or its label."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podmanager.api.cluster import Cluster, resolve_cluster
from podmanager.cluster.cluster_runtime import EventCallback
from podmanager.cluster.teardown import LabelDownReport, down_by_label
from podmanager.core.errors import StateStoreError
from podmanager.core.spec import ClusterSpec
from podmanager.state import StateStore


@dataclass(frozen=True)
class DownReport:
    """What `down` did: the cluster it tore down, or (its local state lost) where it searched."""

    name: str
    by_label: LabelDownReport | None = None  # set when the cluster was found by label
    store_error: StateStoreError | None = None  # why the state store could not be used (so: by label)

    @property
    def nothing_found(self) -> bool:
        return self.by_label is not None and not self.by_label.deleted_in and not self.by_label.local_processes


def down(name: str | None = None, *, spec_file: str | Path | None = None, dry_run: bool = False,
         project: str | None = None, zones: list[str] | None = None, on_event: EventCallback | None = None,
         store: StateStore | None = None) -> DownReport:
    """Tear a cluster down, however it is known: by its spec file, by the local record of its
    name, or — the record lost — by its label in the cloud (every simulated project, or the
    Google Cloud `project`) and its processes on this machine by their owner tag. Safe to
    repeat: nothing left is not an error. A missing or damaged state store never stops it:
    it then finds the cluster by label, as when the record is lost."""
    from podmanager.client.remote import down_remote, is_remote
    from podmanager.client.remote_up_down import open_spec

    remote = open_spec(spec_file, dry_run=dry_run) if spec_file is not None else None
    if remote is not None or (name is not None and is_remote(name)):
        down_remote(remote.name if remote is not None else name, on_event=on_event,  # type: ignore[arg-type]
                    spec=remote.spec if remote is not None else None)
        return DownReport(remote.name if remote is not None else name)  # type: ignore[arg-type]
    store_error = None
    if store is None:
        try:
            store = StateStore()
        except StateStoreError as error:
            store_error, store = error, StateStore.in_memory()
    if spec_file is not None:
        target = Cluster.from_yaml(spec_file, dry_run=dry_run, store=store)
        if store_error is not None:
            return _down_by_spec_label(target.spec, store_error)
    elif name is not None and (store_error is not None or store.get_cluster(name) is None):
        on_gcp = project is not None and not dry_run
        return DownReport(name, down_by_label(name, dry_run=not on_gcp, project=project, zones=zones, store=store),
                          store_error)
    elif store_error is not None:
        raise StateStoreError(store_error.message, hint="Name the cluster: 'podmanager down -c NAME' finds it "
                              f"without the store. {store_error.hint}")
    else:
        target = resolve_cluster(name, store=store)
    try:
        target.down(on_event=on_event)
    except StateStoreError as error:  # damaged while tearing down: finish the job by label
        return _down_by_spec_label(target.spec, error)
    return DownReport(target.name)


def _down_by_spec_label(spec: ClusterSpec, error: StateStoreError) -> DownReport:
    """`down` of a known spec without the state store: by label in its project and zones."""
    return DownReport(spec.name, down_by_label(spec.name, dry_run=spec.simulated, project=spec.project,
                                               zones=spec.zones, store=StateStore.in_memory()), error)
