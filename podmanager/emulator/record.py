"""Where a project's emulator is: the record it writes when it serves, read by every client."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from podmanager.core import paths

# In the namespace mode a simulated VM reaches the emulator not on loopback (its own) but at the
# simulated internet's Google API address, relayed to the emulator's ports
# (`network/vm_network.py`); its environment names that host, and the record is read as seen from there.
APIS_HOST_ENV = "PODMANAGER_SIM_APIS_HOST"
RECORDED_HOST = "127.0.0.1"  # where the emulator serves, as its record says
ADDRESS_FIELDS = ("address", "secrets_api", "storage_api", "compute_api", "buckets_api")


class EmulatorRecord(BaseModel):
    """A running emulator: its address and its process (pid and start time: a pid is reused)."""

    project: str
    address: str  # host:port of its gRPC services (Cloud TPU, operations, Secret Manager, control)
    secrets_api: str = ""  # Secret Manager's REST root (http://host:port/v1), as a startup script reads it
    storage_api: str = ""  # Cloud Storage's root (http://host:port): downloads from the simulated buckets
    compute_api: str = ""  # Compute Engine's root (http://host:port): the network the preflight reads
    buckets_api: str = ""  # Cloud Storage's root for the bucket calls the preflight makes ("": an older emulator)
    # The namespace mode only: the address this machine's processes (the dry run's laptop) come
    # from on the simulated internet, its home router's; "" in the loopback mode.
    laptop_public: str = ""
    pid: int
    started: float  # the process's create time, as psutil reports it


def emulators_dir() -> Path:
    path = paths.sim_home() / "sim" / "emulators"
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_path(project: str) -> Path:
    return emulators_dir() / f"{paths.one_name(project, 'project')}.json"


def log_path(project: str) -> Path:
    return emulators_dir() / f"{paths.one_name(project, 'project')}.log"


def read(project: str) -> EmulatorRecord | None:
    """The project's emulator record, its addresses as this process reaches them."""
    try:
        found = EmulatorRecord.model_validate_json(record_path(project).read_text())
    except (OSError, ValueError):
        return None
    host = os.environ.get(APIS_HOST_ENV)
    if not host:
        return found
    return found.model_copy(update={name: getattr(found, name).replace(RECORDED_HOST, host, 1)
                                    for name in ADDRESS_FIELDS})
