"""What the supervisor needs from a cluster, and nothing more: a small interface that
`operations.cluster_runtime.ClusterRuntime` implements and unit tests fake.
"""

from __future__ import annotations

from typing import Any, Protocol

from podmanager.cloud.base import Node, TpuCloud
from podmanager.core.clock import Clock
from podmanager.core.events import EventKind
from podmanager.core.records import HostSlot, SliceRef
from podmanager.core.spec import ClusterSpec
from podmanager.serving.router import ReplicaLoss


class SupervisedCluster(Protocol):
    name: str
    spec: ClusterSpec
    clock: Clock

    @property
    def cloud(self) -> TpuCloud: ...

    def zone_nodes(self, zone: str, slot: int) -> list[Node]:
        """The zone's nodes as listed in this health slot (floor(now / health.interval_s)):
        listed once per slot for the whole cluster, however many runs' supervisors ask."""
        ...

    def record(self, kind: EventKind, message: str, slice_index: int | None = None, **data: Any) -> Any:
        """Append an event to the cluster's durable event log."""
        ...

    def agents(self, slice_indexes: list[int]) -> list[tuple[HostSlot, Any]]:
        """Every host of these slices with its agent handle, ordered by slice then worker;
        raises PodmanagerError naming the hosts without a healthy agent."""
        ...

    def slice_locations(self, slice_indexes: list[int]) -> list[SliceRef]:
        """Where each of these slices is now (zone, node name)."""
        ...

    def lost_hosts(self) -> set[tuple[int, int]]:
        """(slice, worker) of hosts whose node is dead or unreachable right now."""
        ...

    def heal(self) -> None:
        """Delete dead slices, create what is missing and wait until every host has a healthy agent."""
        ...

    def delete_dead_slices(self) -> list[int]:
        """Delete preempted or terminated slices without replacing them; their indexes."""
        ...

    def delete_slices(self, indexes: list[int], *, reason: str, since: float | None = None) -> None:
        """Delete these slices now (the first half of replacing them), except any made again
        after `since` (the incident) and READY."""
        ...

    def restore_slices(self, phases: dict[str, float]) -> None:
        """Create every slice of the spec that is missing and wait for all hosts' agents (the
        second half of replacing); `phases` gets the seconds of `create` and `join`."""
        ...

    def replica_lost(self, service_id: str, loss: ReplicaLoss) -> None:
        """Tell the service's router how a replica's attempt ended (nothing if it is gone)."""
        ...

    def dropped_slices(self, indexes: list[int]) -> list[int]:
        """Those of these slices that the cluster's spec, as the last `up` stored it, no longer
        has: an edited spec took them, and no recovery may create them again."""
        ...
