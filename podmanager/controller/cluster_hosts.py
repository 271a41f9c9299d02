"""The Ray side of one cluster, as the `Cluster` API uses it: the head, what every node is
told at boot, waiting for hosts, and the host agents a run is launched through.

A control-plane-only simulation (`simulation.boot_hosts: false`) has no Ray side at all;
`ClusterHosts.for_spec` then returns None.
"""

from __future__ import annotations

import logging
import sys
import time
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

from podmanager.cloud.base import Node
from podmanager.controller import snapshot
from podmanager.controller.host_info import HostInfo, mark_vanished
from podmanager.core.errors import PodmanagerError
from podmanager.core.records import HostSlot, RayAccess, host_label
from podmanager.core.spec import ClusterSpec

if TYPE_CHECKING:
    from podmanager.controller.head import HeadStart
    from podmanager.controller.host_controller import HostController, LocalMachines
    from podmanager.controller.software import Software

log = logging.getLogger(__name__)


class ClusterHosts:
    def __init__(self, spec: ClusterSpec, machines: LocalMachines | None = None,
                 secrets_host: Callable[[], str | None] | None = None):
        """`secrets_host()`: the emulator serving a dry run's Secret Manager (None: Google's)."""
        self.spec = spec
        self.machines = machines
        self.secrets_host = secrets_host or (lambda: None)
        self._starting: HeadStart | None = None  # the head `start` launched, until `head_ready`

    @cached_property
    def controller(self) -> HostController:
        from podmanager.controller.host_controller import HostController  # Ray loads only when hosts are asked

        return HostController(self.spec, self.machines)

    @classmethod
    def for_spec(cls, spec: ClusterSpec, machines: LocalMachines | None = None,
                 secrets_host: Callable[[], str | None] | None = None) -> "ClusterHosts | None":
        if spec.simulated and not spec.simulation.boot_hosts:
            return None
        return cls(spec, machines, secrets_host)

    def check(self) -> None:
        """Refuse a `boot:` section the VMs could not boot with, and a dry run with more hosts than
        this machine holds, before anything is recorded or created."""
        from podmanager.controller.staging import check_boot

        if self.machines is not None:
            self.machines.check_room(self.spec)
        check_boot(self.spec)

    def start(self) -> dict[str, str]:
        """Start (or find) the head, without waiting for it (`head_ready` does); the metadata
        every node of the cluster is created with. The software every VM must run is settled
        first: a bad `boot:` costs nothing."""
        from podmanager.controller.staging import resolve_software

        software = resolve_software(self.spec)
        self._starting = self.controller.begin_head()
        metadata = self.controller.node_metadata()
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

    def _boot_metadata(self, software: Software) -> dict[str, str]:
        """Every TPU VM, real or simulated, runs the startup script; it fetches the Ray token from
        Secret Manager (a dry run's emulator's) as the VMs' service account, which is granted
        read access to it here."""
        from podmanager.cloud.gcp.secrets import TokenSecrets, grant_command, token_secret_id
        from podmanager.controller.startup import startup_metadata
        from podmanager.vm import auth

        account = self.spec.network.service_account if self.spec.network else None
        with TokenSecrets(self.spec.project or "", emulator_host=self.secrets_host()) as secrets:
            name = secrets.ensure(self.spec.name, auth.ensure_token(self.spec.name).read_text().strip())
            access = secrets.grant_access(self.spec.name, account)
        if access.member is None:
            # Said, not fatal: the VMs may read it by a grant made by hand (or on the project).
            example = "serviceAccount:PROJECT_NUMBER-compute@developer.gserviceaccount.com"
            log.warning("podmanager did not grant the TPU VMs read access to the Ray token secret: %s. Name "
                        "their account in the spec's network.service_account, or grant it by hand: %s",
                        access.reason, grant_command(name, self.spec.project or "", example))
        return startup_metadata(self.spec.name, software, token_secret_id(self.spec.name))

    def head_problem(self) -> str | None:
        """What keeps the cluster's head from serving, in a sentence: down, not answering, or
        never started; None when it is live. Asks no one but this machine and the head's port."""
        from podmanager.controller import head

        state = head.load_state(self.spec.name)
        if state is None:
            return "the cluster has no Ray head"
        return head.problem(state)

    def ray_access(self) -> RayAccess | None:
        """Where the cluster's head is, from its record; None before the first `up`."""
        from podmanager.controller import head
        from podmanager.vm import auth, loopback

        state = head.load_state(self.spec.name)
        if state is None:
            return None
        token = auth.token_path(self.spec.name)
        env = {"RAY_ADDRESS": state.address, **auth.token_env(token)}
        if state.dashboard_url:
            env["RAY_API_SERVER_ADDRESS"] = state.dashboard_url  # `ray job` asks the dashboard, not the GCS
        if loopback.is_loopback(state.address):
            env.update(loopback.HEAD_ENV)  # else Ray rewrites 127.0.0.1 to an address the head does not listen on
        return RayAccess(state.address, state.dashboard_url, str(token), env)

    def wait(self, nodes: list[Node], on_progress: Callable[[int, int], None] | None = None,
             check: Callable[[], None] | None = None, watch: Callable[[], None] | None = None) -> list[Any]:
        return self.controller.wait_for_hosts(nodes, timeout_s=self.spec.head.join_timeout_s, on_progress=on_progress,
                                              check=check, watch=watch)

    def place(self, nodes: list[Node]) -> list[HostInfo]:
        """Give the hosts of these READY nodes their agents as `wait` does, without waiting
        (an agent waits for its host to join); the probes of their hosts now."""
        from podmanager.controller import fleet  # Ray loads only when hosts are asked

        for node in nodes:
            fleet.ensure_slice(self.spec.name, node, simulated=self.spec.simulated)
        names = {node.name for node in nodes}
        return [h for h in fleet.probe_hosts(self.spec.name, timeout_s=1.0) if h.node_name in names]

    def hosts(self) -> list[HostInfo]:
        """Every host, probed now."""
        return self.controller.hosts()

    def observed_hosts(self) -> tuple[float, list[HostInfo]]:
        """(when, every host) as the cluster's monitor last probed them, at most a few
        seconds ago, without loading Ray; probed now when there is no fresh snapshot."""
        fresh = snapshot.read_fresh(self.spec.name)
        if fresh is None:
            return time.time(), self.controller.hosts()
        observed_at, infos = fresh
        return observed_at, mark_vanished(infos, self.machines.vanished(self.spec.name)) if self.machines else infos

    def dead_hosts(self) -> list[Any]:
        return self.controller.dead_hosts()

    def agents(self, slice_indexes: list[int]) -> list[tuple[HostSlot, Any]]:
        """Every host of these slices with its agent, ordered by slice then worker."""
        wanted = set(slice_indexes)
        expected = {(s.index, w) for s in self.spec.slice_list() if s.index in wanted
                    for w in range(s.accelerator.hosts)}
        out = []
        accelerators = {s.index: s.accelerator.name for s in self.spec.slice_list()}
        for info in self.controller.hosts():
            key = (info.slice_index, info.worker_id)
            if key not in expected or not info.healthy:
                continue
            handle = self.controller.agent(*key)
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

    def stop(self) -> None:
        self.controller.stop()
        from podmanager.cloud.gcp.secrets import TokenSecrets

        with TokenSecrets(self.spec.project or "", emulator_host=self.secrets_host()) as secrets:
            secrets.delete(self.spec.name)

    def close(self) -> None:
        if "ray" in sys.modules:  # else this process never connected to Ray: nothing to close
            self.controller.close()

