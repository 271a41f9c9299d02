"""The address a simulated VM's Ray processes bind and advertise (issue 47).

In the dry run's loopback mode every simulated VM shares this machine's loopback: 127.0.0.1. In
the emulator's namespace mode (docs/dry-run.md) a VM has a network namespace of its own and its
internal address on the simulated VPC; it finds that address as a Compute Engine VM does, from
its metadata server's `instance/network-interfaces/0/ip`
(https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys). Which mode a VM is
in its environment tells: a loopback-mode VM's names its own metadata server on loopback
(`GCE_METADATA_IP`), a namespace-mode VM's names none (its server is where a GCE VM's is).
"""

from __future__ import annotations

import os
from typing import Mapping

from podmanager.core.errors import PodmanagerError
from podmanager.core.local_ports import LOOPBACK_IP
from podmanager.vm import boot_status, procs

INTERNAL_IP = "instance/network-interfaces/0/ip"


def in_own_namespace(environ: Mapping[str, str] | None = None) -> bool:
    """A simulated VM on the namespace mode's VPC: a VM (its root in its environment) whose
    metadata server is not overridden to one on loopback. The laptop has no VM root."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(procs.ROOT_ENV)) and not environ.get("GCE_METADATA_IP")


def simulated_node_address() -> str:
    """Where a simulated VM's Ray node binds and is reached: its internal address in the
    namespace mode, loopback otherwise (a laptop's local controller, a loopback-mode VM)."""
    if not in_own_namespace():
        return LOOPBACK_IP
    found = (boot_status.read_metadata(INTERNAL_IP) or "").strip()
    if not found:
        raise PodmanagerError(f"this simulated VM's metadata server gave no {INTERNAL_IP}",
                              hint="Is the project's emulator (namespace mode) still running?")
    return found
