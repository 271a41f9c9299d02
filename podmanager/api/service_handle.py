"""A service as a client sees it: its record, its replicas' states, waiting until they are
ready. Reads the store only (no Ray), like `RunHandle`; `Cluster.cancel_service` stops it."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from podmanager.channel.service_summary import (
    ReplicaIncident,
    ReplicaState,
    ServiceSummary,
)
from podmanager.client.service_wait import (
    REPLICA_ENDS,
    follow_summaries,
    wait_for_replicas,
)
from podmanager.core.errors import SpecError
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_state import Replacing
from podmanager.state.services import SERVING, ServiceRecord, ServiceStore

FRESH_COUNTERS_S = 5.0  # counters older than this say nothing of which replicas are ready


def replica_states(service: ServiceRecord, runs: list[RunRecord | None], now: float) -> list[ReplicaState]:
    """Each replica's state from its run's record and the router's counters (when fresh)."""
    counters = service.counters
    fresh = counters.at is not None and now - counters.at <= FRESH_COUNTERS_S
    connected = {c.replica: c for c in counters.replicas} if fresh else {}
    states = []
    for index, run_id, run in zip(service.slices, service.replica_runs, runs):
        seen = connected.get(index)
        if run is None or run.finished:
            state = run.status if run is not None else "missing"
        elif run.status == "recovering":  # after a failed attempt: its slice replaced, or only its program again
            state = "replacing" if isinstance(run.phase, Replacing) and run.phase.slices else "restarting"
        elif seen is not None and seen.run_id == run_id:
            state = seen.state
        else:
            state = "starting"
        states.append(ReplicaState(replica=index, run_id=run_id, state=state, attempt=run.attempt if run else 0,
                                   served=seen.served if seen is not None else None,
                                   step=seen.step if seen is not None else None))
    return states


def summary_record(service: ServiceRecord, replicas: list[ReplicaState],
                   incidents: list[ReplicaIncident] | None = None,
                   endings: dict[int, str] | None = None) -> ServiceSummary:
    """One entry of `podmanager runs` for a service; `incidents`: its replicas' runs' (each
    with its replica), oldest first; `endings`: why each ended replica's run ended."""
    counters = service.counters
    status, message = service.status, service.message
    if status == SERVING and replicas and all(r.state in REPLICA_ENDS for r in replicas):
        # Nothing is left to serve; the router answers 503 until the service is cancelled.
        status = "failed"
        ended = "; ".join(f"replica {r.replica} (run {r.run_id}) {r.state}"
                          + (f": {endings[r.replica]}" if endings and r.replica in endings else "") for r in replicas)
        message = (f"every replica's run ended. {ended}. See each with 'podmanager logs --run RUN_ID'; "
                   f"'podmanager cancel {service.service_id}' stops its router")
    return ServiceSummary(
        run_id=service.service_id, cluster=service.cluster, status=status, message=message,
        program=service.program, endpoint=service.endpoint, slices=len(service.slices), replicas=replicas,
        requests=counters.requests, served=counters.served, failures=counters.failed, rejected=counters.rejected,
        p50_ms=counters.p50_ms, p99_ms=counters.p99_ms, goodput=counters.goodput, incidents=incidents or [],
        started=service.created_at)


def service_summary(service: ServiceRecord, replicas: list[ReplicaState],
                    incidents: list[ReplicaIncident] | None = None,
                    endings: dict[int, str] | None = None) -> dict[str, Any]:
    """`summary_record` as `podmanager runs --json` prints it."""
    return summary_record(service, replicas, incidents, endings).model_dump(mode="json")


def summarize(service: ServiceRecord, runs: RunStore, now: float) -> dict[str, Any]:
    """`summarize_record` as `podmanager runs --json` prints it."""
    return summarize_record(service, runs, now).model_dump(mode="json")


def summarize_record(service: ServiceRecord, runs: RunStore, now: float) -> ServiceSummary:
    """`summary_record` of a service, its replicas' states and incidents read from their runs."""
    replica_runs = [runs.get(r) for r in service.replica_runs]
    return summary_record(service, replica_states(service, replica_runs, now),
                           replica_incidents(service, replica_runs), replica_endings(service, replica_runs))


def replica_endings(service: ServiceRecord, runs: list[RunRecord | None]) -> dict[int, str]:
    """Why each ended replica's run ended: its result's message and its program's last line."""
    endings = {}
    for index, run in zip(service.slices, runs):
        if run is None or not run.finished or run.result is None:
            continue
        text = run.result.message
        attempts = run.result.attempt_log
        lines = [line for line in attempts[-1].last_lines if line.strip()] if attempts else []
        if lines and lines[-1].strip() not in text:
            text += f" (its last line: {lines[-1].strip()})"
        endings[index] = text
    return endings


def replica_incidents(service: ServiceRecord, runs: list[RunRecord | None]) -> list[ReplicaIncident]:
    """Every incident of the service's replicas (from their runs' ledgers), oldest first."""
    found = [ReplicaIncident(**incident.model_dump(), replica=index) for index, run in zip(service.slices, runs)
             if run is not None for incident in run.ledger.incidents]
    return sorted(found, key=lambda i: i.detected_at)


class ServiceHandle:
    def __init__(self, cluster: str, service_id: str, *, services: ServiceStore | None = None,
                 runs: RunStore | None = None):
        self.cluster = cluster
        self.service_id = service_id
        self.services = services or ServiceStore()
        self.runs = runs or RunStore(self.services.path)

    def record(self) -> ServiceRecord:
        service = self.services.get(self.service_id)
        if service is None:
            raise SpecError(f"no service {self.service_id!r}", hint="See them with 'podmanager runs'.")
        return service

    @property
    def endpoint(self) -> str:
        return self.record().endpoint

    def replicas(self) -> list[ReplicaState]:
        service = self.record()
        return replica_states(service, [self.runs.get(r) for r in service.replica_runs], time.time())

    def summary_record(self) -> ServiceSummary:
        return summarize_record(self.record(), self.runs, time.time())

    def summary(self) -> dict[str, Any]:
        """As `podmanager runs --json` prints it."""
        return self.summary_record().model_dump(mode="json")

    def follow(self, on_summary: Callable[[dict[str, Any]], None], *, every_s: float = 2.0) -> dict[str, Any]:
        """Call `on_summary` with the service's summary every `every_s` until it is no longer
        serving (cancelled, or every replica ended); return the last summary."""
        return follow_summaries(self.summary, on_summary, every_s)

    @property
    def reach(self) -> str:
        """Where a user reaches the service from here, as a phrase."""
        return f"at {self.endpoint}"

    @contextmanager
    def reachable(self, *, port: int = 0) -> Iterator[str]:
        """The endpoint to send requests to while the block runs: this machine runs the router
        (a forward is only needed from a machine that is not the controller)."""
        yield self.endpoint

    def wait_ready(self, replicas: int | None = None, *, timeout_s: float = 300.0) -> list[ReplicaState]:
        """Wait until `replicas` (default: all) replicas are ready; a replica run that ended
        meanwhile ends the wait with its state."""
        # All: every slice of the service, also those whose replica run is still being submitted.
        wanted = len(self.record().slices) if replicas is None else replicas
        return wait_for_replicas(self.service_id, self.replicas, wanted, timeout_s=timeout_s, interval_s=0.25)

    def mark_cancelled(self) -> ServiceRecord:
        """Record that the service is to stop (before its replicas and router are stopped, so
        nothing reading the record takes it for serving meanwhile)."""
        service = self.record()
        if not service.finished:
            service.status, service.message = "cancelled", f"service {self.service_id} was cancelled"
            self.services.save(service)
        return service


def open_service(cluster: str, service_id: str, *, services: ServiceStore, runs: RunStore) -> ServiceHandle:
    """The handle of one service of `cluster`; a SpecError naming the latest ones when there is none."""
    service = services.get(service_id)
    if service is None or service.cluster != cluster:
        known = ", ".join(s.service_id for s in services.list(cluster)[-5:]) or "none"
        raise SpecError(f"SERVICE: no service {service_id!r} in cluster {cluster} (latest: {known})",
                        hint="See them all with 'podmanager runs'.")
    return ServiceHandle(cluster, service_id, services=services, runs=runs)
