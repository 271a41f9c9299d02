"""`up` of a cluster whose controller is a VM, from the user's machine: the controller VM made
(`controller_machine.py`), then the spec handed to it (`down` is `RemoteCluster.down`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import yaml

from podmanager.api.remote import (
    EventCallback,
    RemoteCluster,
    RemotePlan,
    as_status,
    say_here,
)
from podmanager.api.status import ClusterStatus
from podmanager.channel import pinned, records
from podmanager.core.spec import ClusterSpec, load_spec


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

        machine = ControllerMachine(self.spec, say_here(self.name, on_event))
        plan = machine.plan()  # a controller VM that differs is refused before anything changes, the pointer too
        # The pointer first: an `up` interrupted from here on is finished by `up` or removed by `down`.
        pinned.save_spec(self.name, json.dumps(self.raw))
        machine.bring_up(timeout_s=timeout_s, plan=plan)
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
