"""Gang-launch a workload: one process per host on every host of the chosen slices, together.

`launch_envs` (pure) gives each process its distributed environment, fresh for every
attempt — stale coordinator or MEGASCALE_* values from before a slice was replaced make
JAX initialization hang. `Gang` starts the processes through the host agents, polls them
(exit codes, output, progress) and stops them all: when one fails, its siblings are
stopped at once instead of hanging in the next collective.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from podmanager.errors import SpecError

MEGASCALE_PORT = 8081
_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".pytest_cache", ".mypy_cache", "build", "dist"}
MAX_WORKING_DIR_BYTES = 64 << 20


@dataclass(frozen=True)
class HostSlot:
    """One host of one slice, as the scheduler addresses it."""

    slice_index: int
    worker_id: int
    node_name: str
    ip: str
    chips: int
    accelerator: str

    @property
    def label(self) -> str:
        return f"slice-{self.slice_index}/host-{self.worker_id}"


def launch_envs(slots: list[HostSlot], *, coordinator_port: int, cluster: str, run_id: str, attempt: int,
                checkpoint_dir: str | None, parallelism: str | None, simulated: bool,
                extra: dict[str, str] | None = None, megascale_port: int = MEGASCALE_PORT) -> list[dict[str, str]]:
    """The environment of each slot's process, in the order of `slots` (slice, then worker)."""
    if sorted(slots, key=lambda s: (s.slice_index, s.worker_id)) != slots:
        raise ValueError("slots must be ordered by slice, then worker id")
    slice_indexes = sorted({s.slice_index for s in slots})
    coordinator = slots[0]
    hostnames = {i: ",".join(s.ip for s in slots if s.slice_index == i) for i in slice_indexes}
    envs = []
    for process_id, slot in enumerate(slots):
        env = {
            **(extra or {}),
            "JAX_COORDINATOR_ADDRESS": f"{coordinator.ip}:{coordinator_port}",
            "JAX_NUM_PROCESSES": str(len(slots)),
            "JAX_PROCESS_ID": str(process_id),
            "TPU_WORKER_ID": str(slot.worker_id),
            "TPU_WORKER_HOSTNAMES": hostnames[slot.slice_index],
            "PODMANAGER_CLUSTER": cluster,
            "PODMANAGER_SLICE": str(slot.slice_index),
            "PODMANAGER_RUN_ID": run_id,
            "PODMANAGER_ATTEMPT": str(attempt),
        }
        if parallelism:
            env["PODMANAGER_PARALLELISM"] = parallelism
        if checkpoint_dir:
            env["PODMANAGER_CHECKPOINT_DIR"] = checkpoint_dir
        if len(slice_indexes) > 1:
            env.update({
                "MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator.ip}:{megascale_port}",
                "MEGASCALE_NUM_SLICES": str(len(slice_indexes)),
                "MEGASCALE_SLICE_ID": str(slice_indexes.index(slot.slice_index)),
                "MEGASCALE_PORT": str(megascale_port),
            })
        if simulated:
            # The host's chips become CPU devices; an unmodified JAX program sees them as its local devices.
            env["JAX_PLATFORMS"] = "cpu"
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={slot.chips}"
        envs.append(env)
    return envs


def pack_working_dir(path: str | Path) -> bytes:
    """The directory as a zip, without VCS, virtualenv and cache folders."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise SpecError(f"--working-dir: {root} is not a directory")
    buffer = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
            for name in files:
                file = Path(folder) / name
                total += file.stat().st_size
                if total > MAX_WORKING_DIR_BYTES:
                    raise SpecError(
                        f"--working-dir: {root} holds more than {MAX_WORKING_DIR_BYTES >> 20} MiB to ship to the hosts",
                        hint="Point --working-dir at the folder with your code only; keep data and checkpoints in a bucket.",
                    )
                archive.write(file, file.relative_to(root))
    return buffer.getvalue()


@dataclass
class HostState:
    """What the controller knows of one host's process in this attempt."""

    slot: HostSlot
    running: bool = True
    exit_code: int | None = None
    lost: str | None = None  # the host (agent) is unreachable or dead: why
    output_offset: int = 0
    progress: dict[str, Any] | None = None
    first_progress: dict[str, Any] | None = None
    last_lines: list[str] = field(default_factory=list)

    def remember(self, text: str) -> None:
        self.last_lines = (self.last_lines + text.splitlines())[-20:]


OutputCallback = Callable[[HostSlot, str], None]


class Gang:
    """One attempt's processes across all hosts, started, polled and stopped together."""

    def __init__(self, agents: list[tuple[HostSlot, Any]], run_id: str, *, poll_timeout_s: float = 10.0):
        self.agents = agents
        self.run_id = run_id
        self.poll_timeout_s = poll_timeout_s
        self.hosts = [HostState(slot) for slot, _ in agents]

    def coordinator_port(self) -> int:
        """A free port on the coordinator host (worker 0 of the first slice)."""
        return ray.get(self.agents[0][1].free_port.remote(), timeout=self.poll_timeout_s)

    def start(self, workload_json: str, envs: list[dict[str, str]], working_dir: Any) -> None:
        calls = [agent.start_workload.remote(self.run_id, workload_json, env, working_dir)
                 for (_, agent), env in zip(self.agents, envs)]
        ray.get(calls, timeout=120)

    def poll(self, on_output: OutputCallback | None = None) -> list[HostState]:
        """Refresh every host's state; an unreachable agent is recorded as lost, not raised."""
        pending = [(host, agent.poll_workload.remote(self.run_id, host.output_offset))
                   for host, (_, agent) in zip(self.hosts, self.agents) if host.running and not host.lost]
        for host, ref in pending:
            try:
                report = ray.get(ref, timeout=self.poll_timeout_s)
            except (RayActorError, GetTimeoutError) as error:
                host.lost = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                host.running = False
                continue
            if report["output"]:
                host.remember(report["output"])
                if on_output:
                    on_output(host.slot, report["output"])
            host.output_offset = report["offset"]
            host.progress = report["progress"] or host.progress
            host.first_progress = report["first_progress"] or host.first_progress
            host.running = report["running"]
            host.exit_code = report["exit_code"]
        return self.hosts

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every process, SIGKILL after the grace period; lost hosts are skipped."""
        calls = [agent.stop_workload.remote(self.run_id, grace_s)
                 for host, (_, agent) in zip(self.hosts, self.agents) if not host.lost]
        for call in calls:
            try:
                ray.get(call, timeout=grace_s + self.poll_timeout_s)
            except (RayActorError, GetTimeoutError):
                pass

    def signal(self, signum: int) -> None:
        """Send a signal to every reachable host's process (e.g. SIGTERM: checkpoint now)."""
        for host, (_, agent) in zip(self.hosts, self.agents):
            if not host.lost:
                agent.signal_workload.remote(self.run_id, signum)
