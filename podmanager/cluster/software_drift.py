"""READY slices whose hosts run other software than a boot now would install: a new podmanager
(or Python, Ray, JAX) on the controller never reaches a VM that booted before it, since its
startup script runs only at boot, so `up` plans their replacement.

Judged by the versions each host reported after its install (the guest attribute `versions`,
`vm/boot_status.py`) against what the spec's VMs would get now (`controller/staging.py::
wanted_versions`). A host that reported none (still booting, or booted by an older podmanager)
is not judged: nothing is known, so nothing is replaced.
"""

from __future__ import annotations

from collections.abc import Mapping

from podmanager.core.records import Versions
from podmanager.vm.boot_status import BootStatus


def software_drift(boots: Mapping[int, Mapping[int, BootStatus]], wanted: Versions) -> dict[int, str]:
    """slice index -> what its first differing host runs against `wanted`, in words: 'podmanager
    0.1.0+haaa on the hosts -> 0.1.0+hbbb' (each name that differs)."""
    drifted: dict[int, str] = {}
    for index, statuses in boots.items():
        for worker, status in sorted(statuses.items()):
            running = Versions.parse(status.versions)
            differences = wanted.differences(running) if running is not None else []
            if differences:
                drifted[index] = f"worker {worker} runs " + ", ".join(differences)
                break
    return drifted
