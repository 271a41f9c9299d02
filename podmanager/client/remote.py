"""A cluster whose controller is a VM (`controller.local: false`), as the user's machine sees it:
the same verbs as `Cluster` (both a `cluster_client.ClusterClient`), each a request over the
cluster's channel (`channel_client.py`).

Nothing here reads the controller's files or loads Ray: the client holds only its pointer to
the cluster (`client/pinned.py`: the controller's address, its pinned certificate, the token).
A run's working dir is packed here and shipped; its output and events come back through
`watch`, so `run`, `attach`, `logs -F`, Ctrl-C (detach) and a second Ctrl-C (cancel) behave
as they do next to the controller."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import yaml

from podmanager.channel import records
from podmanager.channel.cluster_status import ClusterStatus
from podmanager.channel.errors import ChannelCredentialError, ChannelError, RemoteError
from podmanager.channel.run_status import RunStatus
from podmanager.channel.service_summary import ServiceSummary
from podmanager.client import pinned
from podmanager.client.channel_client import ChannelClient
from podmanager.client.cluster_client import Reached
from podmanager.client.controller_faults import crash_controller, stop_controller
from podmanager.client.forward import Forward
from podmanager.client.patience import patiently
from podmanager.client.remote_service import RemoteServiceHandle, as_seen_here, reach
from podmanager.client.run_to_end import run_to_end
from podmanager.client.run_view import RunView
from podmanager.core import code_zip
from podmanager.core.clock import poll_until
from podmanager.core.errors import PodmanagerError, SpecError, TimeoutExceededError
from podmanager.core.event_data import Event, EventData, stored
from podmanager.core.events import EventKind
from podmanager.core.records import HostRef
from podmanager.core.run_results import RunResult, final_result
from podmanager.core.spec import ClusterSpec, parse_spec
from podmanager.core.workload import Workload

if TYPE_CHECKING:
    from podmanager.core.faults import FaultKind
    from podmanager.core.serve_options import ServeOptions

EventCallback = Callable[[Event], None]
Printer = Callable[[HostRef, str], None]
POLL_S = 0.2  # a follower's pace, as `RunHandle.follow`'s
LIVE_BYTES = 128 << 10  # each host's output shown per read while following (`run_handle.LIVE_BYTES`)
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
REMOTE_OPTIONS = ("down_on_exit", "on_event")  # of `Cluster`'s keyword arguments, those `RemoteCluster` takes


def remote_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """`Cluster`'s keyword arguments that a cluster whose controller is a VM takes too
    (`down_on_exit`, `on_event`); the others (a backend, a store, a clock) are the controller's
    own, so giving one is refused (exit 2) rather than ignored."""
    theirs = sorted(set(options) - set(REMOTE_OPTIONS))
    if theirs:
        raise SpecError(f"{', '.join(theirs)}: cluster {name}'s controller is a VM (controller.local: false), "
                        "which keeps its own backend, state store and clock",
                        hint="Leave them out; only down_on_exit and on_event apply to it.")
    return options


def is_remote(name: str) -> bool:
    """Whether this machine reaches the cluster `name` through a channel (it holds its pointer)."""
    return pinned.folder(name).is_dir()


def say_here(cluster: str, on_event: EventCallback | None) -> Callable[[EventKind, str], None]:
    """Events of what this machine does itself (the controller VM): shown as the controller's are."""
    def say(kind: EventKind, message: str) -> None:
        if on_event is not None:
            on_event(Event(id=0, cluster=cluster, time=time.time(), kind=kind.value, slice_index=None,
                           message=message, data=EventData()))
    return say


def as_event(cluster: str, event: records.EventRecord) -> Event:
    return Event(id=event.id, cluster=cluster, time=event.time, kind=event.kind, slice_index=event.slice_index,
                 message=event.message, data=stored(event.kind, dict(event.data)))


def as_seen_here_status(status: ClusterStatus) -> ClusterStatus:
    """The controller's status with each service's endpoint as this machine reaches it: the
    router listens on the controller's loopback (`podmanager dashboard` forwards it here)."""
    services = [s.model_copy(update={"endpoint": reach(status.name, s.service_id)}) for s in status.services]
    return status.model_copy(update={"services": services})


def job_started(job: records.JobReply) -> float:
    return job.started_at


class RemotePlan:
    """`up`'s plan as the controller made it (`UpPlan`'s `describe` and `as_dict`)."""

    def __init__(self, plan: records.PlanReply):
        self.cluster = plan.cluster
        self.summary = plan.summary
        self.spares = plan.spares

    def describe(self) -> str:
        return self.summary

    def as_dict(self) -> dict[str, str | None]:
        return {"cluster": self.cluster, "summary": self.summary, "spares": self.spares}


class RemoteRunHandle(RunView):
    """`RunHandle` over the channel: status, follow, wait, cancel."""

    wait_poll_s = 0.5  # each read is a request to the controller

    def __init__(self, client: ChannelClient, cluster: str, run_id: str):
        self.client = client
        self.cluster = cluster
        self.run_id = run_id

    def status(self) -> RunStatus:
        return patiently(lambda: self.client.run(self.cluster, self.run_id).run)

    def follow(self, printer: Printer | None = None, on_event: EventCallback | None = None, *,
               after_event: int | None = None, on_interrupt: Callable[[RemoteRunHandle], bool] | None = None,
               poll_s: float = POLL_S, live_bytes: int = LIVE_BYTES) -> RunResult:
        """As `RunHandle.follow`: every host's output and the run's events until it has finished."""
        seen = records.WatchRequest(cluster=self.cluster, run_id=self.run_id, after_event=after_event or 0,
                                    live_bytes=live_bytes)
        while True:
            try:
                return self._follow(printer, on_event, seen, poll_s)
            except _Interrupted as stopped:
                seen = stopped.seen
                if on_interrupt is None or not on_interrupt(self):
                    raise KeyboardInterrupt from None

    def _follow(self, printer: Printer | None, on_event: EventCallback | None, seen: records.WatchRequest,
                poll_s: float) -> RunResult:
        while True:
            try:
                warn = say_here(self.cluster, on_event)
                reply = patiently(lambda: self.client.watch(seen), lambda message: warn(EventKind.WARNING, message))
                offsets = dict(seen.offsets)
                for event in reply.events:
                    if on_event:
                        on_event(as_event(self.cluster, event))
                for output in reply.output:
                    offsets[output.host] = output.offset
                    host = HostRef(output.slice_index, output.worker_id)
                    if printer is not None and output.skipped:
                        printer(host, self.skip_notice(host, output.skipped))
                    if printer is not None and output.text:
                        printer(host, output.text)
                seen = seen.model_copy(update={"offsets": offsets,
                                               "after_event": reply.events[-1].id if reply.events else seen.after_event})
                if reply.run.finished:
                    return final_result(reply.run)
                time.sleep(poll_s)
            except KeyboardInterrupt:
                raise _Interrupted(seen) from None

    def cancel(self, *, wait: bool = True, timeout_s: float = 60.0) -> RunStatus:
        run = self.client.cancel(self.cluster, self.run_id).run
        if wait and not run.finished:
            poll_until(lambda: self.status().finished, timeout_s=timeout_s, interval_s=0.25,
                       on_timeout=lambda: TimeoutExceededError(
                           f"run {self.run_id} did not stop within {timeout_s:.0f}s of the cancel",
                           hint="Its supervisor may be down; 'podmanager down' stops every process of the cluster."))
            run = self.status()
        return run


class _Interrupted(Exception):
    """A Ctrl-C while following, carrying what the follower had seen so far."""

    def __init__(self, seen: records.WatchRequest):
        super().__init__("interrupted")
        self.seen = seen


class RemoteCluster:
    """One cluster whose controller this machine reaches through the channel.

    As a context manager it behaves as `Cluster`: leaving the block closes the connection, and
    with `down_on_exit=True` first runs `down()`, also when the block raised. `on_event` sees
    the events of every verb, as each verb's own `on_event` does."""

    def __init__(self, name: str, client: ChannelClient | None = None, *, down_on_exit: bool = False,
                 on_event: EventCallback | None = None):
        self.name = name
        self.down_on_exit = down_on_exit
        self.on_event = on_event
        self._client = client

    @property
    def client(self) -> ChannelClient:
        """The channel to the controller, opened on first use from this machine's pointer."""
        if self._client is None:
            self._client = ChannelClient.for_cluster(self.name)
        return self._client

    def __enter__(self) -> RemoteCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.down_on_exit:
                self.down()
        finally:
            self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _told(self, on_event: EventCallback | None) -> EventCallback | None:
        """The object's listener and a verb's own, both told of each event."""
        mine = self.on_event
        if mine is None or on_event is None:
            return on_event or mine
        given = on_event

        def tell(event: Event) -> None:
            mine(event)
            given(event)
        return tell

    # ------------------------------------------------------------------ reading

    def status(self) -> ClusterStatus:
        return as_seen_here_status(self.client.status(self.name))

    def events(self, *, after_id: int = 0) -> list[Event]:
        return [as_event(self.name, e) for e in self.client.events(self.name, after_id=after_id).events]

    def runs(self) -> list[RunStatus]:
        return self.client.runs(self.name).runs

    def has_service(self, service_id: str) -> bool:
        # Patiently: `attach` asks this first, also of a controller that is rebooting.
        return any(s.run_id == service_id for s in patiently(self.service_summaries))

    def service_summaries(self) -> list[ServiceSummary]:
        return [as_seen_here(s) for s in self.client.services(self.name).services]

    def run_handle(self, run_id: str) -> RemoteRunHandle:
        run = RemoteRunHandle(self.client, self.name, run_id)
        run.status()  # an unknown run: the controller's clear error, now
        return run

    # ------------------------------------------------------------------ runs

    def submit(self, workload: Workload, *, budgets: dict[str, int] | None = None) -> RemoteRunHandle:
        """As `Cluster.submit`: the working dir and a requirements file are read here, on this
        machine, and shipped; the run is checked and started on the controller."""
        workload, code = self._ship(workload)
        reply = self.client.submit(records.SubmitRequest(cluster=self.name, workload=workload, code=code,
                                                         budgets=budgets or {}))
        return RemoteRunHandle(self.client, self.name, reply.run.run_id)

    def _ship(self, workload: Workload) -> tuple[Workload, str | None]:
        """The working dir packed here, checked against this folder and sent (a typo in the
        program, or a folder too large, said before anything is sent): the workload as the
        controller gets it, and its code's digest."""
        workload = workload.submitted(Path.cwd())
        if workload.working_dir is None:
            return workload, None
        workload.check_program()
        code = code_zip.pack(workload.working_dir)
        workload.check_program(code.files)  # .gitignore may leave the program out
        digest = self.client.keep_code(code.data).digest
        return workload.model_copy(update={"working_dir": "."}), digest

    def run(self, workload: Workload, *, printer: Printer | None = None, budgets: dict[str, int] | None = None,
            down_on_exit: bool = False, on_interrupt: Callable[[RemoteRunHandle], bool] | None = None,
            on_event: EventCallback | None = None) -> RunResult:
        """As `Cluster.run`: submit, follow to the end; an exception while following cancels
        the run unless `on_interrupt` chose to leave it going."""
        told = self._told(on_event)
        return run_to_end(lambda: self.submit(workload, budgets=budgets),
                          lambda handle: handle.follow(printer, told, on_interrupt=on_interrupt),
                          interrupt_handled=on_interrupt is not None, down=self.down if down_on_exit else None)

    def down(self, *, timeout_s: float = 600.0, on_event: EventCallback | None = None) -> None:
        """As `Cluster.down`: the controller tears the cluster down, then this machine deletes
        the controller VM (`down_remote`)."""
        self.close()  # the pointer goes with the controller VM
        down_remote(self.name, timeout_s=timeout_s, on_event=self._told(on_event))

    # ------------------------------------------------------------------ up and down

    def up(self, *, timeout_s: float = 1800.0, force: bool = False, on_plan: Callable[[RemotePlan], None] | None = None,
           on_event: EventCallback | None = None, delete_on_failure: bool = False) -> ClusterStatus:
        """The controller VM made (or found) and serving, then `up` of the spec run there (the
        one this machine's `up` kept with its pointer, or `RemoteSpec`'s)."""
        from podmanager.client.controller_machine import ControllerMachine
        from podmanager.cluster.controller_preflight import before_controller_vm

        on_event = self._told(on_event)
        say = say_here(self.name, on_event)
        self._use_spec(*before_controller_vm(self.spec, self.raw, say))  # APIs, permissions, the cluster's accounts
        machine = ControllerMachine(self.spec, say)
        plan = machine.plan()  # what cannot change in place is refused before anything changes, the pointer too
        # The pointer first: an `up` interrupted from here on is finished by `up` or removed by `down`.
        pinned.save_spec(self.name, json.dumps(self.raw))
        machine.bring_up(timeout_s=timeout_s, plan=plan)
        self.close()  # the controller's certificate was pinned again: the channel opens with it
        # A controller VM started again still shows its last boot's `serving` until its daemon
        # writes anew: its channel is waited for before the spec is sent.
        patiently(lambda: _answers(self), lambda why: say(EventKind.CONTROLLER_BOOT, why), wait_s=timeout_s)
        job = self.client.start_up(records.UpRequest(
            cluster=self.name, spec_yaml=yaml.safe_dump(self.raw), timeout_s=timeout_s, force=force,
            delete_on_failure=delete_on_failure))
        done = self.follow_job(job, on_event, on_plan=on_plan, after_event=self.last_event_id_before(job))
        assert done.status is not None
        return as_seen_here_status(done.status)

    def follow_job(self, job: records.JobReply, on_event: EventCallback | None, *,
                   on_plan: Callable[[RemotePlan], None] | None = None, after_event: int = 0) -> records.JobReply:
        """Follow a job on the controller (`up`, `down`) by the cluster's events until it ends;
        its error raised here as if it had happened on this machine."""
        planned = False
        while True:
            job = patiently(lambda: self.client.job(job.job_id))
            if job.plan is not None and not planned and on_plan is not None:
                on_plan(RemotePlan(job.plan))
                planned = True
            try:
                events = self.client.events(self.name, after_id=after_event).events
            except PodmanagerError:
                events = []  # a cluster the controller has no record of yet
            for event in events:
                after_event = event.id
                if on_event is not None:
                    on_event(as_event(self.name, event))
            if job.done:
                if job.error is not None:
                    raise RemoteError(job.error.message, hint=job.error.hint, exit_code=job.error.exit_code)
                return job
            time.sleep(POLL_S)

    def last_event_id_before(self, job: records.JobReply) -> int:
        """Where to follow a job's events from: the controller's events before it was asked for
        it are an earlier command's. (A job's first events may come before this read: the few
        lost are in `podmanager events`.)"""
        try:
            found = self.client.events(self.name).events
        except PodmanagerError:
            return 0
        return max((e.id for e in found if e.time < job_started(job)), default=0)

    @property
    def spec(self) -> ClusterSpec:
        """The spec this machine's `up` gave (kept with its pointer)."""
        return stored_spec(self.name)

    def _use_spec(self, spec: ClusterSpec, raw: dict[str, Any]) -> None:
        """`up` goes on with this spec (the preflight's: it names the accounts `up` made), saved
        with the pointer before the controller VM is made."""
        pinned.save_spec(self.name, json.dumps(raw))

    @property
    def raw(self) -> dict[str, Any]:
        """That spec's fields as written, as `up` sends them to the controller."""
        self.spec  # none kept here: its clear error
        return json.loads(pinned.load_spec_json(self.name) or "{}")

    def ray_access(self, *, required: bool = False) -> None:
        """Ray's own tools reach a VM controller's head through `podmanager dashboard --ray`, which
        prints the exports; here is no address this machine could use."""
        raise SpecError(f"--cluster {self.name}: its Ray head is on its controller VM",
                        hint=f"'podmanager dashboard -c {self.name} --ray' forwards it here and prints the exports for "
                             "ray job submit and the dashboard.")

    def reach_here(self, target: str, *, port: int = 0) -> Reached:
        """A local port forwarded over the channel to the controller's side, started."""
        started = forward(self.name, target, port=port)
        return Reached(f"http://127.0.0.1:{started.port}", started)

    # ------------------------------------------------------------------ services

    def serve(self, workload: Workload, options: ServeOptions | None = None, *,
              budgets: dict[str, int] | None = None) -> RemoteServiceHandle:
        """As `Cluster.serve`: the router listens on the controller's loopback, and this machine
        reaches it through a forward (`RemoteServiceHandle.reachable`); so the endpoint's
        address is this machine's loopback, and `options.port` that forward's port."""
        from podmanager.core.serve_options import ServeOptions

        options = options or ServeOptions()
        if options.host not in LOOPBACK_NAMES:
            raise SpecError(f"--host {options.host}: cluster {self.name}'s services are reached through a forward "
                            "to this machine's loopback", hint="Leave --host out (or give 127.0.0.1).")
        workload, code = self._ship(workload)
        reply = self.client.serve(records.ServeRequest(
            cluster=self.name, workload=workload, code=code, budgets=budgets or {}, replicas=options.replicas,
            queue_timeout_s=options.queue_timeout_s, follow_checkpoints=options.follow_checkpoints))
        return RemoteServiceHandle(self.client, self.name, reply.service.run_id)

    def service_handle(self, service_id: str) -> RemoteServiceHandle:
        handle = RemoteServiceHandle(self.client, self.name, service_id)
        handle.summary_record()  # an unknown id: the controller's clear error, now
        return handle

    def cancel_service(self, service_id: str) -> ServiceSummary:
        return self.client.cancel_service(self.name, service_id).service

    # ------------------------------------------------------------------ a dry run's faults

    def inject(self, fault: FaultKind) -> str:
        """Sent to the controller, which injects it as `sim` next to it would: into its
        cluster's simulated cloud or hosts, said in its event log."""
        return self.client.fault(records.FaultRequest(cluster=self.name, fault=fault)).said

    def head_crash(self) -> str:
        raise SpecError(f"--cluster: {self.name}'s Ray head runs on its controller VM",
                        hint=f"'podmanager sim controller-crash -c {self.name}' crashes that machine, head and all.")

    def controller_crash(self) -> str:
        """From here, as Compute Engine's own faults come: the controller cannot answer it."""
        return crash_controller(self.spec, say_here(self.name, self.on_event))

    def controller_stop(self, *, suspend: bool = False) -> str:
        return stop_controller(self.spec, say_here(self.name, self.on_event), suspend=suspend)


def _answers(remote: RemoteCluster) -> bool:
    """Whether the controller answers its channel (a refusal is an answer)."""
    try:
        remote.client.events(remote.name)
    except ChannelError:
        raise
    except PodmanagerError:
        pass
    return True


# ---------------------------------------------------------------------- reads from here

def stored_spec(name: str) -> ClusterSpec:
    text = pinned.load_spec_json(name)
    if text is None:
        raise SpecError(f"--cluster {name}: this machine holds no spec of it",
                        hint="'podmanager down -f SPEC' deletes it by its spec.")
    return parse_spec(json.loads(text), source=f"the spec of {name} kept on this machine")


def log_lines(name: str, run_id: str | None, host: str | None, *, follow: bool) -> Iterator[tuple[str, str]]:
    """`run_log_lines` over the channel: (host label, line), with `follow` until the run ends."""
    with RemoteCluster(name) as remote:
        seen = records.WatchRequest(cluster=name, run_id=run_id, host=host)
        while True:
            reply = remote.client.watch(seen)
            offsets = dict(seen.offsets)
            for output in reply.output:
                offsets[output.host] = output.offset
                for line in output.text.splitlines():
                    yield output.host, line
            seen = seen.model_copy(update={"offsets": offsets, "run_id": reply.run.run_id})
            if not follow or reply.run.finished:
                return
            time.sleep(0.5)


def latest_run(name: str) -> str:
    with RemoteCluster(name) as remote:
        found = remote.runs()
    if not found:
        raise SpecError(f"--run: cluster {name} has no runs yet", hint="Start one with 'podmanager run'.")
    return found[-1].run_id


def forward(name: str, target: str, *, port: int = 0) -> Forward:
    """A local port reaching `target` (the dashboard, or a service's id) of a cluster whose
    controller is a VM, started; the caller stops it. The credentials are checked first (a
    `status`), so a refused token is said at once rather than as closed connections."""
    credentials = pinned.load(name)
    with ChannelClient(credentials) as client:
        status = as_seen_here_status(client.status(name))
    if target != records.DASHBOARD:
        status.service(target)  # an unknown id: its clear error, before any port is opened
    started = Forward(credentials, target, port=port)
    started.start()
    return started


def ray_token_file(name: str) -> Path:
    """The cluster's Ray token, read from Secret Manager with this user's credentials into an
    owner-only file of this machine's pointer (`ray job submit` through the forward needs it)."""
    from podmanager.channel.private_files import write_private
    from podmanager.cloud.gcp.secrets import TokenSecrets
    from podmanager.cluster import backends

    spec = stored_spec(name)
    with TokenSecrets(spec.project or "", emulator_host=backends.secrets_host(spec)) as secrets_api:
        token = secrets_api.read(name)
    if not token:
        raise PodmanagerError(f"Secret Manager holds no Ray token of {name}", hint="'podmanager up' makes it again.")
    path = pinned.folder(name) / "ray-token"
    write_private(path, token)
    return path


def down_remote(name: str, *, timeout_s: float = 600.0, on_event: EventCallback | None = None,
                spec: ClusterSpec | None = None) -> None:
    """`down` of a cluster whose controller is a VM: the controller tears the cluster down (runs
    cancelled, slices deleted), then this machine deletes the controller VM, its rule and the
    channel's secret. A controller that cannot be reached is no reason to keep anything: the
    slices are then found by their label from here."""
    from podmanager.client.controller_machine import ControllerMachine
    from podmanager.cluster.teardown import down_by_label

    spec = spec or stored_spec(name)
    say = say_here(name, on_event)
    try:
        with RemoteCluster(name) as remote:
            job = remote.client.start_down(records.DownRequest(cluster=name, timeout_s=timeout_s))
            remote.follow_job(job, on_event, after_event=remote.last_event_id_before(job))
        from podmanager.client.kept_history import keep_before_delete

        keep_before_delete(name, say)  # the records are on the VM's disk: the page reads this copy after down
    except (ChannelError, ChannelCredentialError) as unreachable:
        say(EventKind.WARNING, f"the controller cannot be reached ({unreachable.message}); deleting the slices by "
                               "their label from here")
        # The slices first, so they stop billing whatever befalls the VM's delete (a stopped VM's
        # included); then the VM; then the slices once more: a controller that was only out of
        # reach may have made one again meanwhile.
        down_by_label(name, dry_run=spec.simulated, project=spec.project, zones=spec.zones, timeout_s=timeout_s)
        ControllerMachine(spec, say).tear_down(timeout_s=timeout_s)
        down_by_label(name, dry_run=spec.simulated, project=spec.project, zones=spec.zones, timeout_s=timeout_s)
        return
    except RemoteError as refused:
        if "no cluster named" not in refused.message:  # a controller whose own up never ran: nothing to tear down
            raise
    ControllerMachine(spec, say).tear_down(timeout_s=timeout_s)
