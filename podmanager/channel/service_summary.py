"""What `runs` shows of a service, declared once: the controller builds it from its records
(`api/service_handle.py`), the channel carries it as it is, and the user's machine reads it
(`client/remote_service.py`). `podmanager runs --json` prints it dumped as JSON.

On the wire it is validated on both ends, and a reply gains fields with defaults, never loses
one (`records.py`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podmanager.core.run_results import IncidentRecord


class _Shown(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")  # ignore: a newer controller may add fields


class ReplicaState(_Shown):
    """One replica of a service, from its run's record and the router's counters."""

    replica: int  # its number: the slice it started on (after a spare swap its run is on another)
    run_id: str
    state: str  # starting | ready | draining | reloading | replacing (its slice) | restarting (its program),
    # or its run's end (failed, cancelled)
    attempt: int
    served: int | None  # results it returned since it last connected (None: not connected)
    step: int | None = None  # the checkpoint it serves (None: not connected, or the program does not say)


class ReplicaIncident(IncidentRecord):
    replica: int  # the replica (its slice) whose run had the incident


class ServiceSummary(_Shown):
    """One service as `podmanager runs` shows it; `endpoint` is the router's address where it
    runs (a controller VM's loopback: the user's machine says how to reach it instead)."""

    run_id: str
    kind: str = "service"
    cluster: str
    status: str
    message: str
    program: str
    endpoint: str
    slices: int  # one replica each; `replicas` lists only those submitted so far
    replicas: list[ReplicaState]
    requests: int
    served: int
    failures: int
    rejected: int
    p50_ms: float | None
    p99_ms: float | None
    goodput: float | None
    incidents: list[ReplicaIncident] = Field(default_factory=list)
    started: float
