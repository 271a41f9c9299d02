"""What podmanager's page shows of one cluster, as small JSON-ready dicts, read from this machine's
records: the state store (the event log), the run records, the services, the runs' log folders,
and `status` while the cluster is up. The page's server (`channel/page_server.py`) answers
with these, on the controller (through the channel) or on a machine that is its own controller.

Every reply is bounded: a page of runs (at most `MAX_PAGE`), of events (at most `MAX_PAGE`),
a run's output from an offset (at most `LOG_BUDGET` bytes), so a cluster with a thousand runs
and a hundred thousand events answers as fast as a new one. The whole history stays readable
after `down` (the records are kept) and after a controller reboot (they are on its disk)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from podmanager.api.history_bundle import bundle
from podmanager.api.metrics_text import MetricsInput, prometheus_text
from podmanager.api.timeline import local_timeline
from podmanager.attempts.logs import RunFolder, read_new_lines
from podmanager.channel.cluster_status import ClusterStatus
from podmanager.core import selectors
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.events import EventKind
from podmanager.core.records import HostRef
from podmanager.runtime.replica_protocol import ENV_SERVICE_ID
from podmanager.state import StateStore
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.run_timeline import of_record
from podmanager.state.service_history import ServiceHistory
from podmanager.state.services import ServiceStore

MAX_PAGE = 200
MAX_POINTS = 2000  # of a metric's series per reply (about 100 KB)
LOG_BUDGET = 256 << 10  # bytes of output per reply: a long log is read in pieces
STATUS_TTL_S = 1.0  # many pages polling share one `status` per second
KINDS = sorted(k.value for k in EventKind)


class PageData:
    """The page's replies for cluster `name`. `status` gives the cluster's live status (None or
    a PodmanagerError when it is down: the history is still shown); `controller` says where
    the controller is; `ray_hint` how to reach the Ray dashboard when no link can. A copy of
    a deleted cluster's history (`client/kept_history.py`) gives `runs_root`, where its runs'
    folders are, and `history`, what the page says of it."""

    def __init__(self, name: str, *, store: StateStore, runs: RunStore, services: ServiceStore,
                 status: Callable[[], ClusterStatus | None], controller: str = "this machine",
                 ray_hint: str | None = None, ray_link: bool = True, runs_root: Path | None = None,
                 history: str | None = None):
        self.name = name
        self.store = store
        self.runs = runs
        self.services = services
        self.service_history = ServiceHistory(store.path)
        self.runs_root = runs_root
        self.history_note = history
        self._status = status
        self.controller = controller
        self.ray_hint = ray_hint
        self.ray_link = ray_link
        self._cached: tuple[float, ClusterStatus | None, str | None] | None = None
        self._lock = threading.Lock()
        self._records: dict[str, tuple[float, RunRecord]] = {}  # run id -> (its stamp, its record), for metrics

    # ------------------------------------------------------------------ the cluster

    def status(self) -> tuple[ClusterStatus | None, str | None]:
        """The cluster's status (at most STATUS_TTL_S old) and, if it cannot be read, why."""
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < STATUS_TTL_S:
                return self._cached[1], self._cached[2]
            try:
                found, problem = self._status(), None
            except PodmanagerError as error:
                found, problem = None, error.message
            self._cached = (time.monotonic(), found, problem)
            return found, problem

    def cluster(self) -> dict[str, Any]:
        status, problem = self.status()
        record = self.store.get_cluster(self.name)
        if status is None and record is None and not self.store.events_page(self.name, limit=1):
            raise SpecError(f"--cluster: no cluster named {self.name!r} here", hint="'podmanager status' lists them.")
        created = self._slices_created()
        holders = {s: r.run_id for r in self.runs.active(self.name) for s in r.slices}
        slices = [{**s.model_dump(mode="json"), "created": created.get(s.index), "run": holders.get(s.index)}
                  for s in (status.slices if status else [])]
        swaps = self.store.events_page(self.name, kinds=(EventKind.SPARE_SWAPPED.value,), limit=50)
        return {
            "name": self.name, "now": time.time(), "history": self.history_note,
            "state": "deleted" if self.history_note else record.status if record else "down (its history is kept)",
            "backend": status.backend if status else (record.backend if record else ""),
            "project": status.project if status else "",
            "problem": problem or (status.head_problem if status else None),
            "controller": self.controller,
            "ray_address": status.ray.address if status and status.ray else None,
            "ray_dashboard_url": _url(status.ray.dashboard_url) if self.ray_link and status and status.ray
            and status.ray.dashboard_url else None,
            "ray_hint": self.ray_hint,
            "slices_observed_at": status.slices_observed_at if status else None,
            "hosts_observed_at": status.hosts_observed_at if status else None,
            "slices": slices,
            "hosts": [h.model_dump(mode="json") for h in (status.hosts if status else [])],
            "services": [{"service_id": s.service_id, "status": s.status, "endpoint": s.endpoint, "slices": s.slices}
                         for s in self.services.list(self.name)][-MAX_PAGE:],
            "swaps": [e.as_dict() for e in swaps],
        }

    def _slices_created(self) -> dict[int, float]:
        """When each slice was last asked for (its latest `slice_creating` event)."""
        found: dict[int, float] = {}
        for event in self.store.events_page(self.name, kinds=(EventKind.SLICE_CREATING.value,), limit=MAX_PAGE):
            if event.slice_index is not None:
                found.setdefault(event.slice_index, event.time)
        return found

    # ------------------------------------------------------------------ runs

    def run_list(self, *, offset: int = 0, limit: int = 50, status: str | None = None,
                 text: str | None = None) -> dict[str, Any]:
        limit = max(1, min(limit, MAX_PAGE))
        total, found = self.runs.page(self.name, offset=max(0, offset), limit=limit, status=status or None,
                                      text=text or None)
        now = time.time()
        return {"total": total, "offset": offset, "runs": [_run_row(r, now) for r in found]}

    def run(self, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        timeline = local_timeline(self.store, run, now=time.time())
        hosts = [host.label for host, _ in self._folder(run_id).logs(waiting=True)]
        return {"timeline": timeline.model_dump(mode="json"), "attempt": run.attempt, "program": _program(run),
                "service": run.workload.env.get(ENV_SERVICE_ID), "hosts": hosts}

    def logs(self, run_id: str, host: str, offset: int) -> dict[str, Any]:
        """A host's output from `offset`: whole lines, at most LOG_BUDGET bytes (the newest)."""
        run = self._run(run_id)
        if not run.finished and self.history_note is None:
            self._folder(run_id).mark_watched()  # its hosts' output is fetched sooner while shown
        path = self.log_path(run_id, host)
        if path is None:
            return {"text": "", "offset": 0, "skipped": 0, "finished": run.finished}
        new = read_new_lines(path, max(0, offset), final=run.finished, budget=LOG_BUDGET)
        return {"text": new.text, "offset": new.offset, "skipped": new.skipped, "finished": run.finished}

    def metric_points(self, run_id: str, offset: int) -> dict[str, Any]:
        """The run's metrics (loss and whatever else the program reports) from byte `offset` of its
        series on: at most MAX_POINTS points, evenly thinned."""
        self._run(run_id)
        points, end = self._folder(run_id).read_progress(max(0, offset), max_points=MAX_POINTS)
        return {"points": points, "offset": end}

    def log_path(self, run_id: str, host: str) -> Path | None:
        self._run(run_id)
        ref = HostRef(*selectors.parse_host(host, self.name, flag="host"))
        found = self._folder(run_id).logs(ref, waiting=True)
        return found[0][1] if found else None

    def _folder(self, run_id: str) -> RunFolder:
        return RunFolder(self.name, run_id, root=self.runs_root)

    def _run(self, run_id: str) -> RunRecord:
        run = self.runs.get(run_id)
        if run is None or run.cluster != self.name:
            raise SpecError(f"RUN: no run {run_id!r} in cluster {self.name}", hint="The runs page lists them.")
        return run

    # ------------------------------------------------------------------ events

    def events(self, *, before: int | None = None, kind: str | None = None, slice_index: int | None = None,
               run_id: str | None = None, limit: int = MAX_PAGE) -> dict[str, Any]:
        if kind and kind not in KINDS:
            raise SpecError(f"kind: {kind!r} is no event kind (one of {', '.join(KINDS)})")
        limit = max(1, min(limit, MAX_PAGE))
        found = self.store.events_page(self.name, before_id=before, kinds=(kind,) if kind else (),
                                       slice_index=slice_index, run_id=run_id or None, limit=limit + 1)
        return {"total": self.store.count_events(self.name), "kinds": KINDS, "more": len(found) > limit,
                "events": [{**e.as_dict(), "run_id": e.run_id} for e in found[:limit]]}

    # ------------------------------------------------------------------ services

    def service(self, service_id: str) -> dict[str, Any]:
        service = self.services.get(service_id)
        if service is None or service.cluster != self.name:
            raise SpecError(f"SERVICE: no service {service_id!r} in cluster {self.name}")
        now = time.time()
        replicas = [r for r in (self.runs.get(i) for i in service.replica_runs) if r is not None]
        spans = [(a.started, a.ended) for r in replicas for a in of_record(r, [], now=now).attempts]
        changes = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans if end < now])
        series, count = [], 0
        for at, step in changes:
            count += step
            series.append([at, count])
        incidents = [{"time": i.detected_at, "run_id": r.run_id, "kind": i.cause, "slices": i.slices,
                      "detect_s": i.detect_s, "recover_s": i.recover_s} for r in replicas for i in r.ledger.incidents]
        return {"service_id": service_id, "status": service.status, "program": service.program, "now": now,
                "start": service.created_at, "end": now if not service.finished else service.updated_at,
                "counters": service.counters.model_dump(mode="json"), "goodput": service.counters.goodput,
                "replicas_over_time": series, "preemptions": sorted(incidents, key=lambda i: i["time"]),
                # [start, width_s, requests, failed, p50_ms, p99_ms, replicas] rows, oldest first (at most ~5,900)
                "history": [point.as_list() for point in self.service_history.series(service_id)]}

    # ------------------------------------------------------------------ the history, to keep

    def history(self) -> bytes:
        """The cluster's history as one zip (`api/history_bundle.py`): what the user's machine
        keeps before `down` deletes this controller."""
        if self.history_note is not None:
            raise SpecError(f"this is a copy of {self.name}'s history already")
        return bundle(self.store, self.name)

    # ------------------------------------------------------------------ metrics

    def metrics(self) -> str:
        status, _ = self.status()
        return prometheus_text(MetricsInput(cluster=self.name, runs=self._every_run(), status=status,
                                            services=self.services.list(self.name)), now=time.time())

    def _every_run(self) -> list[RunRecord]:
        """Every run's record, read again only when written since the last read (a scrape of a
        cluster with a thousand finished runs parses none of them again)."""
        stamps = self.runs.stamps(self.name)
        with self._lock:
            kept = {run_id: held for run_id, held in self._records.items() if run_id in stamps}
        for run_id, stamp in stamps.items():
            if run_id not in kept or kept[run_id][0] != stamp:
                found = self.runs.get(run_id)
                if found is not None:
                    kept[run_id] = (stamp, found)
        with self._lock:
            self._records = kept
        return sorted((record for _, record in kept.values()), key=lambda r: r.created_at)


def _run_row(run: RunRecord, now: float) -> dict[str, Any]:
    step = run.progress.step
    if step is None and run.result is not None:
        step = run.result.metrics.last_step
    service = run.workload.env.get(ENV_SERVICE_ID)
    return {"run_id": run.run_id, "kind": "replica" if service else "run", "service": service, "status": run.status,
            "attempt": run.attempt, "step": step, "goodput": run.result.goodput if run.result else None,
            "slices": run.slices, "started": run.created_at,
            "elapsed_s": (run.updated_at if run.finished else now) - run.created_at, "program": _program(run)}


def _program(run: RunRecord) -> str:
    workload = run.workload
    text = workload.name or workload.entrypoint or " ".join(workload.command or [])
    return text[:200]


def _url(address: str) -> str:
    return address if "://" in address else f"http://{address}"
