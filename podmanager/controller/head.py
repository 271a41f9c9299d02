"""The Ray head: start one for a cluster (token auth on, node-death detection tuned to where
its hosts are) or use the one the spec names; remember it in `cluster_dir/head.json`; stop
only our own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import psutil

from podmanager.core import local_ports, paths
from podmanager.core.cadence import Cadence
from podmanager.core.errors import PodmanagerError
from podmanager.core.local_ports import free_ports
from podmanager.core.spec import ClusterSpec
from podmanager.vm import auth, loopback, node_address, procs
from podmanager.vm.ray_node import OBJECT_STORE_BYTES, reachable

log = logging.getLogger(__name__)

HEAD_FILE = "head.json"
HEAD_LOG = "head.log"


def health_checks(spec: ClusterSpec) -> dict[str, int]:
    """The GCS health-check settings for this cluster's hosts: loopback-fast only when simulated
    (`core/cadence.py` says why each)."""
    return Cadence.for_spec(spec).ray_health.system_config()


START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class HeadState:
    address: str  # "ip:port" of the GCS
    started: bool  # True when podmanager started it (and so may stop it)
    machine_id: str | None = None  # `procs` id of the `ray start --head` daemons
    dashboard_url: str | None = None
    temp_dir: str | None = None


def state_path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / HEAD_FILE


def load_state(cluster: str) -> HeadState | None:
    record = procs.read_record(state_path(cluster))
    if not record:
        return None
    known = {f.name for f in fields(HeadState)}
    return HeadState(**{k: v for k, v in record.items() if k in known})


def head_temp_dir(cluster: str) -> str:
    """Ray's temp dir for this cluster's head: its own, so `stop` can remove it, inside the
    cluster's (see `procs.owner_temp_dir`). On a simulated VM (the dry run's controller VM), on
    the VM's own disk: a VM that goes (deleted, or stopped by its lease) takes it along."""
    root = os.environ.get(procs.ROOT_ENV)
    return f"{root}/ray" if root else f"{procs.owner_temp_dir(cluster)}/head"


# The head's own Ray node: the GCS answering is not enough, since supervisors, routers and the
# monitor are placed on the head's raylet; without it a run waits for ever in `starting`.
HEAD_DAEMONS = frozenset({"gcs_server", "raylet"})


def missing_daemons(state: HeadState) -> set[str]:
    """Which of the head's Ray daemons are not running (only for a head podmanager started)."""
    if not state.started:
        return set()
    names = set()
    for proc in procs.members(state.machine_id):
        with contextlib.suppress(psutil.Error):
            names.add(proc.name())
    return set(HEAD_DAEMONS - names)


def problem(state: HeadState) -> str | None:
    """What is wrong with the head, in a sentence; None when it is live."""
    missing = missing_daemons(state)
    if missing:
        return f"the Ray head at {state.address} is down ({' and '.join(sorted(missing))} not running)"
    if not reachable(state.address):
        return f"the Ray head at {state.address} does not answer"
    return None


def is_live(state: HeadState) -> bool:
    return problem(state) is None


def ray_cli() -> list[str]:
    """The `ray` command of this interpreter's installation."""
    return [sys.executable, "-m", "ray.scripts.scripts"]


class HeadStart:
    """A head on its way up. Its address is known from the start, so slices can be created
    with it while the head comes up (their hosts wait until it answers); `wait()` returns once
    it answers, or raises with its log and stops it."""

    def __init__(self, cluster: str, state: HeadState, proc: subprocess.Popen | None = None,
                 log_path: Path | None = None):
        self.cluster, self.state, self._proc, self._log_path = cluster, state, proc, log_path

    @property
    def pending(self) -> bool:
        """True until `wait()` saw a head this start launched answer."""
        return self._proc is not None

    def wait(self) -> HeadState:
        if self._proc is None:
            return self.state
        try:
            code = self._proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0 or not reachable(self.state.address):
            stop_head(self.cluster)
            raise PodmanagerError(
                f"the Ray head for {self.cluster} did not start ({'timed out' if code is None else f'exit {code}'})",
                hint=f"see {self._log_path}:\n{_tail(self._log_path)}" if self._log_path else None,
            )
        log.info("started the Ray head of %s at %s", self.cluster, self.state.address)
        self._proc = None
        return self.state


def begin_head(spec: ClusterSpec) -> HeadStart:
    """Reuse a live head this cluster started earlier, use spec.head.address, or launch one
    (without waiting for it: see `HeadStart`)."""
    if spec.head.address:
        state = HeadState(address=spec.head.address, started=False)
        procs.write_record(state_path(spec.name), **asdict(state))
        return HeadStart(spec.name, state)
    previous = load_state(spec.name)
    if previous is not None and previous.started and is_live(previous):
        log.info("reusing the Ray head of %s at %s", spec.name, previous.address)
        return HeadStart(spec.name, previous)
    if previous is not None and previous.started:
        stop_head(spec.name)  # a half-dead head from a crash: clear it before starting anew
    return _launch(spec)


def start_head(spec: ClusterSpec) -> HeadState:
    """`begin_head`, then wait until the head answers."""
    return begin_head(spec).wait()


def head_command(
    spec: ClusterSpec, ip: str, port: int, dashboard_port: int, client_port: int, agent_port: int
) -> list[str]:
    """`ray start --head ...` for this cluster (no secrets: the token goes by env path)."""
    return ray_cli() + [
        "start", "--head",
        f"--node-ip-address={ip}",
        f"--port={port}",
        f"--dashboard-host={spec.head.dashboard_host}",
        f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={client_port}",
        f"--dashboard-agent-listen-port={agent_port}",  # not the fixed default: several clusters may share a machine
        "--num-cpus=1",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--system-config={json.dumps(health_checks(spec))}",
        "--disable-usage-stats",
        f"--temp-dir={head_temp_dir(spec.name)}",
    ]


def _launch(spec: ClusterSpec) -> HeadStart:
    token = auth.ensure_token(spec.name)
    # Ray's sockets, session files and logs: only the owner may enter (paths.private_dir).
    paths.private_dir(Path(head_temp_dir(spec.name)).parent)
    simulated = spec.simulated
    # Simulated: only the VM's own address (loopback, or its internal one in the namespace mode).
    ip = node_address.simulated_node_address() if simulated else _node_ip()
    bind = ip if simulated else ""
    dashboard_bind = spec.head.dashboard_host if spec.head.dashboard_host != "0.0.0.0" else ""
    if spec.head.port:
        port = spec.head.port
        dashboard_port, client_port, agent_port = free_ports(dashboard_bind, bind, bind, avoid=(port,))
    else:
        port, dashboard_port, client_port, agent_port = free_ports(bind, dashboard_bind, bind, bind)
    command = head_command(spec, ip, port, dashboard_port, client_port, agent_port)
    env = auth.child_env(token)
    if simulated and local_ports.is_loopback(ip):  # Ray's loopback rewrite, kept off (vm/loopback.py)
        env.update(loopback.HEAD_ENV)
    address = f"{ip}:{port}"
    log_path = paths.cluster_dir(spec.name) / HEAD_LOG
    proc, machine_id = procs.launch(command, env, log_path, owner=procs.owner(spec.name))
    # Recorded before waiting, so that `stop` after a crash right here still finds it.
    state = HeadState(
        address=address,
        started=True,
        machine_id=machine_id,
        dashboard_url=f"http://{spec.head.dashboard_host}:{dashboard_port}",
        temp_dir=head_temp_dir(spec.name),
    )
    procs.write_record(state_path(spec.name), **asdict(state))
    return HeadStart(spec.name, state, proc, log_path)


def stop_head(cluster: str) -> bool:
    """Stop the head podmanager started for `cluster` (never a head it did not start)."""
    state = load_state(cluster)
    if state is None:
        return False
    stopped = False
    if state.started:
        stopped = procs.kill(state.machine_id, grace_s=2.0)
    if state.started:
        procs.remove_temp_dir(state.temp_dir)
    state_path(cluster).unlink(missing_ok=True)
    return stopped


def _node_ip() -> str:
    from ray._private import services

    return services.get_node_ip_address()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


