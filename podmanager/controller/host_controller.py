"""`HostController`: the one interface the API uses for everything Ray.

    controller = HostController(spec)
    starting = controller.begin_head()         # or start_head(): begin, then wait
    metadata = controller.node_metadata()      # put on every created node
    starting.wait()
    infos = controller.wait_for_hosts(nodes, timeout_s=300)
    controller.hosts(); controller.stop(); controller.close()
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Callable, Protocol

from podmanager.cloud.base import Node, NodeState
from podmanager.controller import driver_output, fleet, head, monitor, snapshot
from podmanager.controller.host_info import HostInfo, mark_vanished
from podmanager.core.clock import poll_until
from podmanager.core.errors import PodmanagerError, TimeoutExceededError
from podmanager.core.spec import ClusterSpec
from podmanager.vm import auth, loopback, ray_node

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0


class LocalMachines(Protocol):
    """Hosts that are processes on this machine (the simulator's VMs): their ground truth."""

    def vanished(self, cluster: str) -> set[tuple[str, int]]:
        """(node, worker) of hosts whose machine is gone, known before Ray notices."""
        ...

    def kill_all(self, cluster: str) -> int:
        """Stop every host of the cluster; how many there were."""
        ...

    def log_hint(self, cluster: str) -> str:
        """Where a person finds the hosts' logs."""
        ...

    def check_room(self, spec: ClusterSpec) -> None:
        """Refuse (exit 2) a spec that boots more hosts than this machine holds."""
        ...


class HostController:
    def __init__(self, spec: ClusterSpec, machines: LocalMachines | None = None) -> None:
        self.spec = spec
        self.machines = machines
        self.cluster = spec.name
        self._address: str | None = None

    # ------------------------------------------------------------ head

    def begin_head(self) -> head.HeadStart:
        """Start the cluster's head (or reuse the live one it started before, or use
        spec.head.address) without waiting for it: its address is known at once."""
        starting = head.begin_head(self.spec)
        self._address = starting.state.address
        return starting

    def start_head(self) -> str:
        """`begin_head`, then wait until the head answers; returns its address."""
        return self.begin_head().wait().address

    def head_address(self) -> str | None:
        """The head's address if one is recorded and answering, else None."""
        state = head.load_state(self.cluster)
        if state is None or not head.is_live(state):
            return None
        return state.address

    def node_metadata(self) -> dict[str, str]:
        """Metadata for every node the API creates: where the head is (no secrets)."""
        if self.spec.simulated and not self.spec.simulation.boot_hosts:
            return {}
        address = self._address or self.head_address()
        if address is None:
            raise PodmanagerError("node_metadata() needs a head: call start_head() first")
        return {ray_node.HEAD_METADATA_KEY: address}

    # ------------------------------------------------------------ driver

    def connect(self) -> bool:
        """Connect this process as a Ray driver (namespace 'podmanager'); False if no head."""
        import ray

        address = self._address or self.head_address()
        if address is None:
            return False
        if ray.is_initialized():
            return True
        driver_output.keep_ray_messages_off_stdout()
        token = auth.token_path(self.cluster)
        if token.exists():
            auth.use_token_in_process(token)
        extra = {"_node_ip_address": loopback.LOOPBACK_IP} if loopback.is_loopback(address) else {}
        # Ray's C++ failure handler takes SIGTERM over and dumps its stack on it; the
        # process's own handler (the CLI's: a follower detaches quietly) is put back.
        own_sigterm = signal.getsignal(signal.SIGTERM)
        with loopback.as_given(address):
            ray.init(
                address=address,
                namespace=fleet.NAMESPACE,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=False,
                **extra,
            )
        if callable(own_sigterm) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, own_sigterm)
        self._address = address
        return True

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()

    # ------------------------------------------------------------ hosts

    def wait_for_hosts(self, nodes: list[Node], timeout_s: float,
                       on_progress: Callable[[int, int], None] | None = None,
                       check: Callable[[], None] | None = None,
                       watch: Callable[[], None] | None = None) -> list[HostInfo]:
        """Place one agent per host of every node and wait until all are healthy;
        `on_progress(healthy, expected)` hears each change of the count; `check()` runs on
        every poll until then and may end the wait by raising (a host reported a boot error);
        `watch` is handed to the cluster's monitor, started here (it runs once a round there).

        Raises TimeoutExceededError naming every host still missing at the deadline.
        """
        if not self.connect():
            raise PodmanagerError(f"no Ray head for {self.cluster}: call start_head() first")
        wanted = [n for n in nodes if n.cluster == self.cluster or n.cluster is None]
        not_ready = [n.name for n in wanted if n.state is not NodeState.READY]
        names = {n.name for n in wanted}
        expected = sum(len(fleet.identities(self.cluster, n, simulated=self.spec.simulated)) for n in wanted)
        seen: list[HostInfo] = []
        reported: list[tuple[int, int]] = []

        def all_healthy() -> list[HostInfo] | None:
            if check is not None:
                check()
            for node in wanted:
                if node.state is NodeState.READY:
                    fleet.ensure_slice(self.cluster, node, simulated=self.spec.simulated)
            seen[:] = [h for h in fleet.probe_hosts(self.cluster, timeout_s=1.0) if h.node_name in names]
            healthy = sum(1 for h in seen if h.healthy)
            if on_progress is not None and reported[-1:] != [(healthy, expected)]:
                reported.append((healthy, expected))
                on_progress(healthy, expected)
            ready = not not_ready and len(seen) == expected and all(h.healthy for h in seen)
            return list(seen) if ready else None

        joined = poll_until(all_healthy, timeout_s=timeout_s, interval_s=0.5, on_timeout=lambda: TimeoutExceededError(
            f"hosts not ready after {timeout_s:.0f}s: " + _missing(seen, not_ready), hint=self._hint()))
        state = head.load_state(self.cluster)
        if state is not None and state.started:  # the monitor writes to this machine's state folder
            monitor.ensure_monitor(self.cluster, watch)
        return joined

    def hosts(self) -> list[HostInfo]:
        """Every registered host with its probe result; [] when there is no head."""
        try:
            if not self.connect():
                return []
        except Exception as error:  # noqa: BLE001 - status must render even when Ray is broken
            log.warning("cannot reach the Ray head of %s: %s", self.cluster, error)
            return []
        return self._with_vm_truth(fleet.probe_hosts(self.cluster, timeout_s=2.0))

    def agent(self, slice_index: int, worker_id: int):
        """The live HostAgent actor handle of one host, or None."""
        return fleet.agent_handle(self.cluster, slice_index, worker_id) if self.connect() else None

    def dead_hosts(self) -> list[HostInfo]:
        """Hosts that are dead (ActorDiedError, Ray node dead, simulated VM gone) or
        unreachable (ActorUnavailableError) right now."""
        if not self.connect():
            return []
        return [h for h in self._with_vm_truth(fleet.probe_hosts(self.cluster, timeout_s=1.0))
                if h.state in (fleet.DEAD, fleet.UNREACHABLE)]

    def _with_vm_truth(self, infos: list[HostInfo]) -> list[HostInfo]:
        """A simulated host whose processes are all gone is dead, whatever Ray says yet."""
        return infos if self.machines is None else mark_vanished(infos, self.machines.vanished(self.cluster))

    # ------------------------------------------------------------ teardown

    def stop(self) -> None:
        """Kill this cluster's simulated hosts, remove its agents, stop its head if podmanager
        started it. Idempotent; works from a new process after a crash."""
        state = head.load_state(self.cluster)
        killed = self.machines.kill_all(self.cluster) if self.machines else 0
        if killed:
            log.info("killed %d simulated hosts of %s", killed, self.cluster)
        if state is not None and not state.started and ray_node.reachable(state.address):
            try:  # a head we do not own stays up: only our agents and groups go
                if self.connect():
                    fleet.remove_all(self.cluster)
            except Exception as error:  # noqa: BLE001
                log.warning("could not remove the agents of %s: %s", self.cluster, error)
        self.close()
        head.stop_head(self.cluster)
        # The registry of agents and the monitor's snapshot are meaningless once the head is gone.
        (fleet._registry_path(self.cluster)).unlink(missing_ok=True)
        snapshot.remove(self.cluster)
        self._address = None

    def _hint(self) -> str:
        if self.machines is not None:
            return self.machines.log_hint(self.cluster)
        return "check the TPU VMs' startup script log (journalctl -u google-startup-scripts)"


def _missing(infos: list[HostInfo], not_ready: list[str]) -> str:
    parts = [f"{name} (node not READY)" for name in not_ready]
    parts += [
        f"slice {h.slice_index} ({h.node_name}) worker {h.worker_id}: {h.state}, {h.detail}"
        for h in infos
        if not h.healthy
    ]
    return "; ".join(parts) or "no hosts registered"
