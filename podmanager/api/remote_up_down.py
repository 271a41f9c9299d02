"""A cluster whose controller is a VM, known by its spec (`podmanager up -f`, `Cluster.from_yaml`
and `Cluster.from_dict` of such a spec): `up` makes the controller VM (`controller_machine.py`)
and hands it the spec; `down` and every other verb are `RemoteCluster`'s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import yaml

from podmanager.api.remote import (
    EventCallback,
    RemoteCluster,
    RemotePlan,
    as_status,
    down_remote,
    remote_options,
    say_here,
)
from podmanager.api.status import ClusterStatus
from podmanager.channel import pinned, records
from podmanager.channel.errors import ChannelError
from podmanager.channel.patience import patiently
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec, load_spec


class RemoteSpec(RemoteCluster):
    """The user's verbs (`Cluster`'s signatures) on a cluster whose controller is a VM, from its
    spec: nothing of the controller (no Ray head, no state store) ever runs on this machine."""

    def __init__(self, spec: ClusterSpec, raw: dict[str, Any], *, down_on_exit: bool = False,
                 on_event: EventCallback | None = None):
        super().__init__(spec.name, down_on_exit=down_on_exit, on_event=on_event)
        self._spec = spec
        self.raw = raw  # the spec's fields as written (`backend` set for a dry run), sent to the controller

    @property
    def spec(self) -> ClusterSpec:
        return self._spec

    def up(self, *, timeout_s: float = 1800.0, force: bool = False, on_plan: Callable[[RemotePlan], None] | None = None,
           on_event: EventCallback | None = None, delete_on_failure: bool = False) -> ClusterStatus:
        """The controller VM made (or found) and serving, then `up` of the spec run there."""
        from podmanager.api.controller_machine import ControllerMachine
        from podmanager.cluster.controller_preflight import before_controller_vm

        on_event = self._told(on_event)
        say = say_here(self.name, on_event)
        self._spec, self.raw = before_controller_vm(self.spec, self.raw, say)  # APIs, permissions, accounts
        machine = ControllerMachine(self.spec, say)
        plan = machine.plan()  # a controller VM that differs is refused before anything changes, the pointer too
        # The pointer first: an `up` interrupted from here on is finished by `up` or removed by `down`.
        pinned.save_spec(self.name, json.dumps(self.raw))
        machine.bring_up(timeout_s=timeout_s, plan=plan)
        self.close()  # the controller's certificate was pinned again: the channel opens with it
        # A controller VM started again still shows its last boot's `serving` until its daemon
        # writes anew: its channel is waited for before the spec is sent.
        patiently(lambda: _answers(self), lambda why: say(EventKind.CONTROLLER_BOOT, why), wait_s=timeout_s)
        job = self.client.start_up(records.UpRequest(
            cluster=self.name, spec_yaml=yaml.safe_dump(self.raw), timeout_s=timeout_s, force=force,
            delete_on_failure=delete_on_failure))
        done = self.follow_job(job, on_event, on_plan=on_plan, after_event=self.last_event_id_before(job))
        assert done.status is not None
        return as_status(done.status)

    def down(self, *, timeout_s: float = 600.0, on_event: EventCallback | None = None) -> None:
        """As `RemoteCluster.down`, by this spec (also of an `up` cut short before the
        controller served)."""
        self.close()
        down_remote(self.name, timeout_s=timeout_s, on_event=self._told(on_event), spec=self.spec)


def _answers(remote: RemoteCluster) -> bool:
    """Whether the controller answers its channel (a refusal is an answer)."""
    try:
        remote.client.events(remote.name)
    except ChannelError:
        raise
    except PodmanagerError:
        pass
    return True


def open_spec(path: str | Path, *, dry_run: bool = False, **options: Any) -> RemoteSpec | None:
    """The spec at `path` if its controller is a VM (`controller.local: false`), else None."""
    spec = load_spec(path, dry_run=dry_run)
    if spec.controller.local:
        return None
    return remote_spec(spec, yaml.safe_load(Path(path).read_text()), dry_run=dry_run, **options)


def remote_spec(spec: ClusterSpec, raw: dict[str, Any], *, dry_run: bool, **options: Any) -> RemoteSpec:
    """The cluster of a spec whose controller is a VM; `raw` its fields as the user wrote them.
    `options`: `Cluster`'s keyword arguments (`remote_options` says which apply)."""
    sent = {**raw, "backend": spec.backend.value} if dry_run else dict(raw)
    return RemoteSpec(spec, sent, **remote_options(spec.name, options))
