"""How many simulated hosts this machine can boot: a dry run that asks for more is refused
before anything is created (each host is a real Ray node here, and a thousand of them drove
a 2-core machine to load 260 with `down` unable to finish)."""

from __future__ import annotations

import os

import psutil

from podmanager.core.errors import SpecError
from podmanager.core.spec import ClusterSpec

MIB = 1024 * 1024
HOST_MEMORY = 125 * MIB  # a simulated host's raylet, agents and worker, measured as PSS
SHARED_MEMORY = 1024 * MIB  # the head, the emulator and the client, before any host
MEMORY_SHARE = 0.75  # of the machine's memory, the rest left to everything else on it
# Idle, a host's Ray processes take a few percent of a core; each boot takes 2-4 s of one.
HOSTS_PER_CORE = 16


def machine_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def hosts_it_holds(memory_bytes: int, cores: int) -> int:
    """The simulated hosts a machine of this memory and these cores holds at once."""
    by_memory = int((memory_bytes * MEMORY_SHARE - SHARED_MEMORY) // HOST_MEMORY)
    return max(0, min(by_memory, cores * HOSTS_PER_CORE))


def booted_hosts(spec: ClusterSpec) -> int:
    if not (spec.simulated and spec.simulation.boot_hosts):
        return 0
    return sum(instance.accelerator.hosts for instance in spec.slice_list())


def check_room(spec: ClusterSpec, *, memory_bytes: int | None = None, cores: int | None = None) -> None:
    """Refuse (exit 2) a dry run that boots more hosts than this machine holds."""
    wanted = booted_hosts(spec)
    if not wanted:
        return
    memory_bytes = psutil.virtual_memory().total if memory_bytes is None else memory_bytes
    cores = machine_cores() if cores is None else cores
    room = hosts_it_holds(memory_bytes, cores)
    if wanted > room:
        raise SpecError(
            f"simulation.boot_hosts: this dry run boots {wanted} simulated hosts, each a Ray node on this machine "
            f"(~{HOST_MEMORY // MIB} MiB and a share of a core each), and this machine ({cores} cores, "
            f"{memory_bytes / 1024 ** 3:.1f} GiB) holds about {room}",
            hint="Set 'simulation.boot_hosts: false' to simulate the cloud without hosts (any size up to 1,024 "
                 f"slices), or ask for fewer or smaller slices ({room} hosts at most).")
