"""What `up` shows while hosts join: each host's boot stage, read from its guest attributes.

A TPU VM's startup script reports installing, token, joining, joined or an error (with the
last lines of what failed) as guest attributes (`vm/boot_status.py`); this reads them
through the Cloud TPU API while `up` waits for the hosts' agents, records each change as an
event, and ends the wait at once when a host reports an error, naming the host and the error.
"""

from __future__ import annotations

from typing import Any, Callable

from podmanager.cloud.base import Node, NodeState, TpuCloud
from podmanager.core.cadence import Cadence
from podmanager.core.clock import Clock
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.vm.boot_status import NAMESPACE, BootStatus


def boot_statuses(cloud: TpuCloud, node: Node) -> dict[int, BootStatus]:
    """worker -> its boot as it reported it (workers that said nothing yet are absent)."""
    by_worker: dict[int, dict[str, str]] = {}
    for attribute in cloud.guest_attributes(node.zone, node.name, f"{NAMESPACE}/"):
        by_worker.setdefault(attribute.worker, {})[attribute.key] = attribute.value
    return {worker: BootStatus.from_attributes(values) for worker, values in by_worker.items()}


def ready_boots(cloud: TpuCloud, nodes: list[Node]) -> dict[int, dict[int, BootStatus]]:
    """slice index -> worker -> its boot as it reported it, for the READY nodes (one
    GetGuestAttributes each): what `up` judges them by before it plans."""
    return {node.slice_index: boot_statuses(cloud, node) for node in nodes
            if node.state is NodeState.READY and node.slice_index is not None}


def failed_boots(boots: dict[int, dict[int, BootStatus]]) -> dict[int, str]:
    """slice index -> what its first failed host reported, for READY slices (`ready_boots`) with
    a host whose boot failed: its startup script ran once, at boot, so only a new slice boots it
    again."""
    failed: dict[int, str] = {}
    for index, statuses in boots.items():
        errors = [(worker, status) for worker, status in sorted(statuses.items()) if status.failed]
        if errors:
            worker, status = errors[0]
            failed[index] = f"worker {worker} failed to boot: " + (
                status.detail.splitlines()[0] if status.detail else "no detail reported")
    return failed


class BootWatch:
    """`check()` for `ClusterHosts.wait_for_hosts`: one GetGuestAttributes per node at most
    every `interval_s`."""

    def __init__(self, cloud: TpuCloud, nodes: list[Node], record: Callable[..., Any], clock: Clock, *,
                 simulated: bool):
        self.cloud = cloud
        self.nodes = nodes
        self.record = record
        self.clock = clock
        self.interval_s = Cadence.for_mode(simulated=simulated).boot_poll_s
        self._last = -float("inf")
        self._said: dict[tuple[str, int], str] = {}

    def __call__(self) -> None:
        if self.clock.now() - self._last < self.interval_s:
            return
        self._last = self.clock.now()
        for node in self.nodes:
            for worker, status in sorted(boot_statuses(self.cloud, node).items()):
                self._heard(node, worker, status)

    def _heard(self, node: Node, worker: int, status: BootStatus) -> None:
        host = f"slice {node.slice_index} worker {worker} ({node.name})"
        if status.failed:
            self.record(EventKind.HOST_BOOT_FAILED, f"{host}: {status.detail.splitlines()[0] if status.detail else 'error'}",
                        node=node.name, worker=worker, detail=status.detail)
            raise PodmanagerError(
                f"{host} failed to boot: {status.detail or 'no detail reported'}",
                hint="Fix the cause (the spec's boot: section, the token secret's access), then run 'podmanager up' "
                     "again, or 'podmanager down' to delete the slices.")
        if status.stage and self._said.get((node.name, worker)) != status.stage:
            self._said[(node.name, worker)] = status.stage
            self.record(EventKind.HOST_BOOT, f"{host}: {status.stage}", node=node.name, worker=worker, stage=status.stage)
