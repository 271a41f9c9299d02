"""A cluster whose controller is a VM, known by its spec (`podmanager up -f`, `Cluster.from_yaml`
and `Cluster.from_dict` of such a spec): `RemoteCluster`'s verbs, with this spec rather than
the one kept with this machine's pointer (there may be none yet: its `up` makes the VM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from podmanager.client.remote import (
    EventCallback,
    RemoteCluster,
    down_remote,
    remote_options,
)
from podmanager.core.spec import ClusterSpec, load_spec


class RemoteSpec(RemoteCluster):
    """The user's verbs (`Cluster`'s signatures) on a cluster whose controller is a VM, from its
    spec: nothing of the controller (no Ray head, no state store) ever runs on this machine."""

    def __init__(self, spec: ClusterSpec, raw: dict[str, Any], *, down_on_exit: bool = False,
                 on_event: EventCallback | None = None):
        super().__init__(spec.name, down_on_exit=down_on_exit, on_event=on_event)
        self._spec = spec
        self._raw = raw

    @property
    def spec(self) -> ClusterSpec:
        return self._spec

    @property
    def raw(self) -> dict[str, Any]:
        """The spec's fields as written (`backend` set for a dry run), sent to the controller."""
        return self._raw

    def _use_spec(self, spec: ClusterSpec, raw: dict[str, Any]) -> None:
        self._spec, self._raw = spec, raw

    def down(self, *, timeout_s: float = 600.0, on_event: EventCallback | None = None) -> None:
        """As `RemoteCluster.down`, by this spec (also of an `up` cut short before the
        controller served)."""
        self.close()
        down_remote(self.name, timeout_s=timeout_s, on_event=self._told(on_event), spec=self.spec)


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
