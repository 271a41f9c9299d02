"""The channel's `ControllerApi` on the controller: each request answered by this machine's API
(`Cluster`, the run records, the run's log folder), converted to the channel's records.

`up` and `down` run as jobs in threads of the controller's process: they outlive the request
and the client's connection (a laptop that sleeps or loses Wi-Fi stops nothing), and a client
follows them by the cluster's events and `job`. A cluster's jobs take turns (two clients' `up`s,
or a client's `up` and the one the controller runs after a crash): the second records a
`waiting` event naming the first, waits for it, and then finds its work done. The process has
one Ray connection (Ray's driver is one per process), which every request and job shares; only
`down` ends it. A working dir arrives as the zip the client packed, is kept by its content's
digest until its submit (`controller/daemon/uploads.py`), and the run is submitted with that zip as its code,
never unpacked or packed again here."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlsplit

import yaml

from podmanager.api.cluster import Cluster
from podmanager.api.history import cluster_events
from podmanager.api.page_data import PageData
from podmanager.api.service_handle import summarize_record
from podmanager.attempts import logs
from podmanager.attempts.logs import RunFolder, read_new_lines
from podmanager.channel import records
from podmanager.channel.cluster_status import ClusterStatus
from podmanager.channel.private_files import write_private
from podmanager.channel.run_status import RunStatus
from podmanager.controller.daemon import uploads
from podmanager.core import paths, selectors
from podmanager.core.code_zip import PackedCode
from podmanager.core.errors import PodmanagerError, SpecError, TimeoutExceededError
from podmanager.core.events import EventKind
from podmanager.core.records import HostRef
from podmanager.core.spec import parse_spec
from podmanager.core.workload import Workload
from podmanager.state import Event, StateStore
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceStore


class ControllerChannelApi:
    """What a client's verbs reach through the channel (`channel/server.py::ControllerApi`)."""

    def __init__(self, store: StateStore | None = None):
        self.store = store or StateStore()
        self.runs_store = RunStore(self.store.path)
        self._jobs: dict[str, records.JobReply] = {}
        self._job_ids = itertools.count(1)
        self._clusters: dict[str, Cluster] = {}
        self._turns: dict[str, threading.Lock] = {}  # per cluster: held by the job running now
        self._running: dict[str, str] = {}  # cluster -> the id of the job that holds its turn
        self._mutex = threading.Lock()
        self._pages: dict[str, PageData] = {}

    def close(self) -> None:
        with self._mutex:
            clusters, self._clusters = list(self._clusters.values()), {}
        for cluster in clusters:
            cluster.close()

    # ------------------------------------------------------------------ reading

    def status(self, request: records.StatusRequest) -> ClusterStatus:
        # The cached Cluster, never closed here: closing is Ray's shutdown, under a running `up`.
        return self._cluster(request.cluster).status().for_the_wire()

    def events(self, request: records.EventsRequest) -> records.EventsReply:
        found = self.store.events(request.cluster, after_id=request.after_id)
        if not found and request.after_id == 0:
            cluster_events(request.cluster, store=self.store)  # a name that never had a cluster: its clear error
        return records.EventsReply(events=[event_record(e) for e in found])

    def page(self, cluster: str) -> PageData:
        """The page's data of `cluster`, kept per cluster (its `status` is read once a second at most)."""
        with self._mutex:
            found = self._pages.get(cluster)
        if found is None:
            found = PageData(cluster, store=self.store, runs=self.runs_store, services=ServiceStore(self.store.path),
                             status=lambda: self._cluster(cluster).status(), controller="the controller VM",
                             ray_hint=f"podmanager dashboard -c {cluster} --ray", ray_link=False)
            with self._mutex:
                found = self._pages.setdefault(cluster, found)
        return found

    def spec(self, request: records.StatusRequest) -> records.SpecReply:
        cluster = request.cluster
        path = client_spec_path(cluster)
        if not path.is_file():
            raise PodmanagerError(f"--cluster {cluster}: this controller was never given its spec",
                                  hint="Run 'podmanager up -f SPEC' from the machine that holds it.")
        return records.SpecReply(spec_json=path.read_text())

    def forward_target(self, cluster: str, target: str) -> tuple[str, int]:
        """Where a forward to `target` goes: the head's dashboard, or a serving service's router."""
        if target == records.DASHBOARD:
            access = self._cluster(cluster).ray_access()
            if access is None or not access.dashboard_url:
                raise PodmanagerError(f"cluster {cluster} has no Ray dashboard (its head is not up)",
                                      hint="Run 'podmanager up -f SPEC' to start the head again.")
            url = urlsplit(access.dashboard_url if "://" in access.dashboard_url else f"http://{access.dashboard_url}")
        else:
            service = ServiceStore(self.store.path).get(target)
            if service is None or service.cluster != cluster:
                raise SpecError(f"--service: cluster {cluster} has no service {target!r}",
                                hint="'podmanager runs' lists them.")
            url = urlsplit(service.endpoint)
        if url.hostname is None or url.port is None:
            raise PodmanagerError(f"{target} of {cluster} has no address podmanager reads ({url.geturl()})")
        return url.hostname, url.port

    def runs(self, request: records.StatusRequest) -> records.RunsReply:
        return records.RunsReply(runs=[RunStatus.of(r) for r in self.runs_store.list(request.cluster)])

    def run(self, request: records.RunRequest) -> records.RunReply:
        return records.RunReply(run=self._run(request.cluster, request.run_id))

    def _run(self, cluster: str, run_id: str) -> RunStatus:
        run = self.runs_store.get(run_id)
        if run is None or run.cluster != cluster:
            known = ", ".join(r.run_id for r in self.runs_store.list(cluster)[-5:]) or "none"
            raise SpecError(f"RUN: no run {run_id!r} in cluster {cluster} (latest: {known})",
                            hint="See them all with 'podmanager runs'.")
        return RunStatus.of(run)

    def watch(self, request: records.WatchRequest) -> records.WatchReply:
        run_id = request.run_id or logs.resolve_run(request.cluster, None).run_id
        run = self._run(request.cluster, run_id)
        # The record first: output written before it says "finished" is all in the read below.
        events = self.store.events(request.cluster, after_id=request.after_event, run_id=run_id)
        only = HostRef(*selectors.parse_host(request.host, request.cluster, flag="--host")) if request.host else None
        output = []
        for host, path in RunFolder(request.cluster, run_id).logs(only, waiting=not run.finished):
            label = host.label
            new = read_new_lines(path, request.offsets.get(label, 0), final=run.finished, budget=request.live_bytes)
            output.append(records.HostOutput(host=label, slice_index=host.slice_index, worker_id=host.worker_id,
                                             text=new.text, offset=new.offset, skipped=new.skipped, path=str(path)))
        return records.WatchReply(run=run, events=[event_record(e) for e in events], output=output)

    # ------------------------------------------------------------------ runs

    def keep_code(self, zipped: bytes) -> records.CodeReply:
        return records.CodeReply(digest=uploads.keep(zipped).digest)

    def submit(self, request: records.SubmitRequest) -> records.RunReply:
        workload, code = uploaded(request.workload, request.code)
        handle = self._cluster(request.cluster).submit(workload, budgets=request.budgets, code=code)
        return records.RunReply(run=handle.status())

    def cancel(self, request: records.RunRequest) -> records.RunReply:
        handle = self._cluster(request.cluster).run_handle(request.run_id)
        return records.RunReply(run=handle.cancel(wait=False))

    # ------------------------------------------------------------------ services

    def serve(self, request: records.ServeRequest) -> records.ServiceReply:
        """The service's router listens on this machine's loopback: the user reaches it through
        a forward over the channel, never through a port of the controller's."""
        from podmanager.core.serve_options import ServeOptions

        options = ServeOptions(replicas=request.replicas, host="127.0.0.1", port=0,
                               queue_timeout_s=request.queue_timeout_s, follow_checkpoints=request.follow_checkpoints)
        workload, code = uploaded(request.workload, request.code)
        handle = self._cluster(request.cluster).serve(workload, options, budgets=request.budgets, code=code)
        return records.ServiceReply(service=handle.summary_record())

    def service(self, request: records.ServiceRequest) -> records.ServiceReply:
        handle = self._cluster(request.cluster).service_handle(request.service_id)
        return records.ServiceReply(service=handle.summary_record())

    def cancel_service(self, request: records.ServiceRequest) -> records.ServiceReply:
        self._cluster(request.cluster).cancel_service(request.service_id)  # an unknown id: its clear error
        return self.service(request)

    def services(self, request: records.StatusRequest) -> records.ServicesReply:
        services = ServiceStore(self.store.path)
        return records.ServicesReply(services=[summarize_record(s, self.runs_store, time.time())
                                               for s in services.list(request.cluster)])

    # ------------------------------------------------------------------ a dry run's faults

    def fault(self, request: records.FaultRequest) -> records.FaultReply:
        return records.FaultReply(said=self._cluster(request.cluster).inject(request.fault))

    def _cluster(self, name: str) -> Cluster:
        """One `Cluster` per name for the process's life: one Ray connection for every request."""
        with self._mutex:
            found = self._clusters.get(name)
            if found is None:
                found = self._clusters[name] = Cluster.from_name(name, store=self.store)
            return found

    def _keep(self, cluster: Cluster) -> None:
        """`up`'s Cluster (of the spec it stored) serves the requests from now on; the one it
        replaces closes its cloud, not Ray (the process's one connection, which `up` uses)."""
        with self._mutex:
            old, self._clusters[cluster.name] = self._clusters.get(cluster.name), cluster
        if old is not None and old is not cluster:
            old.runtime.close_cloud()

    # ------------------------------------------------------------------ up and down, as jobs

    def start_up(self, request: records.UpRequest) -> records.JobReply:
        try:
            data = yaml.safe_load(request.spec_yaml)
        except yaml.YAMLError as error:
            raise SpecError(f"the spec is no YAML the controller reads: {error}") from None
        spec = parse_spec(data, dry_run=request.dry_run)
        spec = spec.model_copy(update={"controller": spec.controller.model_copy(update={"local": True})})
        if spec.name != request.cluster:
            raise SpecError(f"name: the spec names {spec.name!r}, not {request.cluster!r}")
        write_private(client_spec_path(spec.name), json.dumps(data))  # for the user's other machines

        def work(job_id: str) -> ClusterStatus:
            cluster = Cluster(spec, store=self.store)
            try:
                status = cluster.up(timeout_s=request.timeout_s, force=request.force,
                                    delete_on_failure=request.delete_on_failure,
                                    on_plan=lambda plan: self._set(job_id, plan=records.PlanReply(
                                        cluster=plan.cluster, summary=plan.describe(), spares=plan.spares)))
            finally:
                self._keep(cluster)
            return status.for_the_wire()

        return self._start("up", spec.name, request.timeout_s, work)

    def start_down(self, request: records.DownRequest) -> records.JobReply:
        def work(job_id: str) -> None:
            with self._mutex:
                cached = self._clusters.pop(request.cluster, None)
            if cached is not None:
                cached.close()
            cluster = Cluster.from_name(request.cluster, store=self.store)
            try:
                cluster.down(timeout_s=request.timeout_s)
            finally:
                cluster.close()  # the head is gone: so is this process's connection to it

        return self._start("down", request.cluster, request.timeout_s, work)

    def resume(self, cluster: str) -> records.JobReply | None:
        """After a reboot or a crash: `up` of the spec this controller last brought up (the head
        again, the hosts rejoining, the runs' supervisors resumed), as a job; None when this
        controller holds no such cluster yet (its first boot: the client's `up` comes next)."""
        record = self.store.get_cluster(cluster)
        if record is None:
            return None
        spec = record.spec
        timeout_s = spec.head.join_timeout_s * 4

        def work(job_id: str) -> ClusterStatus:
            found = Cluster(spec, store=self.store)
            try:
                return found.up(timeout_s=timeout_s).for_the_wire()
            finally:
                self._keep(found)

        return self._start("up", cluster, timeout_s, work)

    def job(self, request: records.JobRequest) -> records.JobReply:
        with self._mutex:
            found = self._jobs.get(request.job_id)
        if found is None:
            raise PodmanagerError(f"the controller has no job {request.job_id}: it restarted since it began",
                                  hint="Run the command again: up and down finish what an interrupted one left.")
        return found

    def _start(self, verb: str, cluster: str, timeout_s: float,
               work: Callable[[str], ClusterStatus | None]) -> records.JobReply:
        job_id = f"{verb}-{next(self._job_ids)}"
        started = records.JobReply(job_id=job_id, verb=verb, started_at=time.time())
        with self._mutex:
            self._jobs[job_id] = started

        def run() -> None:
            try:
                with self._turn(cluster, job_id, timeout_s):
                    status = work(job_id)
                self._set(job_id, done=True, status=status)
            except PodmanagerError as error:
                self._set(job_id, done=True, error=records.ErrorReply(message=error.message, hint=error.hint,
                                                                      exit_code=error.exit_code))
            except Exception as error:  # noqa: BLE001 - the client hears of it; the daemon serves on
                self._set(job_id, done=True, error=records.ErrorReply(
                    message=f"{verb} failed on the controller: {type(error).__name__}: {error}"))

        threading.Thread(target=run, name=f"podmanager-{job_id}", daemon=True).start()
        return started

    @contextlib.contextmanager
    def _turn(self, cluster: str, job_id: str, timeout_s: float) -> Iterator[None]:
        """The cluster's turn for one job; a second job says whom it waits for, then waits (up to
        its `timeout_s`). Two at once would share, and one close, the process's Ray connection."""
        with self._mutex:
            turn = self._turns.setdefault(cluster, threading.Lock())
        if not turn.acquire(blocking=False):
            with self._mutex:
                holder = self._running.get(cluster, "another job")
            self.store.add_event(cluster, EventKind.WAITING, f"waiting for the controller's {holder} of {cluster} "
                                                             "to finish", holder_job=holder)
            if not turn.acquire(timeout=timeout_s):
                raise TimeoutExceededError(f"the controller's {holder} of {cluster} still runs after {timeout_s:.0f}s",
                                           hint=f"'podmanager events -c {cluster}' shows what it does; run the "
                                                "command again once it has finished.")
        with self._mutex:
            self._running[cluster] = job_id
        try:
            yield
        finally:
            with self._mutex:
                self._running.pop(cluster, None)
            turn.release()

    def _set(self, job_id: str, **changes: object) -> None:
        with self._mutex:
            self._jobs[job_id] = self._jobs[job_id].model_copy(update=changes)


def uploaded(workload: Workload, digest: str | None) -> tuple[Workload, PackedCode | None]:
    """The workload and the code the client sent for it; its working dir names the upload (the
    client's folder is on the client's machine, where it was checked)."""
    if digest is None:
        return workload, None
    code, path = uploads.take(digest)
    return workload.model_copy(update={"working_dir": str(path)}), code


def client_spec_path(cluster: str) -> Path:
    return paths.cluster_path(cluster) / "client_spec.json"


def event_record(event: Event) -> records.EventRecord:
    return records.EventRecord(id=event.id, time=event.time, kind=event.kind, slice_index=event.slice_index,
                               message=event.message, data=event.data.as_json())
