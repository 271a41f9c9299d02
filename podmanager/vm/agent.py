"""`HostAgent`: the one Ray actor per TPU host, holding all of its chips.

It is created by `fleet` (named, detached, in the podmanager namespace, inside the
slice's placement group). It reports who it is, answers health probes, and runs the
workload processes of a run as its own children (their machinery is `workload_runs`; what
the controller sends and gets back is `host_wire`), so a crash or kill of a program never
takes the agent down.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel, ConfigDict

from podmanager.core.local_ports import free_port
from podmanager.vm.environments import HostSetup
from podmanager.vm.host_wire import HeldRun, HostLaunch, PollReply, RunSetup
from podmanager.vm.probe import ProbeResult, probe_host
from podmanager.vm.workload_runs import HostRuns


class AgentIdentity(BaseModel):
    """Which host an agent is for: handed to the agent when it is created, and kept in the
    cluster's registry of agents (`agents.json`, controller/fleet.py)."""

    model_config = ConfigDict(frozen=True)

    cluster: str
    slice_index: int
    node_name: str
    worker_id: int
    chips: int
    simulated: bool


class HostAgent:
    """Plain class; `fleet` wraps it with `ray.remote` and the placement options."""

    def __init__(self, identity: AgentIdentity) -> None:
        import ray

        self.identity = identity
        context = ray.get_runtime_context()
        self.ray_node_id = context.get_node_id()
        self.ip = ray.util.get_node_ip_address()
        self.pid = os.getpid()
        self.started_at = time.time()

    def info(self) -> dict:
        return {**self.identity.model_dump(), "ip": self.ip, "ray_node_id": self.ray_node_id, "pid": self.pid,
                "started_at": self.started_at, "tpu_visible_chips": os.environ.get("TPU_VISIBLE_CHIPS")}

    def probe(self) -> ProbeResult:
        result = probe_host(self.identity.chips, simulated=self.identity.simulated)
        return result.model_copy(update={"ray_node_id": self.ray_node_id, "ip": self.ip})

    # ---------------------------------------------------------------- workloads

    def _runs(self) -> HostRuns:
        if not hasattr(self, "_host_runs"):
            from podmanager.core import paths
            from podmanager.vm.environments import cache_root

            # XLA's compiled programs go to the host's cache, as its requirements environments do.
            self._host_runs = HostRuns(paths.cluster_dir(self.identity.cluster) / "hosts"
                                       / f"{self.identity.node_name}-w{self.identity.worker_id}",
                                       compile_cache=cache_root() / "jax")
        return self._host_runs

    def preemption_notice(self) -> str | None:
        """Why this VM is about to go, or None: its metadata server's word (a simulated VM has
        one of its own, so this is the same path as on Google Cloud)."""
        from podmanager.vm.notices import metadata_notice

        return metadata_notice()

    def free_port(self) -> int:
        """A free port on this host (all interfaces), for the JAX coordinator."""
        return free_port("")

    def setup_workload(self, run: RunSetup, code_zip: bytes | None) -> HostSetup:
        """Ready the run here (its code, its requirements, its program); see `HostRuns.setup`."""
        return self._runs().setup(run, code_zip)

    def start_workload(self, launch: HostLaunch) -> int:
        """Start one attempt's process of the run here; see `HostRuns.start`."""
        return self._runs().start(launch)

    def poll_workload(self, run_id: str, offset: int, hold_s: float = 0.0) -> PollReply:
        return self._runs().poll(run_id, offset, hold_s)

    def workload_status(self, run_id: str) -> HeldRun | None:
        return self._runs().describe(run_id)

    def left_output(self, run_id: str, attempt: int, offset: int) -> bytes:
        """An earlier process's output of the attempt, from its file here; see `HostRuns.left_output`."""
        return self._runs().left_output(run_id, attempt, offset)

    def stop_workload(self, run_id: str, grace_s: float) -> int | None:
        return self._runs().stop(run_id, grace_s)

    def signal_workload(self, run_id: str | None, signum: int) -> None:
        """Signal one run's process, or (run_id None) every live workload process here."""
        self._runs().signal(run_id, signum)
