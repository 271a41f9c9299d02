"""Helpers for tests that run a real local Ray cluster of simulated TPU hosts.

Not a conftest: test modules import what they need. Every helper only touches
processes podmanager recorded (or that appeared during the test), never all of Ray.
"""

from __future__ import annotations

import os
import time

import psutil

from podmanager.cloud.base import CLUSTER_LABEL, SLICE_LABEL, Node, NodeRequest
from podmanager.cloud.sim import SimCloud
from podmanager.hosts import head, simhosts

ZONE = "sim-zone-a"


def ray_like() -> set[int]:
    """Pids of processes that look like Ray (by name or command line)."""
    found = set()
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            text = " ".join([proc.info["name"] or "", *(proc.info["cmdline"] or [])])
        except psutil.Error:
            continue
        if "ray" in text.lower() and proc.status() != psutil.STATUS_ZOMBIE:
            found.add(proc.info["pid"])
    return found


def cluster_sessions(cluster: str) -> set[int]:
    """Session ids of the head and the simulated hosts podmanager recorded for `cluster`."""
    sessions = {r["pgid"] for r in simhosts.host_records(cluster)}
    state = head.load_state(cluster)
    if state is not None and state.pgid:
        sessions.add(state.pgid)
    return sessions


def leftovers(sessions: set[int], before: set[int] | None) -> list[str]:
    """Live processes of `sessions`, plus (unless `before` is None) Ray-like processes
    that did not exist in `before`."""
    new = ray_like() - before if before is not None else set()
    out = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            ours = os.getsid(proc.pid) in sessions
        except (psutil.Error, ProcessLookupError):
            continue
        if ours or proc.info["pid"] in new:
            out.append(f"{proc.info['pid']} {proc.info['name']} {' '.join(proc.info['cmdline'] or [])[:80]}")
    return out


def wait_no_leftovers(sessions: set[int], before: set[int] | None, timeout_s: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = leftovers(sessions, before)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.25)


def create_ready_nodes(
    cloud: SimCloud, clock, cluster: str, accelerators: list[str], metadata: dict[str, str]
) -> list[Node]:
    """One node per accelerator, named <cluster>-s<i>, labelled as podmanager's; all READY."""
    for index, accelerator in enumerate(accelerators):
        cloud.create_node(
            ZONE,
            f"{cluster}-s{index}",
            NodeRequest(
                accelerator, "tpu-ubuntu2204-base",
                labels={CLUSTER_LABEL: cluster, SLICE_LABEL: str(index)}, metadata=metadata,
            ),
        )
    clock.advance(cloud.create_latency_s + 0.1)
    return sorted(cloud.list_nodes(ZONE), key=lambda n: n.name)
