"""A submitted run as a script holds it: `RunHandle`, with status, follow, wait and cancel.

Everything here reads the durable store and the run's log folder, the same records the
supervisor writes on the cluster's side: a handle works from any process, a run outlives
every handle, and following a run again replays it from the start.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from podmanager.attempts import logs
from podmanager.attempts.logs import RunFolder, Tail
from podmanager.attempts.results import OutputPrinter
from podmanager.channel.run_status import RunStatus
from podmanager.client.run_view import RunView
from podmanager.core import selectors
from podmanager.core.errors import PodmanagerError, SpecError, TimeoutExceededError
from podmanager.core.events import EventKind
from podmanager.core.records import HostRef
from podmanager.core.run_results import RunResult, final_result
from podmanager.runtime.replica_protocol import ENV_SERVICE_ID
from podmanager.state import Event, StateStore
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.state.services import ServiceRecord, ServiceStore

EventCallback = Callable[[Event], None]
InterruptCallback = Callable[["RunHandle"], bool]
# Each host's output shown while following, per read (every 0.2 s): about 600 KB/s, what a
# terminal shows without falling behind the run.
LIVE_BYTES = 128 << 10
# A dead supervisor's process is started again by Ray within a second or two; past this, the
# run has none (its head went down), and `cancel` ends it itself.
ORPHAN_S = 3.0


class RunHandle(RunView):
    def __init__(self, cluster: str, run_id: str, *, runs: RunStore | None = None, store: StateStore | None = None):
        self.cluster = cluster
        self.run_id = run_id
        self.runs = runs or RunStore()
        self.store = store or StateStore()

    @property
    def folder(self) -> RunFolder:
        """Where the run's output is kept on this machine."""
        return RunFolder(self.cluster, self.run_id)

    def status(self) -> RunStatus:
        return RunStatus.of(self.record())

    def record(self) -> RunRecord:
        """The run's row in the store (its supervisor's phase and process too)."""
        run = self.runs.get(self.run_id)
        if run is None:
            raise PodmanagerError(f"RUN: no run {self.run_id!r} in {self.cluster}",
                                  hint="See the runs with 'podmanager runs'.")
        return run

    def follow(self, printer: OutputPrinter | None = None, on_event: EventCallback | None = None, *,
               after_event: int | None = None, on_interrupt: InterruptCallback | None = None,
               poll_s: float = 0.2, live_bytes: int = LIVE_BYTES) -> RunResult:
        """Every host's output and the run's events as they come (from its `run_submitted`
        event, or after event id `after_event`), until the run has finished; its result. Only
        this run's events: another run of the cluster, on other slices, is not shown.

        On KeyboardInterrupt `on_interrupt(self)` decides: True to go on following (e.g. it
        cancelled the run, whose end is still to be shown), False to stop following (the
        interrupt goes on up; the run goes on). Without it the interrupt just goes on up.

        At most `live_bytes` of each host's output are shown per `poll_s`: a program that writes
        more has its latest lines shown and a line saying how many were skipped and where
        they all are (the run's logs have every line)."""
        tail = Tail(self.folder, budget=live_bytes)
        last_event = max(self.submit_event_id() - 1, 0) if after_event is None else after_event
        while True:
            try:
                return self._follow(printer, on_event, tail, last_event, poll_s)
            except KeyboardInterrupt:
                if on_interrupt is None or not on_interrupt(self):
                    raise
                # Go on from the run's latest event: `on_interrupt` has told the user what
                # happened meanwhile (e.g. the cancel).
                events = self.store.events(self.cluster, after_id=last_event, run_id=self.run_id)
                last_event = events[-1].id if events else last_event

    def _follow(self, printer: OutputPrinter | None, on_event: EventCallback | None, tail: Tail,
                last_event: int, poll_s: float) -> RunResult:
        while True:
            run = self.status()  # read before the output, so nothing written before the end is missed
            done = run.finished
            # Events first: the attempt's start is recorded before its program writes a line.
            for event in self.store.events(self.cluster, after_id=last_event, run_id=self.run_id):
                last_event = event.id
                if on_event:
                    on_event(event)
            for read in tail.read(final=done):
                if printer is None:
                    continue
                if read.new.skipped:
                    notice = self.skip_notice(read.host, read.new.skipped, str(read.path))
                    printer(read.host, notice)  # type: ignore[arg-type]
                if read.new.text:
                    printer(read.host, read.new.text)  # type: ignore[arg-type]
            if done:
                return final_result(run)
            time.sleep(poll_s)

    def cancel(self, *, wait: bool = True, timeout_s: float = 60.0) -> RunStatus:
        """Ask the supervisor to stop every process of the run on every host, and (by default)
        wait until it has. A finished run is left as it is."""
        if self.status().active:
            self.runs.request_cancel(self.run_id)
            if wait:
                try:
                    self._wait_cancelled(timeout_s)
                except TimeoutExceededError:
                    raise TimeoutExceededError(
                        f"run {self.run_id} did not stop within {timeout_s:.0f}s of the cancel",
                        hint="Its supervisor may be down; 'podmanager down' stops every process of the cluster.",
                    ) from None
        return self.status()

    def _wait_cancelled(self, timeout_s: float) -> None:
        """Until the supervisor has stopped the run; a run whose supervisor is gone (lost with
        a Ray head, and not started again by Ray within `ORPHAN_S`) is ended here at once,
        since no one else would: its processes went with the hosts' agents."""
        from podmanager.api.resume import supervisor_gone
        from podmanager.supervision.supervisor_actor import end_run

        gone_since: float | None = None
        deadline = time.monotonic() + timeout_s
        while not self.status().finished:
            now = time.monotonic()
            if not supervisor_gone(self.record()):
                gone_since = None
            elif gone_since is None:
                gone_since = now
            elif now - gone_since >= ORPHAN_S:
                end_run(self.runs, self.run_id, f"run {self.run_id} was cancelled (its supervisor was gone)",
                        status="cancelled")
                self.store.add_event(self.cluster, EventKind.RUN_CANCELLED,
                                  f"run {self.run_id} cancelled; its supervisor was gone", run_id=self.run_id)
                return
            if now >= deadline:
                raise TimeoutExceededError(f"run {self.run_id} still {self.status().status} after {timeout_s:.0f}s")
            time.sleep(0.25)

    def submit_event_id(self) -> int:
        """The id of this run's `run_submitted` event (0 if it has none), found by the run's
        id: the cluster's latest such event may already be another run's."""
        submitted = self.store.events(self.cluster, kind=EventKind.RUN_SUBMITTED, run_id=self.run_id)
        return submitted[0].id if submitted else 0


def open_run(cluster: str, run_id: str, *, runs: RunStore, services: ServiceStore, store: StateStore) -> RunHandle:
    """The handle of one run of `cluster`; a SpecError naming the latest runs when there is
    none, and the replicas' runs when `run_id` names a service."""
    run = runs.get(run_id)
    service = services.get(run_id) if run is None else None
    if service is not None and service.cluster == cluster:
        replicas = ", ".join(f"replica {i}: {r}" for i, r in zip(service.slices, service.replica_runs)) or "none yet"
        first = service.replica_runs[0] if service.replica_runs else "RUN_ID"
        raise SpecError(f"{run_id} is a service; each of its replicas is a run with logs of its own ({replicas})",
                        hint=f"See one with 'podmanager logs --run {first}'.")
    if run is None or run.cluster != cluster:
        known = ", ".join(r.run_id for r in runs.list(cluster)[-5:]) or "none"
        raise SpecError(f"RUN: no run {run_id!r} in cluster {cluster} (latest: {known})",
                        hint="See them all with 'podmanager runs'.")
    return RunHandle(cluster, run_id, runs=runs, store=store)


def run_summary(run: RunStatus) -> dict[str, Any]:
    """One line of `podmanager runs`: where the run is and how it went so far."""
    incidents = run.ledger.incidents
    step = run.progress.step
    if step is None and run.result is not None:
        step = run.result.metrics.last_step
    return {
        "run_id": run.run_id,
        "kind": "run",
        # A replica of a service is a run of its own; this names its service.
        "service": run.workload.env.get(ENV_SERVICE_ID),
        "cluster": run.cluster,
        "status": run.status,
        "attempt": run.attempt,
        "step": step,
        "steps_per_s": run.progress.steps_per_s,
        "goodput": run.result.goodput if run.result is not None else None,
        "started": run.created_at,
        "last_incident": incidents[-1].cause if incidents else None,
        # Seconds spent setting hosts up (code, requirements), over every attempt so far.
        "setup_s": round(sum(a.setup_s for a in run.ledger.attempts), 1),
        "warnings": list(run.warnings),
    }


def latest_run_id(cluster: str) -> str:
    """The run `logs` shows when none is named: the newest one."""
    from podmanager.client.remote import is_remote, latest_run

    if is_remote(cluster):
        return latest_run(cluster)
    return logs.resolve_run(cluster, None).run_id


def run_log_lines(cluster: str, run_id: str | None = None, host: str | None = None, *,
                  follow: bool = False) -> Iterator[tuple[str, str]]:
    """(host label, line) of a run's output (default: the latest run), every host or one
    (e.g. 'slice-0/1', see `core.selectors`); with `follow`, as lines are written until the run ends.
    A service's id gives each of its replicas' runs in turn (`replica N slice-N/W`)."""
    from podmanager.client.remote import is_remote, log_lines

    if is_remote(cluster):
        yield from log_lines(cluster, run_id, host, follow=follow)
        return
    # A run's output is in files and needs no store (a damaged one included): the store is asked
    # only for an id that names no run's folder, which may be a service's.
    is_run = run_id is None or RunFolder(cluster, run_id).folder.exists()
    service = None if is_run else ServiceStore().get(run_id)
    if service is not None and service.cluster == cluster:
        yield from _service_log_lines(service, host, follow=follow)
        return
    folder = logs.resolve_run(cluster, run_id)
    only = HostRef(*selectors.parse_host(host, cluster, flag="--host")) if host else None
    if follow:
        yield from follow_lines(folder, only)
        return
    for ref, path in folder.logs(only):
        for line in logs.lines(path):
            yield ref.label, line


def _service_log_lines(service: ServiceRecord, host: str | None, *, follow: bool) -> Iterator[tuple[str, str]]:
    replicas = ", ".join(f"replica {i}: {r}" for i, r in zip(service.slices, service.replica_runs)) or "none yet"
    if follow:
        raise SpecError(f"--follow: {service.service_id} is a service; follow one of its replicas' runs "
                        f"({replicas})", hint=f"'podmanager logs -F --run {service.replica_runs[0]}'"
                        if service.replica_runs else None)
    for index, replica_run in zip(service.slices, service.replica_runs):
        for where, line in run_log_lines(service.cluster, replica_run, host):
            yield f"replica {index} {where}", line


def follow_lines(folder: RunFolder, host: HostRef | None = None, *, runs: RunStore | None = None,
                 poll_s: float = 0.5) -> Iterator[tuple[str, str]]:
    """(host label, line) as lines are written, until the run's record says it has finished.
    A run the store has no record of (a folder from before the store was lost) is over as
    far as anyone can tell: its lines so far, then the end."""
    runs = runs or RunStore()
    tail = Tail(folder, host)
    while True:
        run = runs.get(folder.run_id)  # read before the output, so nothing written before the end is missed
        done = run is None or run.finished
        for read in tail.read(final=done):
            for line in read.new.text.splitlines():
                yield read.host.label, line
        if done:
            return
        time.sleep(poll_s)
