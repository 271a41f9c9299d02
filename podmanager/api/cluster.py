"""The Python API: one `Cluster` object with the verbs the CLI exposes.

    cluster = Cluster.from_yaml("infra/examples/v4-16.yaml", dry_run=True)
    cluster.up()
    print(cluster.status())
    cluster.down()

or, to have the cluster deleted however the block ends:

    with Cluster.from_yaml("infra/examples/v4-16.yaml", dry_run=True, down_on_exit=True) as cluster:
        cluster.up()
        cluster.run(workload)

A spec whose controller is a VM (`controller.local: false`) gives the same verbs over that VM's
channel (`client/remote_up_down.RemoteSpec`): nothing of the controller runs on this machine.
Both are a `client/cluster_client.ClusterClient`, which is what `from_*` return.

The machinery below the verbs (the backend, the Ray side, converging, replacing slices) is
`cluster.cluster_runtime.ClusterRuntime`, which a run's supervisor drives too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from podmanager.api import simulation
from podmanager.api.cancel import cancel_run
from podmanager.api.cluster_names import only_cluster, stored_spec
from podmanager.api.status import cluster_status
from podmanager.api.up import FirstUpFailed, bring_up, plan_up
from podmanager.api.up_plan import UpPlan
from podmanager.channel.cluster_status import ClusterStatus
from podmanager.channel.records import DASHBOARD
from podmanager.channel.run_status import RunStatus
from podmanager.client.cluster_client import Reached
from podmanager.client.run_to_end import run_to_end
from podmanager.cloud.base import InProcessSimulator, SimulatedCloud, TpuCloud
from podmanager.cluster.cluster_runtime import ClusterRuntime, EventCallback
from podmanager.cluster.preflight import compute_for
from podmanager.cluster.teardown import stop_idle_emulator, teardown
from podmanager.core.clock import Clock
from podmanager.core.errors import PodmanagerError, SpecError
from podmanager.core.records import RayAccess
from podmanager.core.spec import ClusterSpec, load_spec, parse_spec
from podmanager.core.workload import Workload
from podmanager.state import Event, StateStore
from podmanager.state.run_records import RunStore
from podmanager.state.services import ServiceRecord, ServiceStore

if TYPE_CHECKING:  # the run machinery imports Ray; only `run` needs it
    from podmanager.api.run_handle import InterruptCallback, RunHandle
    from podmanager.api.service_handle import ServiceHandle
    from podmanager.attempts.results import OutputPrinter
    from podmanager.client.cluster_client import ClusterClient
    from podmanager.core.code_zip import PackedCode
    from podmanager.core.faults import FaultKind
    from podmanager.core.run_results import RunResult
    from podmanager.core.serve_options import ServeOptions


class Cluster:
    """One cluster's lifecycle. Every verb is safe to repeat and to resume after a crash.

    As a context manager (`with Cluster(...) as cluster:`), leaving the block closes this
    object's Ray connection (the cluster, its head and its runs stay up), and with
    `down_on_exit=True` given to the constructor first runs `down()`: every run of the
    cluster cancelled, every slice deleted, its Ray head and hosts stopped — also when the
    block raised. Nothing else: runs it submitted go on unless the cluster is downed."""

    def __init__(self, spec: ClusterSpec, *, cloud: TpuCloud | None = None, simulator: InProcessSimulator | None = None,
                 store: StateStore | None = None, clock: Clock | None = None,
                 on_event: EventCallback | None = None, down_on_exit: bool = False):
        """`cloud`: talk to this backend as it is; `simulator`: a simulator a test drives
        in-process (its faults stay reachable through `simulator`); neither: the backend the
        spec asks for (a dry run: the real client on the project's local emulator). `on_event` sees every event
        any verb records (each verb also takes its own). `down_on_exit`: leaving a `with`
        block of this object downs the cluster."""
        if not spec.controller.local:  # its head, store and supervisors are the VM's, never this machine's
            raise SpecError(f"controller.local: false: {spec.name}'s controller is a VM, not this machine",
                            hint="Cluster.from_yaml(PATH) and Cluster.from_dict(DATA) reach it, as the CLI does.")
        self.runtime = ClusterRuntime(spec, store=store or StateStore(), clock=clock, cloud=cloud,
                                      simulator=simulator, on_event=on_event)
        self.down_on_exit = down_on_exit
        self._runs: RunStore | None = None
        self._services: ServiceStore | None = None

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.down_on_exit:
                self.down()
        finally:
            self.close()

    @classmethod
    def from_yaml(cls, path: str | Path, *, dry_run: bool = False, **kwargs: Any) -> ClusterClient:
        """The cluster of the spec at `path`. A spec whose controller is a VM (`controller.local:
        false`) gives a `RemoteSpec`: the same verbs, each reaching that VM as the CLI's do."""
        from podmanager.client.remote_up_down import open_spec

        return open_spec(path, dry_run=dry_run, **kwargs) or cls(load_spec(path, dry_run=dry_run), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, dry_run: bool = False, **kwargs: Any) -> ClusterClient:
        """`from_yaml` of a spec given as a mapping."""
        from podmanager.client.remote_up_down import remote_spec
        spec = parse_spec(data, dry_run=dry_run)
        return cls(spec, **kwargs) if spec.controller.local else remote_spec(spec, data, dry_run=dry_run, **kwargs)

    @classmethod
    def from_name(cls, name: str, *, store: StateStore | None = None, **kwargs: Any) -> ClusterClient:
        """The cluster that `up` recorded under this name: a `RemoteCluster` when this machine
        reaches it through its controller VM's channel (it holds its pointer, and no record)."""
        from podmanager.client.remote import RemoteCluster, is_remote, remote_options
        store = store or StateStore()
        if is_remote(name) and store.get_cluster(name) is None:
            return RemoteCluster(name, **remote_options(name, kwargs))
        return cls(stored_spec(name, store), store=store, **kwargs)

    @property
    def name(self) -> str:
        return self.runtime.name

    @property
    def spec(self) -> ClusterSpec:
        return self.runtime.spec

    @property
    def store(self) -> StateStore:
        return self.runtime.store

    @property
    def cloud(self) -> TpuCloud:
        return self.runtime.cloud

    @property
    def simulator(self) -> SimulatedCloud:
        """The simulated cloud behind a dry-run cluster (its emulator's controls), for faults."""
        return self.runtime.simulator

    @property
    def services_store(self) -> ServiceStore:
        """The services' records, in the same database as this cluster's store."""
        if self._services is None:
            self._services = ServiceStore(self.store.path)
        return self._services

    @property
    def runs_store(self) -> RunStore:
        """The runs' records, in the same database as this cluster's store."""
        if self._runs is None:
            self._runs = RunStore(self.store.path)
        return self._runs

    # ------------------------------------------------------------------ verbs

    def up(self, *, timeout_s: float = 1800.0, force: bool = False, on_plan: Callable[[UpPlan], None] | None = None,
           on_event: EventCallback | None = None, delete_on_failure: bool = False) -> ClusterStatus:
        """Make the cloud match the spec — create missing slices, delete those the spec no
        longer has, replace changed or dead ones — and wait until every slice is READY and
        every host has joined. Resumes a partial `up`.

        One `up`, `down` or recovery of a cluster at a time: a second one waits for the first
        (recording a `waiting` event that names it) and then finds its work done. Before
        changing anything it records the plan (an `up_plan` event) and hands it to
        `on_plan`. If the plan deletes or replaces, because of the spec, a slice that an
        active run uses, it refuses (SpecError, nothing changed) unless `force`, which
        cancels those runs first.

        A failure names what is left running (and billing). With `delete_on_failure` it is
        deleted first: the slices this `up` created, or, for a cluster's first `up`,
        everything, as `down` does."""
        try:
            with self.runtime.listening(on_event):
                bring_up(self.runtime, self.runs_store, timeout_s=timeout_s, force=force, on_plan=on_plan,
                         delete_on_failure=delete_on_failure)
                return self.status()
        except FirstUpFailed as failed:
            self.down(on_event=on_event)
            failed.error.hint = "\n".join(filter(None, [failed.error.hint, "--delete-on-failure: the cluster was "
                                                         "deleted, as 'podmanager down' does"]))
            raise failed.error from None

    def plan_up(self) -> UpPlan:
        """What `up` of this spec would do to the cloud now (nothing is changed)."""
        return plan_up(self.runtime)

    def status(self) -> ClusterStatus:
        """Slices as the cloud reported them to the cluster's monitor a moment ago and after
        podmanager's last change to the cluster (`slices_observed_at`), else as it reports them
        now; hosts as the monitor probed them (`hosts_observed_at`), or probed now."""
        return cluster_status(self.runtime)

    def ray_access(self, *, required: bool = False) -> RayAccess | None:
        """The Ray address, dashboard URL and token path of the cluster's head, and the
        exports that let `ray status`, `ray job submit` and `ray.init()` reach it; None, or with
        `required` the error saying why, when there is no head."""
        access = self.runtime.hosts.ray_access() if self.runtime.hosts else None
        if access is None and required:
            if self.runtime.hosts is None:
                raise PodmanagerError(f"--cluster: {self.name} has no Ray side (its spec sets simulation.boot_hosts: "
                                      "false)")
            raise PodmanagerError(f"--cluster: {self.name} has no Ray head yet",
                                  hint=f"Start it with 'podmanager up -f SPEC' for {self.name}.")
        return access

    def reach_here(self, target: str, *, port: int = 0) -> Reached:
        """This machine is the controller: the dashboard's or the service's own address."""
        status = self.status()
        if target != DASHBOARD:
            return Reached(status.service(target).endpoint)
        return Reached(status.ray.dashboard_url if status.ray and status.ray.dashboard_url else None)

    def down(self, *, timeout_s: float = 600.0, on_event: EventCallback | None = None) -> None:
        """Cancel the cluster's running runs, then delete everything labelled with it; safe to
        run twice. Waits for an `up` or a recovery of the cluster in progress to finish first."""
        with self.runtime.listening(on_event):
            for service in self.services_store.serving(self.name):  # its replicas are runs: it goes first
                self.cancel_service(service.service_id)
            for run in self.runs_store.active(self.name):  # before the lock: a supervisor may need it to wind down
                cancel_run(self.runtime, self.runs_store, run, f"cancelling run {run.run_id} before tearing down")
            with self.runtime.lock("down", timeout_s):
                teardown(self.spec, self.cloud, self.store, record=self.runtime.record,
                         clock=self.runtime.clock, timeout_s=timeout_s, hosts=self.runtime.hosts,
                         compute=compute_for(self.runtime))
                self.runtime.close_cloud()
                stop_idle_emulator(self.spec, self.runtime.record)
                self.runs_store.set_spares(self.name, [])

    def submit(self, workload: Workload, *, budgets: dict[str, int] | None = None,
               code: PackedCode | None = None) -> RunHandle:
        """Start a run and return at once: its supervisor runs on the cluster's side (a Ray
        actor next to the head) and outlives this process. One run at a time per slice.

        The working dir and a requirements file are taken from this process's current
        folder and shipped with the run: nothing later depends on where this process ran.
        `code`: the working dir already packed where the user ran podmanager (a run sent to
        the controller over the channel)."""
        from podmanager.api.submit import submit_run

        return self.run_handle(submit_run(self.runtime, self.runs_store, workload, budgets or {}, code))

    def run(self, workload: Workload, *, printer: OutputPrinter | None = None,
            budgets: dict[str, int] | None = None, down_on_exit: bool = False,
            on_interrupt: InterruptCallback | None = None, on_event: EventCallback | None = None) -> RunResult:
        """Submit the workload and follow it to its end, its output going to `printer` and its
        events to `on_event`: the run recovers from preemptions, failures and hangs within the
        spec's budgets (`budgets` overrides them).

        A blocking call that ends takes its run with it: any exception while following (an
        interrupt, an error in `printer` or `on_event`, a lost connection) cancels the run
        before it goes on up — unless, for an interrupt, `on_interrupt` decides otherwise
        (see `RunHandle.follow`; the CLI detaches). With `down_on_exit` the cluster is deleted
        once the run has ended, however it ended; only a run left going on purpose (detached)
        keeps it."""
        def follow(handle: RunHandle) -> RunResult:
            # `on_event` saw the submit event as it was recorded: follow from just after it.
            return handle.follow(printer, self.runtime.notify, after_event=handle.submit_event_id(),
                                 on_interrupt=on_interrupt)

        with self.runtime.listening(on_event):
            return run_to_end(lambda: self.submit(workload, budgets=budgets), follow,
                              interrupt_handled=on_interrupt is not None,
                              down=self.down if down_on_exit else None)

    def serve(self, workload: Workload, options: ServeOptions | None = None, *,
              budgets: dict[str, int] | None = None, code: PackedCode | None = None) -> ServiceHandle:
        """Start a service of `workload` (a program calling `runtime.serve`) and return once its
        router listens at `ServiceHandle.endpoint` and every replica is submitted: one replica
        per slice (or `options.replicas`), each a run of its own that is recovered like any
        run; the router sends requests to the ready ones. `code`: as for `submit`."""
        from podmanager.api.serve import ServeOptions, start_service
        from podmanager.api.service_handle import ServiceHandle

        service_id = start_service(self.runtime, self.runs_store, self.services_store, workload,
                                   options or ServeOptions(), budgets or {}, code)
        return ServiceHandle(self.name, service_id, services=self.services_store, runs=self.runs_store)

    def service_handle(self, service_id: str) -> ServiceHandle:
        from podmanager.api.service_handle import open_service

        return open_service(self.name, service_id, services=self.services_store, runs=self.runs_store)

    def cancel_service(self, service_id: str) -> ServiceRecord:
        """Stop a service: each replica's run (it drains and stops), then its router."""
        from podmanager.api.serve import cancel_service

        return cancel_service(self.runtime, self.runs_store, self.services_store, service_id)

    def has_service(self, service_id: str) -> bool:
        return self.services_store.get(service_id) is not None

    def services(self) -> list[ServiceRecord]:
        """Every service of this cluster, oldest first."""
        return self.services_store.list(self.name)

    def run_handle(self, run_id: str) -> RunHandle:
        from podmanager.api.run_handle import open_run

        return open_run(self.name, run_id, runs=self.runs_store, services=self.services_store, store=self.store)

    def runs(self) -> list[RunStatus]:
        """Every run of this cluster, oldest first."""
        return [RunStatus.of(r) for r in self.runs_store.list(self.name)]

    # ------------------------------------------------------------------ a dry run's faults (`api/simulation.py`)

    def inject(self, fault: FaultKind) -> str:
        return simulation.inject(self.runtime, fault)

    def head_crash(self) -> str:
        return simulation.head_crash(self.runtime)

    def controller_crash(self) -> str:
        return simulation.controller_crash(self.runtime)

    def controller_stop(self, *, suspend: bool = False) -> str:
        return simulation.controller_stop(self.runtime, suspend=suspend)

    def hosts(self) -> list[Any]:
        return self.runtime.hosts.hosts() if self.runtime.hosts else []

    def events(self, *, after_id: int = 0) -> list[Event]:
        return self.store.events(self.name, after_id=after_id)

    def close(self) -> None:
        """Disconnect from Ray (the cluster stays up)."""
        self.runtime.close()


def resolve_cluster(name: str | None, *, store: StateStore | None = None, **kwargs: Any) -> ClusterClient:
    """The named cluster, or the only one there is when no name is given (`Cluster.from_name`)."""
    store = store or StateStore()
    return Cluster.from_name(name if name is not None else only_cluster(store), store=store, **kwargs)
