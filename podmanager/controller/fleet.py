"""Which hosts of which slice are alive in Ray: agent placement, registry, probes.

One placement group per slice reserves every host's chips at once (gang placement:
a slice is usable whole or not at all); bundle i is pinned to TPU worker i of that
slice by Ray's TPU node labels, and agent i is created in bundle i. Agents and
groups are detached and named, so any later process finds them; the registry file
`cluster_dir/agents.json` remembers which hosts are expected, so a host whose agent
is gone is still reported (as dead) rather than silently missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import ray
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
)
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from podmanager.cloud.base import Node
from podmanager.controller.host_info import (
    DEAD,
    HEALTHY,
    JOINING,
    UNHEALTHY,
    UNREACHABLE,
    UNRESPONSIVE,
    HostInfo,
)
from podmanager.core import paths
from podmanager.core.catalog import lookup
from podmanager.core.files import write_atomic
from podmanager.vm.agent import AgentIdentity, HostAgent

NAMESPACE = "podmanager"
REGISTRY_FILE = "agents.json"
SLICE_LABEL = "ray.io/tpu-slice-name"
WORKER_LABEL = "ray.io/tpu-worker-id"
HEAD_RESOURCE = "node:__internal_head__"  # every Ray head node has it; pins an actor there


def agent_name(cluster: str, slice_index: int, worker_id: int) -> str:
    return f"pm-{cluster}-{slice_index}-{worker_id}"


def group_name(cluster: str, slice_index: int) -> str:
    return f"pm-{cluster}-{slice_index}"


# ---------------------------------------------------------------- registry


def _registry_path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / REGISTRY_FILE


def registry(cluster: str) -> dict[str, dict]:
    try:
        return json.loads(_registry_path(cluster).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _save_registry(cluster: str, entries: dict[str, dict]) -> None:
    write_atomic(_registry_path(cluster), json.dumps(entries, indent=1, sort_keys=True))


# ---------------------------------------------------------------- placement


def _get_agent(name: str):
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _get_group(name: str) -> PlacementGroup | None:
    try:
        return ray.util.get_placement_group(name)
    except ValueError:
        return None


def identities(cluster: str, node: Node, *, simulated: bool) -> list[AgentIdentity]:
    accelerator = lookup(node.accelerator_type)
    if node.slice_index is None:
        raise ValueError(f"node {node.name} has no podmanager-slice label")
    return [
        AgentIdentity(cluster, node.slice_index, node.name, worker, accelerator.chips_per_host, simulated)
        for worker in range(accelerator.hosts)
    ]


def ensure_slice(cluster: str, node: Node, *, simulated: bool) -> bool:
    """Make sure the slice of `node` has its placement group and one agent per host.

    Existing agents (placed or still waiting for their hosts) are kept as long as
    every host of the slice has one and they belong to this node; otherwise the whole
    slice is made anew. Returns True when it (re)created the slice's agents.
    """
    wanted = identities(cluster, node, simulated=simulated)
    names = [agent_name(cluster, i.slice_index, i.worker_id) for i in wanted]
    known = registry(cluster)
    current = [_get_agent(n) for n in names]
    if all(current) and all(known.get(n, {}).get("node_name") == node.name for n in names):
        return False
    for handle in current:
        if handle is not None:
            ray.kill(handle, no_restart=True)
    group_id = group_name(cluster, node.slice_index)
    old = _get_group(group_id)
    if old is not None:
        remove_placement_group(old)
    chips = wanted[0].chips
    group = placement_group(
        [{"TPU": chips} for _ in wanted],
        strategy="STRICT_SPREAD",
        name=group_id,
        lifetime="detached",
        bundle_label_selector=[{SLICE_LABEL: node.name, WORKER_LABEL: str(i.worker_id)} for i in wanted],
    )
    actor = ray.remote(HostAgent)
    for bundle, (identity, name) in enumerate(zip(wanted, names)):
        try:
            actor.options(
                name=name,
                namespace=NAMESPACE,
                lifetime="detached",
                max_restarts=0,
                max_concurrency=8,  # a probe must not wait behind a workload stop's grace period
                num_cpus=0,
                resources={"TPU": chips},
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle),
            ).remote(identity.as_dict())
        except ValueError:  # another process created it a moment ago: the name is taken
            pass
        known[name] = identity.as_dict()
    _save_registry(cluster, known)
    return True


def remove_all(cluster: str) -> None:
    """Kill every agent and placement group of the cluster and forget them."""
    for name, identity in registry(cluster).items():
        handle = _get_agent(name)
        if handle is not None:
            ray.kill(handle, no_restart=True)
        group = _get_group(group_name(cluster, identity["slice_index"]))
        if group is not None:
            remove_placement_group(group)
    _registry_path(cluster).unlink(missing_ok=True)


# ---------------------------------------------------------------- probing


def _ray_hosts() -> dict[tuple[str, str], dict]:
    """(slice name, worker id) -> the newest Ray node of that TPU host (alive preferred)."""
    out: dict[tuple[str, str], dict] = {}
    for node in ray.nodes():
        labels = node.get("Labels") or {}
        key = (labels.get(SLICE_LABEL), labels.get(WORKER_LABEL))
        if key[0] is None:
            continue
        if key not in out or (node.get("Alive") and not out[key].get("Alive")):
            out[key] = node
    return out


def probe_hosts(cluster: str, timeout_s: float = 2.0) -> list[HostInfo]:
    """Probe every registered host of the cluster at once; one HostInfo each."""
    entries = registry(cluster)
    ray_hosts = _ray_hosts()
    pending: dict[str, ray.ObjectRef] = {}
    for name in entries:
        handle = _get_agent(name)
        if handle is not None:
            pending[name] = handle.probe.remote()
    if pending:
        ray.wait(list(pending.values()), num_returns=len(pending), timeout=timeout_s)
    out = []
    for name, identity in sorted(entries.items(), key=lambda e: (e[1]["slice_index"], e[1]["worker_id"])):
        ray_node = ray_hosts.get((identity["node_name"], str(identity["worker_id"])))
        out.append(_describe(identity, ray_node, pending.get(name)))
    return out


def classify_failure(error: Exception | None, *, joined: bool, node_dead: bool) -> tuple[str, str]:
    """(state, detail) of a host whose probe did not answer.

    `error` is what `ray.get` raised (None when there is no agent to ask); `joined`
    is whether the host has a Ray node; `node_dead` whether Ray declared it dead.
    ActorUnavailableError (node not answering, maybe back soon) and ActorDiedError
    (gone for good) are both RayActorError: they are told apart here.
    """
    if isinstance(error, ActorDiedError):
        return DEAD, "agent died (ActorDiedError)"
    if isinstance(error, ActorUnavailableError):
        return (DEAD if node_dead else UNREACHABLE), "agent unreachable (ActorUnavailableError)"
    if isinstance(error, RayActorError):
        return DEAD, f"agent failed: {type(error).__name__}"
    if node_dead:
        return DEAD, "Ray node is dead; agent gone" if error is None else "Ray node is dead"
    if not joined:
        return JOINING, "host has not joined Ray"
    if error is None:
        return DEAD, "agent is gone"
    return UNRESPONSIVE, "agent did not answer (slice not placed yet?)"


def _describe(identity: dict, ray_node: dict | None, ref: ray.ObjectRef | None) -> HostInfo:
    base = dict(
        slice_index=identity["slice_index"],
        node_name=identity["node_name"],
        worker_id=identity["worker_id"],
        chips=identity["chips"],
        ip=ray_node.get("NodeManagerAddress") if ray_node else None,
        ray_node_id=ray_node.get("NodeID") if ray_node else None,
    )
    error: Exception | None = None
    if ref is not None:
        try:
            result = ray.get(ref, timeout=0)
        except (RayActorError, GetTimeoutError) as failed:
            error = failed
            if isinstance(failed, GetTimeoutError):
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - cancelling a queued probe is best effort
                    pass
        else:
            state = HEALTHY if result["healthy"] else UNHEALTHY
            base.update(ip=result.get("ip", base["ip"]), ray_node_id=result.get("ray_node_id", base["ray_node_id"]))
            return HostInfo(**base, healthy=result["healthy"], last_heartbeat=result["timestamp"],
                            detail=result["detail"], state=state)
    node_dead = ray_node is not None and not ray_node.get("Alive")
    state, detail = classify_failure(error, joined=ray_node is not None, node_dead=node_dead)
    return HostInfo(**base, healthy=False, last_heartbeat=None, detail=detail, state=state)


def agent_handle(cluster: str, slice_index: int, worker_id: int):
    """The live agent actor of one host, or None (for callers that add work to agents)."""
    return _get_agent(agent_name(cluster, slice_index, worker_id))
