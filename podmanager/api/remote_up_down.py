"""`up` and `down` of a cluster whose controller is a VM, from the user's machine: the controller
VM made (`controller_machine.py`) and the spec handed to it, or the cluster torn down there and
the VM removed from here."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import yaml

from podmanager.api.remote import (
    EventCallback,
    RemoteCluster,
    RemotePlan,
    as_status,
    stored_spec,
)
from podmanager.api.status import ClusterStatus
from podmanager.channel import pinned, records
from podmanager.channel.errors import ChannelCredentialError, ChannelError, RemoteError
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec, load_spec
from podmanager.state import Event


def say_here(cluster: str, on_event: EventCallback | None) -> Callable[[EventKind, str], None]:
    """Events of what this machine does itself (the controller VM): shown as the controller's are."""
    def say(kind: EventKind, message: str) -> None:
        if on_event is not None:
            on_event(Event(id=0, cluster=cluster, time=time.time(), kind=kind.value, slice_index=None,
                           message=message, data={}))
    return say


class RemoteSpec:
    """A spec whose controller is a VM, before and for its `up` (`Cluster.up`'s signature)."""

    def __init__(self, spec: ClusterSpec, raw: dict[str, object]):
        self.spec = spec
        self.raw = raw  # the spec's fields as written (`backend` set for a dry run), sent to the controller
        self.name = spec.name

    def up(self, *, timeout_s: float = 1800.0, force: bool = False, on_plan: Callable[[RemotePlan], None] | None = None,
           on_event: EventCallback | None = None, delete_on_failure: bool = False) -> ClusterStatus:
        """The controller VM made (or found) and serving, then `up` of the spec run there."""
        from podmanager.api.controller_machine import ControllerMachine

        # The pointer first: an `up` interrupted from here on is finished by `up` or removed by `down`.
        pinned.save_spec(self.name, json.dumps(self.raw))
        ControllerMachine(self.spec, say_here(self.name, on_event)).bring_up(timeout_s=timeout_s)
        with RemoteCluster(self.name) as remote:
            job = remote.client.start_up(records.UpRequest(
                cluster=self.name, spec_yaml=yaml.safe_dump(self.raw), timeout_s=timeout_s, force=force,
                delete_on_failure=delete_on_failure))
            done = remote.follow_job(job, on_event, on_plan=on_plan, after_event=remote.last_event_id_before(job))
        assert done.status is not None
        return as_status(done.status)


def open_spec(path: str | Path, *, dry_run: bool = False) -> RemoteSpec | None:
    """The spec at `path` if its controller is a VM (`controller.local: false`), else None."""
    spec = load_spec(path, dry_run=dry_run)
    if spec.controller.local:
        return None
    raw = yaml.safe_load(Path(path).read_text())
    if dry_run:
        raw = {**raw, "backend": spec.backend.value}
    return RemoteSpec(spec, raw)


def down_remote(name: str, *, timeout_s: float = 600.0, on_event: EventCallback | None = None,
                spec: ClusterSpec | None = None) -> None:
    """`down` of a cluster whose controller is a VM: the controller tears the cluster down (runs
    cancelled, slices deleted), then this machine deletes the controller VM, its rule and the
    channel's secret. A controller that cannot be reached is no reason to keep anything: the
    slices are then found by their label from here."""
    from podmanager.api.controller_machine import ControllerMachine
    from podmanager.cluster.teardown import down_by_label

    spec = spec or stored_spec(name)
    say = say_here(name, on_event)
    try:
        with RemoteCluster(name) as remote:
            job = remote.client.start_down(records.DownRequest(cluster=name, timeout_s=timeout_s))
            remote.follow_job(job, on_event, after_event=remote.last_event_id_before(job))
    except (ChannelError, ChannelCredentialError) as unreachable:
        say(EventKind.WARNING, f"the controller cannot be reached ({unreachable.message}); deleting the slices by "
                               "their label from here")
        # The VM first: a controller coming back from a reboot would bring the slices up again.
        ControllerMachine(spec, say).tear_down(timeout_s=timeout_s)
        down_by_label(name, dry_run=spec.simulated, project=spec.project, zones=spec.zones, timeout_s=timeout_s)
        return
    except RemoteError as refused:
        if "no cluster named" not in refused.message:  # a controller whose own up never ran: nothing to tear down
            raise
    ControllerMachine(spec, say).tear_down(timeout_s=timeout_s)
