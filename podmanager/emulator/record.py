"""Where a project's emulator is: the record it writes when it serves, read by every client."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from podmanager.core import paths


class EmulatorRecord(BaseModel):
    """A running emulator: its address and its process (pid and start time: a pid is reused)."""

    project: str
    address: str  # host:port of its gRPC services (Cloud TPU, operations, Secret Manager, control)
    secrets_api: str = ""  # Secret Manager's REST root (http://host:port/v1), as a startup script reads it
    storage_api: str = ""  # Cloud Storage's root (http://host:port): downloads from the simulated buckets
    compute_api: str = ""  # Compute Engine's root (http://host:port): the network the preflight reads
    buckets_api: str = ""  # Cloud Storage's root for the bucket calls the preflight makes ("": an older emulator)
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
    try:
        return EmulatorRecord.model_validate_json(record_path(project).read_text())
    except (OSError, ValueError):
        return None
