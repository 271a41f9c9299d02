"""`ClusterHosts`: the Ray side of one cluster, the one object the layers above use for
everything Ray: the head, what every node is told at boot, waiting for hosts, the host
agents a run is launched through, and stopping it all.

    hosts = ClusterHosts(spec, machines)
    metadata = hosts.start()                   # the head launched, not waited for; put on every node
    hosts.head_ready()                         # wait for the head `start` launched
    infos = hosts.wait_for_hosts(nodes)
    hosts.hosts(); hosts.agents([0]); hosts.stop(); hosts.close()

A control-plane-only simulation (`simulation.boot_hosts: false`) has no Ray side at all;
`ClusterHosts.for_spec` then returns None. Ray is imported only when hosts are asked
(`fleet` imports it), so a verb that needs none loads none.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from podmanager.cloud.base import Node, NodeState
from podmanager.controller import driver_output, head, head_actors, snapshot
from podmanager.controller.host_info import DEAD, UNREACHABLE, HostInfo, mark_vanished
from podmanager.core import local_ports
from podmanager.core.clock import poll_until
from podmanager.core.errors import PodmanagerError, TimeoutExceededError
from podmanager.core.records import HostSlot, RayAccess, host_label
from podmanager.core.spec import ClusterSpec
from podmanager.vm import auth, loopback, ray_node

if TYPE_CHECKING:
    from podmanager.controller.monitor import HostMonitor
    from podmanager.controller.software import Software

log = logging.getLogger(__name__)
# Ray's driver is one per process: its `init` and `shutdown`, by any thread (the controller's
# server answers requests and runs jobs in threads), one at a time, never one inside the other.
_RAY_DRIVER = threading.Lock()


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


class ClusterHosts:
    def __init__(self, spec: ClusterSpec, machines: LocalMachines | None = None,
                 secrets_host: Callable[[], str | None] | None = None):
        """`secrets_host()`: the emulator serving a dry run's Secret Manager (None: Google's)."""
        self.spec = spec
        self.cluster = spec.name
        self.machines = machines
        self.secrets_host = secrets_host or (lambda: None)
        self._address: str | None = None  # the head's, once known to this object
        self._starting: head.HeadStart | None = None  # the head `start` launched, until `head_ready`

    @classmethod
    def for_spec(cls, spec: ClusterSpec, machines: LocalMachines | None = None,
                 secrets_host: Callable[[], str | None] | None = None) -> "ClusterHosts | None":
        if spec.simulated and not spec.simulation.boot_hosts:
            return None
        return cls(spec, machines, secrets_host)

    def check(self) -> None:
        """Refuse a `boot:` section the VMs could not boot with (a package that cannot be
        resolved too: the lock is resolved here, and kept for `start`), and a dry run with more
        hosts than this machine holds, before anything is recorded or created."""
        from podmanager.controller.staging import resolve_software

        if self.machines is not None:
            self.machines.check_room(self.spec)
        resolve_software(self.spec, stage=False)

    # ------------------------------------------------------------ head

    def start(self) -> dict[str, str]:
        """Start (or find) the head, without waiting for it (`head_ready` does); the metadata
        every node of the cluster is created with. The software every VM must run is settled
        first: a bad `boot:` costs nothing."""
        from podmanager.controller.staging import resolve_software

        software = resolve_software(self.spec)
        if not self.spec.controller.local:
            self._adopt_ray_token()
        self._starting = self.begin_head()
        metadata = self.node_metadata()
        metadata.update(self._boot_metadata(software))
        return metadata

    def head_ready(self) -> bool:
        """Wait for the head `start` launched to answer; True if it launched one (False: the head
        was running already, or was named by the spec)."""
        starting, self._starting = self._starting, None
        if starting is None or not starting.pending:
            return False
        starting.wait()
        return True

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

    def head_problem(self) -> str | None:
        """What keeps the cluster's head from serving, in a sentence: down, not answering, or
        never started; None when it is live. Asks no one but this machine and the head's port."""
        state = head.load_state(self.cluster)
        if state is None:
            return "the cluster has no Ray head"
        return head.problem(state)

    def node_metadata(self) -> dict[str, str]:
        """Metadata for every node the API creates: where the head is (no secrets)."""
        if self.spec.simulated and not self.spec.simulation.boot_hosts:
            return {}
        address = self._address or self.head_address()
        if address is None:
            raise PodmanagerError("node_metadata() needs a head: call start_head() first")
        return {ray_node.HEAD_METADATA_KEY: address}

    def _adopt_ray_token(self) -> None:
        """On the controller VM: the head's token is the one the user's machine kept in Secret
        Manager and granted this VM's account (`client/controller_machine.make_secrets`), read once."""
        from podmanager.cloud.gcp.secrets import TokenSecrets, token_secret_id

        path = auth.token_path(self.cluster)
        if path.exists():
            return
        with TokenSecrets(self.spec.project or "", emulator_host=self.secrets_host()) as secrets:
            token = secrets.read(self.cluster)
        if token is None:
            raise PodmanagerError(f"Secret Manager holds no Ray token of {self.cluster} ({token_secret_id(self.cluster)})",
                                  hint="'podmanager up' from your machine makes it before the controller VM.")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token)

    def _boot_metadata(self, software: Software) -> dict[str, str]:
        """Every TPU VM, real or simulated, runs the startup script; it fetches the Ray token from
        Secret Manager (a dry run's emulator's) as the VMs' service account, which is granted
        read access to it here, or, when this is the controller VM, by the user's machine."""
        from podmanager.cloud.gcp.secrets import (
            TokenSecrets,
            grant_command,
            token_secret_id,
        )
        from podmanager.controller.startup import startup_metadata

        if not self.spec.controller.local:  # made and granted by the user (its account may not)
            return startup_metadata(self.cluster, software, token_secret_id(self.cluster))

        account = self.spec.network.service_account if self.spec.network else None
        with TokenSecrets(self.spec.project or "", emulator_host=self.secrets_host()) as secrets:
            name = secrets.ensure(self.cluster, auth.ensure_token(self.cluster).read_text().strip())
            access = secrets.grant_access(self.cluster, account)
        if access.member is None:
            # Said, not fatal: the VMs may read it by a grant made by hand (or on the project).
            example = "serviceAccount:PROJECT_NUMBER-compute@developer.gserviceaccount.com"
            log.warning("podmanager did not grant the TPU VMs read access to the Ray token secret: %s. Name "
                        "their account in the spec's network.service_account, or grant it by hand: %s",
                        access.reason, grant_command(name, self.spec.project or "", example))
        return startup_metadata(self.cluster, software, token_secret_id(self.cluster))

    def ray_access(self) -> RayAccess | None:
        """Where the cluster's head is, from its record; None before the first `up`."""
        state = head.load_state(self.cluster)
        if state is None:
            return None
        token = auth.token_path(self.cluster)
        env = {"RAY_ADDRESS": state.address, **auth.token_env(token)}
        if state.dashboard_url:
            env["RAY_API_SERVER_ADDRESS"] = state.dashboard_url  # `ray job` asks the dashboard, not the GCS
        if local_ports.is_loopback(state.address):
            env.update(loopback.HEAD_ENV)  # else Ray rewrites 127.0.0.1 to an address the head does not listen on
        return RayAccess(state.address, state.dashboard_url, str(token), env)

    # ------------------------------------------------------------ driver

    def connect(self) -> bool:
        """Connect this process as a Ray driver (namespace 'podmanager'); False if no head."""
        import ray

        address = self._address or self.head_address()
        if address is None:
            return False
        with _RAY_DRIVER:
            if ray.is_initialized():
                return True
            driver_output.keep_ray_messages_off_stdout()
            token = auth.token_path(self.cluster)
            if token.exists():
                auth.use_token_in_process(token)
            extra = {"_node_ip_address": local_ports.LOOPBACK_IP} if local_ports.is_loopback(address) else {}
            # Ray's C++ failure handler takes SIGTERM over and dumps its stack on it; the
            # process's own handler (the CLI's: a follower detaches quietly) is put back.
            own_sigterm = signal.getsignal(signal.SIGTERM)
            with loopback.as_given(address):
                ray.init(
                    address=address,
                    namespace=head_actors.NAMESPACE,
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
        """Disconnect this process from Ray (the cluster stays up)."""
        if "ray" not in sys.modules:  # this process never connected to Ray: nothing to close
            return
        import ray

        with _RAY_DRIVER:
            if ray.is_initialized():
                ray.shutdown()

    # ------------------------------------------------------------ hosts

    def wait_for_hosts(self, nodes: list[Node], timeout_s: float | None = None,
                       on_progress: Callable[[int, int], None] | None = None,
                       check: Callable[[], None] | None = None) -> list[HostInfo]:
        """Place one agent per host of every node and wait until all are healthy (at most
        `timeout_s`, by default the spec's `head.join_timeout_s`); `on_progress(healthy,
        expected)` hears each change of the count; `check()` runs on every poll until then and
        may end the wait by raising (a host reported a boot error).

        Raises TimeoutExceededError naming every host still missing at the deadline.
        """
        from podmanager.controller import fleet

        timeout_s = self.spec.head.join_timeout_s if timeout_s is None else timeout_s
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

        return poll_until(all_healthy, timeout_s=timeout_s, interval_s=0.5, on_timeout=lambda: TimeoutExceededError(
            f"hosts not ready after {timeout_s:.0f}s: " + _missing(seen, not_ready), hint=self._hint()))

    def ensure_monitor(self, monitor_class: type[HostMonitor] | None = None) -> None:
        """Start the cluster's monitor (`monitor_class`, by default the plain `HostMonitor`)
        unless it runs; only for a head podmanager started on this machine, since the monitor
        writes to this machine's state folder (for a head the spec names, `status` probes live)."""
        from podmanager.controller import monitor

        state = head.load_state(self.cluster)
        if state is not None and state.started and self.connect():
            monitor.ensure_monitor(self.cluster, monitor_class or monitor.HostMonitor)

    def place(self, nodes: list[Node]) -> list[HostInfo]:
        """Give the hosts of these READY nodes their agents as `wait_for_hosts` does, without
        waiting (an agent waits for its host to join); the probes of their hosts now."""
        from podmanager.controller import fleet

        for node in nodes:
            fleet.ensure_slice(self.cluster, node, simulated=self.spec.simulated)
        names = {node.name for node in nodes}
        return [h for h in fleet.probe_hosts(self.cluster, timeout_s=1.0) if h.node_name in names]

    def hosts(self) -> list[HostInfo]:
        """Every registered host with its probe result, probed now; [] when there is no head."""
        from podmanager.controller import fleet

        try:
            if not self.connect():
                return []
        except Exception as error:  # noqa: BLE001 - status must render even when Ray is broken
            log.warning("cannot reach the Ray head of %s: %s", self.cluster, error)
            return []
        return self._with_vm_truth(fleet.probe_hosts(self.cluster, timeout_s=2.0))

    def observed_hosts(self) -> tuple[float, list[HostInfo]]:
        """(when, every host) as the cluster's monitor last probed them, at most a few
        seconds ago, without loading Ray; probed now when there is no fresh snapshot."""
        fresh = snapshot.read_fresh(self.cluster)
        if fresh is None:
            return time.time(), self.hosts()
        observed_at, infos = fresh
        return observed_at, self._with_vm_truth(infos)

    def dead_hosts(self) -> list[HostInfo]:
        """Hosts that are dead (ActorDiedError, Ray node dead, simulated VM gone) or
        unreachable (ActorUnavailableError) right now."""
        from podmanager.controller import fleet

        if not self.connect():
            return []
        return [h for h in self._with_vm_truth(fleet.probe_hosts(self.cluster, timeout_s=1.0))
                if h.state in (DEAD, UNREACHABLE)]

    def agent(self, slice_index: int, worker_id: int) -> Any:
        """The live HostAgent actor handle of one host, or None."""
        from podmanager.controller import fleet

        return fleet.agent_handle(self.cluster, slice_index, worker_id) if self.connect() else None

    def agents(self, slice_indexes: list[int]) -> list[tuple[HostSlot, Any]]:
        """Every host of these slices with its agent, ordered by slice then worker."""
        wanted = set(slice_indexes)
        expected = {(s.index, w) for s in self.spec.slice_list() if s.index in wanted
                    for w in range(s.accelerator.hosts)}
        out = []
        accelerators = {s.index: s.accelerator.name for s in self.spec.slice_list()}
        for info in self.hosts():
            key = (info.slice_index, info.worker_id)
            if key not in expected or not info.healthy:
                continue
            handle = self.agent(*key)
            if handle is None:
                continue
            slot = HostSlot(info.slice_index, info.worker_id, info.node_name, info.ip or "127.0.0.1",
                            info.chips, accelerators[info.slice_index])
            out.append((slot, handle))
            expected.discard(key)
        if expected:
            missing = ", ".join(host_label(s, w) for s, w in sorted(expected))
            raise PodmanagerError(f"hosts without a healthy agent: {missing}",
                                  hint="Run 'podmanager up' again to bring them back, or see 'podmanager status'.")
        return sorted(out, key=lambda pair: (pair[0].slice_index, pair[0].worker_id))

    def _with_vm_truth(self, infos: list[HostInfo]) -> list[HostInfo]:
        """A simulated host whose processes are all gone is dead, whatever Ray says yet."""
        return infos if self.machines is None else mark_vanished(infos, self.machines.vanished(self.cluster))

    # ------------------------------------------------------------ teardown

    def stop(self) -> None:
        """`stop_ray`, then delete the cluster's Ray-token secret (the controller's own)."""
        from podmanager.cloud.gcp.secrets import TokenSecrets

        self.stop_ray()
        if not self.spec.controller.local:
            return  # the user's machine made it and deletes it (`ControllerMachine.tear_down`)
        with TokenSecrets(self.spec.project or "", emulator_host=self.secrets_host()) as secrets:
            secrets.delete(self.cluster)

    def stop_ray(self) -> None:
        """Kill this cluster's simulated hosts, remove its agents, stop its head if podmanager
        started it. Idempotent; works from a new process after a crash."""
        from podmanager.controller import fleet

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
