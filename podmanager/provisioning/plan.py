"""Pure planning: (desired slices, observed cloud state) -> the actions that close the gap.

`up`, `down` and recovery all go through `plan`, so every path is idempotent: creating
what exists or deleting what is gone never happens, and running a pass again after a
crash finishes the job. One kind of change per slice per pass: a slice whose node must
go is deleted in this pass and created in a later one, after the delete finished.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Mapping, Union

from podmanager.cloud.base import (
    BOOT_LABEL,
    BOUNDED_WAIT_S,
    CLUSTER_LABEL,
    SLICE_LABEL,
    Decision,
    Node,
    NodeNetwork,
    NodeRequest,
    NodeState,
    QueuedResource,
    condition,
    decide,
    decide_queued,
)
from podmanager.core.network_names import cluster_tag
from podmanager.core.spec import ClusterSpec, NetworkSpec, SliceSpec


@dataclass(frozen=True)
class DesiredSlice:
    index: int
    node_name: str
    request: NodeRequest
    queued: bool
    zones: tuple[str, ...]
    queue_wait_s: float | None = None  # queued only: how long to wait for capacity in one zone


@dataclass(frozen=True)
class Observed:
    nodes: tuple[Node, ...] = ()
    queued: tuple[QueuedResource, ...] = ()


@dataclass(frozen=True)
class CreateSlice:
    slice: DesiredSlice
    zone: str


@dataclass(frozen=True)
class DeleteNode:
    name: str
    zone: str
    reason: str
    slice_index: int | None = None


@dataclass(frozen=True)
class DeleteQueuedResource:
    name: str
    zone: str
    reason: str
    slice_index: int | None = None


@dataclass(frozen=True)
class NoZoneLeft:
    """Every zone in the list refused this slice for lack of capacity."""

    slice: DesiredSlice
    tried: tuple[str, ...] = field(default=())


Action = Union[CreateSlice, DeleteNode, DeleteQueuedResource, NoZoneLeft]

def node_name(cluster: str, index: int) -> str:
    """Deterministic, so a second `up` finds what the first one made."""
    return f"{cluster}-s{index}"


def node_network(network: NetworkSpec | None, cluster: str) -> NodeNetwork:
    """The spec's `network:` as the node request carries it: always sent whole, so every node
    gets a service account (an empty email is the API's word for the project's default compute
    account), the spec's scopes (by default cloud-platform) and the cluster's tag."""
    network = network or NetworkSpec()
    tags = tuple(dict.fromkeys([*network.tags, cluster_tag(cluster)]))  # the spec's first, each once
    return NodeNetwork(network=network.network or "", subnetwork=network.subnetwork or "",
                       enable_external_ips=network.enable_external_ips,
                       service_account=network.service_account or "", scopes=tuple(network.scopes), tags=tags)


def boot_settings(spec: ClusterSpec, slice_spec: SliceSpec) -> str:
    """A short hash of what a slice's VMs boot with: the spec's `boot:` section and its
    runtime_version (a label value: lowercase hex)."""
    text = json.dumps({"boot": spec.boot.model_dump(mode="json"), "runtime_version": slice_spec.runtime_version},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def desired_slices(spec: ClusterSpec, metadata: Mapping[str, str] | None = None) -> list[DesiredSlice]:
    out = []
    network = node_network(spec.network, spec.name)
    # Each slice group's boot label once, not once a slice (a JSON dump and a hash each).
    boot_labels = {id(group): boot_settings(spec, group) for group in spec.slices}
    for instance in spec.slice_list():
        labels = {**instance.spec.labels, CLUSTER_LABEL: spec.name, SLICE_LABEL: str(instance.index),
                  BOOT_LABEL: boot_labels[id(instance.spec)]}
        request = NodeRequest(
            accelerator_type=instance.accelerator.name,
            runtime_version=instance.spec.runtime_version,
            capacity=instance.spec.capacity,
            labels=labels,
            metadata=dict(metadata or {}),
            reservation=instance.spec.reservation,
            network=network,
        )
        out.append(DesiredSlice(instance.index, node_name(spec.name, instance.index), request,
                                instance.spec.queued, tuple(spec.zones), instance.spec.queue_wait_s))
    return out


def plan(desired: list[DesiredSlice], observed: Observed,
         exhausted_zones: Mapping[int, set[str]] | None = None, *,
         unwanted_reason: str = "not in the spec", overdue: Mapping[str, float] | None = None,
         queue_overdue: Mapping[str, float] | None = None) -> list[Action]:
    """The actions for one pass. `exhausted_zones[i]`: zones that had no capacity for slice i.
    `overdue`: nodes whose bounded wait (HIDDEN, TIMEOUT, ...: `cloud.base.BOUNDED_WAIT_S`) is
    over, with the seconds they waited: they are replaced. `queue_overdue`: queued resources
    that waited their slice's `queue_wait_s` for capacity, with the seconds: they are deleted
    (the caller counts their zone as exhausted). What each state means is `cloud.base`'s one table."""
    overdue = overdue or {}
    queue_overdue = queue_overdue or {}
    exhausted_zones = exhausted_zones or {}
    wanted = {d.node_name: d for d in desired}
    actions: list[Action] = []
    busy: set[str] = set()  # node names with something in flight: no create this pass

    queued_by_node = {qr.node_name: qr for qr in observed.queued}
    for qr in observed.queued:
        want = wanted.get(qr.node_name)
        decision = decide_queued(qr)
        busy.add(qr.node_name)  # a slice with a queued resource is created only once it is gone
        if decision is Decision.GOING:
            continue
        if want is None or not want.queued:
            actions.append(DeleteQueuedResource(qr.name, qr.zone, unwanted_reason, _index(want)))
        elif decision is Decision.REPLACE:
            actions.append(DeleteQueuedResource(qr.name, qr.zone, f"queued resource is {qr.state.value}", want.index))
        elif qr.name in queue_overdue:
            actions.append(DeleteQueuedResource(
                qr.name, qr.zone, f"waited {queue_overdue[qr.name]:.0f}s for capacity in {qr.zone} "
                f"(queue_wait_s {want.queue_wait_s:g})", want.index))

    for node in observed.nodes:
        want = wanted.get(node.name)
        qr = queued_by_node.get(node.name)
        decision = decide(node)
        if decision is Decision.GOING or (qr is not None and decide_queued(qr) is Decision.GOING):
            busy.add(node.name)  # going already, with its queued resource (SUSPENDING) or alone
            continue
        if want is None:
            reason = unwanted_reason
        elif node.accelerator_type != want.request.accelerator_type:
            reason = f"accelerator changed from {node.accelerator_type} to {want.request.accelerator_type}"
        elif decision is Decision.REPLACE:
            reason = f"node is {node.state.value}"
        elif decision is Decision.WAIT_BOUNDED and node.name in overdue:
            reason = f"node is {condition(node)} for {overdue[node.name]:.0f}s"
        else:
            continue
        busy.add(node.name)
        if qr is not None and decide_queued(qr) is not Decision.REPLACE:
            # Deleting the queued resource (forced) takes its node with it.
            actions.append(DeleteQueuedResource(qr.name, qr.zone, reason, _index(want)))
        else:
            actions.append(DeleteNode(node.name, node.zone, reason, _index(want)))

    present_nodes = {n.name for n in observed.nodes}
    for want in desired:
        if want.node_name in busy or want.node_name in present_nodes:
            continue
        tried = exhausted_zones.get(want.index, set())
        zone = next((z for z in want.zones if z not in tried), None)
        if zone is None:
            actions.append(NoZoneLeft(want, tuple(want.zones)))
        else:
            actions.append(CreateSlice(want, zone))
    # Deletions requested twice are pointless: keep the first. (Creates are one per desired
    # slice already.) A set, not a scan of the list: a plan for 1,000 slices stays linear.
    unique: list[Action] = []
    deletions: set[Action] = set()
    for action in actions:
        if isinstance(action, (DeleteNode, DeleteQueuedResource)):
            if action in deletions:
                continue
            deletions.add(action)
        unique.append(action)
    return unique


def converged(desired: list[DesiredSlice], observed: Observed) -> bool:
    """Every desired slice is READY and healthy, its queued resource (if any) granted, and
    nothing else exists. (A REPAIRING slice heals by itself: it is waited for, never deleted,
    but it is not ready to run on.)"""
    wanted = {d.node_name for d in desired}
    by_name = {n.name: n for n in observed.nodes}
    if set(by_name) != wanted:
        return False
    if any(qr.node_name not in wanted or decide_queued(qr) not in (Decision.USE, Decision.WAIT)
           for qr in observed.queued):
        return False
    return all(decide(by_name[name]) is Decision.USE for name in wanted)


@dataclass(frozen=True)
class SliceChange:
    """What `up` will do to one slice, told before it does it (one per node or desired slice)."""

    kind: str  # "create", "delete", "replace" (delete, then create) or "keep"
    node: str
    slice_index: int | None
    accelerator: str  # what the slice will be (create, replace, keep) or is (delete)
    zone: str | None  # where it is, or (create) the first zone tried
    reason: str  # why, or (keep) the node's state
    # The spec asks for it (a slice dropped or changed), not the cloud (a dead node): a
    # run on this slice would lose it to the edit, not to a preemption.
    edited: bool = False
    # A READY slice whose hosts failed to boot, or that booted with other boot settings or
    # software: `up` deletes it before it converges (which sees only the node's state) and
    # creates it again.
    failed_boot: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "slice": self.slice_index, "node": self.node, "accelerator": self.accelerator,
                "zone": self.zone, "reason": self.reason, "edited": self.edited}


def changes(desired: list[DesiredSlice], observed: Observed,
            failed_boots: Mapping[int, str] | None = None,
            software_changed: Mapping[int, str] | None = None) -> list[SliceChange]:
    """The whole of what reconciling `observed` to `desired` will do, per slice (where
    `plan` gives only the next pass's actions). Ordered by slice. `failed_boots` (slice index
    -> what failed) are READY slices whose hosts failed to boot, `software_changed` (slice index
    -> what differs) those whose hosts run other software than a boot now would install: both
    replaced, since a VM runs its startup script only at boot."""
    failed_boots = failed_boots or {}
    software_changed = software_changed or {}
    nodes = {n.name: n for n in observed.nodes}
    queued = {qr.node_name: qr for qr in observed.queued if decide_queued(qr) is not Decision.GOING}
    wanted = {d.node_name for d in desired}
    out: list[SliceChange] = []
    for want in desired:
        node, qr = nodes.get(want.node_name), queued.get(want.node_name)
        accelerator = want.request.accelerator_type

        def change(kind: str, zone: str | None, reason: str, edited: bool = False,
                   failed_boot: bool = False) -> SliceChange:
            return SliceChange(kind, want.node_name, want.index, accelerator, zone, reason, edited,  # noqa: B023
                               failed_boot)

        if qr is not None and not want.queued:
            out.append(change("replace", qr.zone, "queued: false in the spec", edited=True))
        elif qr is not None and decide_queued(qr) is Decision.REPLACE:
            out.append(change("replace", qr.zone, f"queued resource is {qr.state.value}"))
        elif node is None or node.state is NodeState.DELETING:
            if qr is not None:
                out.append(change("keep", qr.zone, f"queued resource {qr.state.value}"))
            else:
                out.append(change("create", want.zones[0] if want.zones else None,
                                  "being deleted" if node is not None else "missing"))
        elif node.accelerator_type != accelerator:
            out.append(change("replace", node.zone, f"accelerator changed from {node.accelerator_type} to "
                              f"{accelerator}", edited=True))
        elif decide(node) is Decision.REPLACE:
            out.append(change("replace", node.zone, f"node is {node.state.value}"))
        elif want.index in failed_boots:  # said first: it is why the slice is no use now
            out.append(change("replace", node.zone, failed_boots[want.index], failed_boot=True))
        elif _boot_changed(node, want):
            out.append(change("replace", node.zone, "boot settings changed (the spec's boot: section or "
                              "runtime_version); a VM runs its startup script only at boot", edited=True,
                              failed_boot=True))
        elif want.index in software_changed and decide(node) is Decision.USE:
            # Edited: the controller's software changed, so a run on the slice would lose it to this up.
            out.append(change("replace", node.zone, f"software changed: {software_changed[want.index]}; a VM "
                              "installs its software only at boot", edited=True, failed_boot=True))
        elif decide(node) is Decision.WAIT_BOUNDED:
            out.append(change("keep", node.zone, f"{condition(node)}; replaced if not back within "
                              f"{BOUNDED_WAIT_S:.0f}s"))
        else:
            out.append(change("keep", node.zone, node.state.value))
    for node in observed.nodes:
        if node.name not in wanted:
            out.append(SliceChange("delete", node.name, node.slice_index, node.accelerator_type, node.zone,
                                   "not in the spec", edited=True))
    for qr in queued.values():
        if qr.node_name not in wanted and qr.node_name not in nodes:
            index = qr.labels.get(SLICE_LABEL)
            out.append(SliceChange("delete", qr.node_name, int(index) if index and index.isdigit() else None, "",
                                   qr.zone, "not in the spec (a queued resource)", edited=True))
    return sorted(out, key=lambda c: (c.slice_index is None, c.slice_index or 0, c.node))


def _boot_changed(node: Node, want: DesiredSlice) -> bool:
    """The node booted with other boot settings than the spec's (a node made before the label
    existed carries none: nothing is known, so nothing is replaced)."""
    recorded = node.labels.get(BOOT_LABEL)
    return recorded is not None and recorded != want.request.labels.get(BOOT_LABEL)


def describe_changes(found: list[SliceChange]) -> str:
    """One line for people: 'create slices 2-3 (v4-8, missing); keep slices 0-1 (v4-8, READY)'."""
    groups: dict[tuple[str, str, str], list[SliceChange]] = {}
    for change in found:
        groups.setdefault((change.kind, change.accelerator, change.reason), []).append(change)
    order = {"delete": 0, "replace": 1, "create": 2, "keep": 3}
    parts = []
    for (kind, accelerator, reason), group in sorted(groups.items(), key=lambda g: (order.get(g[0][0], 9), g[0])):
        what = ", ".join(x for x in (accelerator, reason) if x)
        parts.append(f"{kind} {_slices(group)} ({what})")
    return "; ".join(parts) or "nothing"


def _slices(group: list[SliceChange]) -> str:
    indexes = sorted(c.slice_index for c in group if c.slice_index is not None)
    names = sorted(c.node for c in group if c.slice_index is None)
    runs: list[str] = []
    for index in indexes:  # 0,1,2,5 -> 0-2, 5
        if runs and runs[-1].rsplit("-", 1)[-1] == str(index - 1):
            runs[-1] = f"{runs[-1].split('-')[0]}-{index}"
        else:
            runs.append(str(index))
    noun = "slice" if len(indexes) == 1 and not names else "slices"
    return " ".join(x for x in (f"{noun} {', '.join(runs)}" if indexes else "", ", ".join(names)) if x)


def _index(want: DesiredSlice | None) -> int | None:
    return want.index if want is not None else None
