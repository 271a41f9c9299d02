"""The Python API: one `Cluster` object with the verbs the CLI exposes.

    cluster = Cluster.from_yaml("infra/examples/v4-16.yaml", dry_run=True)
    cluster.up()
    print(cluster.status())
    cluster.down()

or, to have the cluster deleted however the block ends:

    with Cluster.from_yaml("infra/examples/v4-16.yaml", dry_run=True, down_on_exit=True) as cluster:
        cluster.up()
        cluster.run(workload)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from podmanager.api.backends import (
    local_machines,
    make_cloud,
    simulator_client,
)
from podmanager.api.submission import run_checkpoints, run_slices
from podmanager.api.teardown import LabelDownReport, down_by_label, teardown
from podmanager.cloud.base import DEAD_STATES, Node, TpuCloud
from podmanager.cloud.sim.cloud import SimCloud
from podmanager.core import catalog, paths
from podmanager.core.clock import Clock, RealClock
from podmanager.core.errors import ClusterNotFoundError, PodmanagerError, SpecError, StateStoreError
from podmanager.core.records import RayAccess, SliceRef
from podmanager.core.spec import (
    ClusterSpec,
    load_spec,
    parse_spec,
)
from podmanager.core.workload import Workload
from podmanager.hosts.cluster_hosts import ClusterHosts
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import SliceChange, changes, describe_changes, desired_slices
from podmanager.state import Event, StateStore
from podmanager.state.lock import Holder, cluster_lock
from podmanager.state.runs import RunRecord, RunStore

if TYPE_CHECKING:  # the run machinery imports Ray; only `run` needs it
    from podmanager.api.runs import InterruptCallback, RunHandle
    from podmanager.running.results import OutputPrinter
    from podmanager.supervision.ledger import RunResult

EventCallback = Callable[[Event], None]
RECOVERY_LOCK_TIMEOUT_S = 1800.0  # a run's recovery waits this long for an `up` or `down` to finish


@dataclass(frozen=True)
class SliceStatus:
    index: int
    name: str
    accelerator: str
    zone: str | None
    state: str  # the node's state, or MISSING
    hosts: int
    chips: int


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    backend: str
    project: str
    slices: list[SliceStatus]
    hosts: list[dict[str, Any]] = field(default_factory=list)
    ray: RayAccess | None = None  # where Ray users find the cluster (None before the head starts)
    hosts_observed_at: float | None = None  # unix time the hosts were probed (by the cluster's monitor, or now)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UpPlan:
    """What `up` is about to do to the cloud, per slice (in slice order): create, delete,
    replace (delete, then create) or keep."""

    cluster: str
    changes: list[SliceChange]

    def describe(self) -> str:
        return describe_changes(self.changes)

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "summary": self.describe(), "changes": [c.as_dict() for c in self.changes]}


class Cluster:
    """One cluster's lifecycle. Every verb is safe to repeat and to resume after a crash.

    As a context manager (`with Cluster(...) as cluster:`), leaving the block closes this
    object's Ray connection (the cluster, its head and its runs stay up), and with
    `down_on_exit=True` given to the constructor first runs `down()`: every run of the
    cluster cancelled, every slice deleted, its Ray head and hosts stopped — also when the
    block raised. Nothing else: runs it submitted go on unless the cluster is downed."""

    def __init__(self, spec: ClusterSpec, *, cloud: TpuCloud | None = None, simulator: SimCloud | None = None,
                 store: StateStore | None = None, clock: Clock | None = None,
                 on_event: EventCallback | None = None, run_id: str | None = None, down_on_exit: bool = False):
        """`cloud`: talk to this backend as it is; `simulator`: this simulated cloud, through
        the client-side retries a dry run uses (its faults stay reachable through
        `simulator`); neither: the backend the spec asks for. `run_id`: the run this object
        acts for (its supervisor's), stamped on every event it records. `down_on_exit`:
        leaving a `with` block of this object downs the cluster."""
        self.spec = spec
        self.run_id = run_id
        self.down_on_exit = down_on_exit
        self.clock = clock or RealClock()
        self.store = store or StateStore()
        self._cloud = cloud
        self._simulator = simulator
        self.on_event = on_event
        self._hosts: ClusterHosts | None = None
        self._runs: RunStore | None = None

    # ------------------------------------------------------------------ construction

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.down_on_exit:
                self.down()
        finally:
            self.close()

    @classmethod
    def from_yaml(cls, path: str | Path, *, dry_run: bool = False, **kwargs: Any) -> "Cluster":
        return cls(load_spec(path, dry_run=dry_run), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, dry_run: bool = False, **kwargs: Any) -> "Cluster":
        return cls(parse_spec(data, dry_run=dry_run), **kwargs)

    @classmethod
    def from_name(cls, name: str, *, store: StateStore | None = None, **kwargs: Any) -> "Cluster":
        """The cluster that `up` recorded under this name."""
        store = store or StateStore()
        record = store.get_cluster(name)
        if record is None:
            known = ", ".join(r.name for r in store.list_clusters()) or "none"
            was_up = bool(store.events(name, kind="up"))
            raise ClusterNotFoundError(
                f"--cluster: no cluster named {name!r} (known: {known})"
                + ("; it was torn down: 'podmanager runs' and 'podmanager events' still show its history"
                   if was_up else ""),
                hint="Create it with 'podmanager up -f SPEC', or pass -f SPEC to 'down' if its local state was lost.",
            )
        return cls(parse_spec(record.spec, source=f"stored spec of {name}"), store=store, **kwargs)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def cloud(self) -> TpuCloud:
        if self._cloud is None and self._simulator is not None:
            self._cloud = simulator_client(self._simulator, clock=self.clock, on_retry=self._record_retry)
        elif self._cloud is None:
            self._cloud, self._simulator = make_cloud(self.spec, clock=self.clock, on_retry=self._record_retry)
        return self._cloud

    @property
    def simulator(self) -> SimCloud:
        """The simulated cloud behind a dry-run cluster, for injecting faults."""
        self.cloud  # opens the backend (and the simulator with it)
        if self._simulator is None:
            raise SpecError(f"--cluster: {self.name} runs on {self.spec.backend.value}; "
                            "'podmanager sim' only injects faults into dry-run clusters")
        return self._simulator

    def record(self, kind: str, message: str, slice_index: int | None = None, **data: Any) -> Event:
        if self.run_id is not None:
            # What a run's supervisor causes through us (a slice replaced, a retried call)
            # belongs to that run: following it shows these, and no other run does.
            data.setdefault("run_id", self.run_id)
        event = self.store.add_event(self.name, kind, message, slice_index=slice_index, **data)
        if self.on_event:
            self.on_event(event)
        return event

    def _record_retry(self, call: str, error: BaseException, attempt: int) -> None:
        self.record("retry", f"{call} failed ({error}); retrying (attempt {attempt + 1})", call=call)

    @property
    def hosts_layer(self) -> ClusterHosts | None:
        """The Ray side (head, host agents); None for a control-plane-only simulation."""
        if self._hosts is None:
            self._hosts = ClusterHosts.for_spec(self.spec, local_machines(self.spec))
        return self._hosts

    def _provisioner(self) -> Provisioner:
        poll = 0.05 if self.spec.simulated else 5.0
        return Provisioner(self.cloud, self.name, self.spec.zones, record=self.record, clock=self.clock,
                           poll_interval_s=poll)

    # ------------------------------------------------------------------ verbs

    def up(self, *, timeout_s: float = 1800.0, force: bool = False,
           on_plan: Callable[[UpPlan], None] | None = None) -> ClusterStatus:
        """Make the cloud match the spec — create missing slices, delete those the spec no
        longer has, replace changed or dead ones — and wait until every slice is READY and
        every host has joined. Resumes a partial `up`.

        One `up`, `down` or recovery of a cluster at a time: a second one waits for the first
        (recording a `waiting` event that names it) and then finds its work done. Before
        changing anything it records the plan (an `up_plan` event) and hands it to
        `on_plan`. If the plan deletes or replaces, because of the spec, a slice that an
        active run uses, it refuses (SpecError, nothing changed) unless `force`, which
        cancels those runs first."""
        self.cloud  # opens the backend first: bad credentials fail before anything is recorded or created
        with self._lock("up", timeout_s):
            return self._up(timeout_s, force=force, on_plan=on_plan)

    def plan_up(self) -> UpPlan:
        """What `up` of this spec would do to the cloud now (nothing is changed)."""
        return UpPlan(self.name, changes(desired_slices(self.spec), self._provisioner().observe()))

    def _up(self, timeout_s: float, *, force: bool, on_plan: Callable[[UpPlan], None] | None = None,
            check_runs: bool = True) -> ClusterStatus:
        plan = self.plan_up()
        blocked = self._runs_in_the_way(plan) if check_runs else []
        if blocked and not force:
            raise _in_the_way(plan, blocked)
        for run, hit in blocked:
            self._cancel_run(run, f"cancelling run {run.run_id}: 'up --force' takes slice(s) {hit} it runs on")
        first_time = self.store.get_cluster(self.name) is None
        self.store.save_cluster(self.name, self.spec.model_dump(mode="json"), self.spec.backend.value, "provisioning")
        self.record("up", f"{len(self.spec.slice_list())} slice(s) on {self.spec.backend.value} "
                     f"in {', '.join(self.spec.zones)}")
        self.record("up_plan", f"plan for {self.name}: {plan.describe()}",
                    changes=[c.as_dict() for c in plan.changes])
        if on_plan is not None:
            on_plan(plan)
        if first_time and self.spec.simulated and self.spec.simulation.faults:
            self._arm_scripted_faults()
        metadata = self._start_head() if self.hosts_layer else {}
        nodes = self._converge(desired_slices(self.spec, metadata), timeout_s)
        self.record("slices_ready", f"all {len(nodes)} slice(s) READY")
        if self.hosts_layer:
            self._wait_for_hosts(nodes)
        self.store.set_cluster_status(self.name, "up")
        return self.status()

    def _runs_in_the_way(self, plan: UpPlan) -> list[tuple[RunRecord, list[int]]]:
        """Active runs on slices the plan deletes or replaces because the spec says so (a
        dead slice a run's supervisor is replacing anyway is not in the way), with those slices."""
        taken = {c.slice_index for c in plan.changes
                 if c.edited and c.kind in ("delete", "replace") and c.slice_index is not None}
        if not taken:
            return []
        return [(run, sorted(taken & set(run.slices))) for run in self.runs_store.active(self.name)
                if taken & set(run.slices)]

    def _lock(self, verb: str, timeout_s: float) -> ContextManager[None]:
        """The cluster's lock (state/lock.py), saying whom it waits for when it must."""

        def waiting(holder: Holder | None) -> None:
            who = holder.describe(self.name) if holder else f"another podmanager process working on {self.name}"
            self.record("waiting", f"waiting for {who}", holder_pid=holder.pid if holder else None,
                        holder_verb=holder.verb if holder else None)

        return cluster_lock(self.name, verb, timeout_s=timeout_s, on_wait=waiting)

    def _recovery_lock(self) -> ContextManager[None]:
        verb = f"recovery for run {self.run_id}" if self.run_id else "recovery"
        return self._lock(verb, RECOVERY_LOCK_TIMEOUT_S)

    def _refresh_spec(self) -> None:
        """Take the spec the last `up` stored. A run's supervisor holds the spec of when it
        started; its recovery must converge to the cluster as it is now, or it would
        re-create a slice an edited spec dropped (or delete one it added)."""
        record = self.store.get_cluster(self.name)
        if record is None or record.spec == self.spec.model_dump(mode="json"):
            return
        self.spec = parse_spec(record.spec, source=f"stored spec of {self.name}")
        self._hosts = None  # built from the old spec's slices

    def dropped_slices(self, indexes: list[int]) -> list[int]:
        """Those of these slices that the cluster's spec, as the last `up` stored it, no
        longer has."""
        self._refresh_spec()
        known = {s.index for s in self.spec.slice_list()}
        return sorted(i for i in indexes if i not in known)

    def _start_head(self) -> dict[str, str]:
        """Start (or reuse) the Ray head, saying so first: starting one takes seconds."""
        assert self.hosts_layer is not None
        running = self.spec.head.address or self.hosts_layer.controller.head_address()
        self.record("head_starting", f"using the Ray head at {running}" if running
                    else "starting the Ray head (takes a few seconds)")
        metadata = self.hosts_layer.start()
        if not running:
            self.record("head_ready", f"Ray head is up at {self.hosts_layer.controller.head_address()}")
        return metadata

    def _wait_for_hosts(self, nodes: list[Node]) -> None:
        """Wait until every host of these slices has a healthy agent, saying how many have."""
        assert self.hosts_layer is not None
        expected = sum(len(node.endpoints) or catalog.lookup(node.accelerator_type).hosts for node in nodes)
        self.record("hosts_joining", f"waiting for {expected} host(s) to join Ray "
                    f"(up to {self.spec.head.join_timeout_s:.0f}s)", expected=expected)
        joined = self.hosts_layer.wait(nodes, on_progress=lambda healthy, of: self.record(
            "hosts_joining", f"{healthy}/{of} host(s) joined Ray", joined=healthy, expected=of))
        self.record("hosts_joined", f"{len(joined)} host(s) joined Ray, each with a healthy agent")

    def _converge(self, desired: list[Any], timeout_s: float, reason: str = "not in the spec") -> list[Node]:
        return self._provisioner().converge(desired, timeout_s, unwanted_reason=reason)

    def delete_dead_slices(self, timeout_s: float = 600.0) -> list[int]:
        """Delete preempted or terminated slices now (they hold quota) without replacing them."""
        with self._recovery_lock():
            self._refresh_spec()
            return self._delete_dead_slices(timeout_s)

    def _delete_dead_slices(self, timeout_s: float) -> list[int]:
        dead = sorted(n.slice_index for n in self._provisioner().observe().nodes
                      if n.state in DEAD_STATES and n.slice_index is not None)
        if dead:
            desired = [d for d in desired_slices(self.spec) if d.index not in dead]
            self._converge(desired, timeout_s, reason="it is dead and holds quota; 'up' creates it again")
        return dead

    def delete_slices(self, indexes: list[int], *, reason: str, timeout_s: float = 1800.0) -> None:
        """Delete these slices now; the first half of replacing them."""
        with self._recovery_lock():
            self._refresh_spec()
            desired = desired_slices(self.spec)
            self._converge([d for d in desired if d.index not in indexes], timeout_s,
                           reason=f"replacing it ({reason})")

    def restore_slices(self, phases: dict[str, float] | None = None, *, timeout_s: float = 1800.0) -> list[Node]:
        """Create every missing slice (next zones on capacity errors) and wait for all hosts;
        the second half of replacing. `phases` receives the seconds of `create` and `join`."""
        phases = {} if phases is None else phases
        with self._recovery_lock():
            self._refresh_spec()
            metadata = self.hosts_layer.start() if self.hosts_layer else {}
            started = self.clock.now()
            nodes = self._converge(desired_slices(self.spec, metadata), timeout_s)
            phases["create"] = self.clock.now() - started
            if self.hosts_layer:
                started = self.clock.now()
                self._wait_for_hosts(nodes)
                phases["join"] = self.clock.now() - started
        return nodes

    def status(self) -> ClusterStatus:
        """Slices as the cloud reports them now; hosts as the cluster's monitor probed them
        a moment ago (`hosts_observed_at`), or probed now when it has not."""
        observed = {n.name: n for n in self._provisioner().observe().nodes}
        slices = []
        for want in desired_slices(self.spec):
            node = observed.get(want.node_name)
            accelerator = catalog.lookup(want.request.accelerator_type)
            slices.append(SliceStatus(
                index=want.index,
                name=want.node_name,
                accelerator=accelerator.name,
                zone=node.zone if node else None,
                state=node.state.value if node else "MISSING",
                hosts=accelerator.hosts,
                chips=accelerator.chips,
            ))
        observed_at, hosts = self.hosts_layer.observed_hosts() if self.hosts_layer else (None, [])
        return ClusterStatus(self.name, self.spec.backend.value, self.spec.project or "", slices,
                             [asdict(h) for h in hosts], self.ray_access(), observed_at)

    def ray_access(self) -> RayAccess | None:
        """The Ray address, dashboard URL and token path of the cluster's head, and the
        exports that let `ray status`, `ray job submit` and `ray.init()` reach it."""
        return self.hosts_layer.ray_access() if self.hosts_layer else None

    def down(self, *, timeout_s: float = 600.0) -> None:
        """Cancel the cluster's running runs, then delete everything labelled with it; safe to
        run twice. Waits for an `up` or a recovery of the cluster in progress to finish first."""
        self._cancel_runs()  # before the lock: a supervisor may need it to wind its run down
        with self._lock("down", timeout_s):
            teardown(self.name, self.cloud, self.spec.zones, self.store, record=self.record, clock=self.clock,
                     timeout_s=timeout_s, hosts=self.hosts_layer)

    def submit(self, workload: Workload, *, budgets: dict[str, int] | None = None) -> RunHandle:
        """Start a run and return at once: its supervisor runs on the cluster's side (a Ray
        actor next to the head) and outlives this process. One run at a time per slice.

        The working dir and a requirements file are taken from this process's current
        folder and shipped with the run: nothing later depends on where this process ran."""
        from podmanager.api import service
        from podmanager.running import package
        from podmanager.running.attempt import new_run_id
        from podmanager.supervision.supervisor import new_run

        if self.hosts_layer is None:
            raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts to run on")
        workload = workload.submitted(Path.cwd())
        slices = run_slices(self.spec, workload)
        checkpoints = run_checkpoints(self.spec, workload, slices)
        unknown = set(budgets or {}) - {"max_preemptions", "max_failures", "max_hangs"}
        if unknown:
            raise SpecError(f"budgets: unknown {sorted(unknown)}; use max_preemptions, max_failures, max_hangs")
        if not self.hosts_layer.controller.connect():
            raise PodmanagerError(f"cluster {self.name} has no Ray head", hint="Run 'podmanager up' first.")
        # "Slices free? Then they are this run's" is one transaction: of runs submitted at
        # the same moment on a slice, exactly one gets it.
        record = new_run(self, workload, new_run_id(workload), slices, checkpoints.directory, budgets or {},
                         warnings=[checkpoints.warning] if checkpoints.warning else [])
        holder = self.runs_store.claim(record)
        run_id = record.run_id
        if holder is not None:
            raise SpecError(
                f"run: slice(s) {sorted(set(holder.slices) & set(slices))} are busy with run {holder.run_id} "
                f"({holder.status})",
                hint=f"Wait for it ('podmanager attach {holder.run_id}'), cancel it ('podmanager cancel "
                     f"{holder.run_id}'), or run on other slices with --slices.")
        submitted = False
        try:
            code = package.upload(workload.working_dir) if workload.working_dir is not None else None
            workload.check_program(code.files if code else None)
            self.record("run_submitted", f"run {run_id}: {workload.display_name} submitted on slice(s) {slices}",
                        run_id=run_id)
            submitted = True
            if checkpoints.warning:
                self.record("warning", f"run {run_id}: {checkpoints.warning}", run_id=run_id)
            service.start_supervisor(type(self), self.name, run_id, code.uri if code else None)
        except BaseException as error:
            # Nothing started: the slices are free again and nothing is spent (a typo costs nothing).
            self.runs_store.release(run_id)
            if submitted:
                self.record("run_not_started", f"run {run_id} did not start ({type(error).__name__}: {error}); "
                            f"slice(s) {slices} are free again", run_id=run_id)
            raise
        return self.run_handle(run_id)

    def run(self, workload: Workload, *, printer: OutputPrinter | None = None,
            budgets: dict[str, int] | None = None, down_on_exit: bool = False,
            on_interrupt: InterruptCallback | None = None) -> RunResult:
        """Submit the workload and follow it to its end, its output going to `printer` and its
        events to `on_event`: the run recovers from preemptions, failures and hangs within the
        spec's budgets (`budgets` overrides them).

        A blocking call that ends takes its run with it: any exception while following (an
        interrupt, an error in `printer` or `on_event`, a lost connection) cancels the run
        before it goes on up — unless, for an interrupt, `on_interrupt` decides otherwise
        (see `RunHandle.follow`; the CLI detaches). With `down_on_exit` the cluster is deleted
        once the run has ended, however it ended; only a run left going on purpose (detached)
        keeps it."""
        handle = None
        detached = False
        try:
            handle = self.submit(workload, budgets=budgets)
            try:
                # `on_event` saw the submit event as it was recorded: follow from just after it.
                return handle.follow(printer, self.on_event, after_event=handle.submit_event_id(),
                                     on_interrupt=on_interrupt)
            except KeyboardInterrupt:
                if on_interrupt is not None:
                    detached = handle.status().active  # `on_interrupt` chose to leave it going
                else:
                    handle.cancel()
                raise
            except BaseException:
                handle.cancel()
                raise
        finally:
            if down_on_exit and not detached:
                self.down()

    def run_handle(self, run_id: str) -> RunHandle:
        from podmanager.api.runs import RunHandle

        run = self.runs_store.get(run_id)
        if run is None or run.cluster != self.name:
            known = ", ".join(r.run_id for r in self.runs_store.list(self.name)[-5:]) or "none"
            raise SpecError(f"RUN: no run {run_id!r} in cluster {self.name} (latest: {known})",
                            hint="See them all with 'podmanager runs'.")
        return RunHandle(self.name, run_id, runs=self.runs_store, store=self.store)

    def runs(self) -> list[RunRecord]:
        """Every run of this cluster, oldest first."""
        return self.runs_store.list(self.name)

    @property
    def runs_store(self) -> RunStore:
        if self._runs is None:
            self._runs = RunStore()
        return self._runs

    def arm_scripted_hangs(self) -> list[Any]:
        """Timers for the spec's scripted hang faults (dry runs), counted from now."""
        from podmanager.api import simulation

        return simulation.arm_hangs(self) if self.spec.simulated else []

    def _cancel_runs(self) -> None:
        for run in self.runs_store.active(self.name):
            self._cancel_run(run, f"cancelling run {run.run_id} before tearing down")

    def _cancel_run(self, run: RunRecord, message: str) -> None:
        self.record("cancelling", message, run_id=run.run_id)
        try:
            self.run_handle(run.run_id).cancel(timeout_s=60)
        except PodmanagerError as stuck:  # its supervisor is gone: the teardown stops the processes
            self.record("cancel_timeout", stuck.message)
            stuck_run = self.runs_store.get(run.run_id)
            if stuck_run is not None:
                stuck_run.status = "cancelled"
                self.runs_store.save(stuck_run)

    def hosts(self) -> list[Any]:
        return self.hosts_layer.hosts() if self.hosts_layer else []

    def agents(self, slice_indexes: list[int]) -> list[Any]:
        if self.hosts_layer is None:
            raise SpecError("simulation.boot_hosts is false: this dry-run cluster has no hosts")
        return self.hosts_layer.agents(slice_indexes)

    def lost_hosts(self) -> set[tuple[int, int]]:
        """(slice, worker) of hosts whose node is dead or unreachable right now."""
        dead = self.hosts_layer.dead_hosts() if self.hosts_layer else []
        return {(h.slice_index, h.worker_id) for h in dead}

    def heal(self) -> None:
        """Delete dead slices, create what is missing and wait for every host's agent (a
        run's recovery: the spec is the one the last `up` stored)."""
        with self._recovery_lock():
            self._refresh_spec()
            self._delete_dead_slices(600.0)
            # The stored spec was accepted by the `up` that stored it: nothing to ask again.
            self._up(1800.0, force=False, check_runs=False)

    def slice_locations(self, slice_indexes: list[int]) -> list[SliceRef]:
        """Where each of these slices is as the cloud has it now."""
        nodes = {n.slice_index: n for n in self._provisioner().observe().nodes}
        missing = [i for i in slice_indexes if i not in nodes]
        if missing:
            raise PodmanagerError(f"slice(s) {missing} of {self.name} do not exist",
                                  hint="Run 'podmanager up' again to create them.")
        return [SliceRef(i, nodes[i].zone, nodes[i].name) for i in slice_indexes]

    def run_dir(self, run_id: str) -> Path:
        return paths.cluster_dir(self.name) / "runs" / run_id

    def close(self) -> None:
        """Disconnect from Ray (the cluster stays up)."""
        if self._hosts is not None:
            self._hosts.close()

    def events(self, *, after_id: int = 0) -> list[Event]:
        return self.store.events(self.name, after_id=after_id)

    # ------------------------------------------------------------------ helpers

    def _arm_scripted_faults(self) -> None:
        from podmanager.api import simulation

        simulation.arm_scripted_faults(self)


def _in_the_way(plan: UpPlan, blocked: list[tuple[RunRecord, list[int]]]) -> SpecError:
    """The refusal of an `up` that would take slices from active runs."""
    lines = [f"run {run.run_id} ({run.status}) runs on slice {c.slice_index} ({c.node}), which the spec "
             f"{'deletes' if c.kind == 'delete' else 'replaces'}: {c.reason}"
             for run, hit in blocked for c in plan.changes if c.slice_index in hit and c.kind in ("delete", "replace")]
    first = blocked[0][0].run_id
    return SpecError(
        "up: the spec takes slices from active runs; nothing was changed:\n  " + "\n  ".join(lines),
        hint=f"Wait for the run to end ('podmanager attach {first}') or cancel it ('podmanager cancel {first}'), "
             "keep its slices in the spec, or pass --force to cancel the run(s) and go ahead.")


def resolve_cluster(name: str | None, *, store: StateStore | None = None) -> Cluster:
    """The named cluster, or the only one there is when no name is given."""
    store = store or StateStore()
    if name is None:
        known = store.list_clusters()
        if len(known) != 1:
            listing = ", ".join(r.name for r in known) or "none"
            raise ClusterNotFoundError(
                f"--cluster: {'no cluster exists' if not known else 'several clusters exist'} (known: {listing})",
                hint="Name one with -c NAME, or create one with 'podmanager up -f SPEC'.",
            )
        name = known[0].name
    return Cluster.from_name(name, store=store)


@dataclass(frozen=True)
class DownReport:
    """What `down` did: the cluster it tore down, or (its local state lost) where it searched."""

    name: str
    by_label: LabelDownReport | None = None  # set when the cluster was found by label
    store_error: StateStoreError | None = None  # why the state store could not be used (so: by label)

    @property
    def nothing_found(self) -> bool:
        return self.by_label is not None and not self.by_label.deleted_in and not self.by_label.local_processes


def down(name: str | None = None, *, spec_file: str | Path | None = None, dry_run: bool = False,
         project: str | None = None, zones: list[str] | None = None, on_event: EventCallback | None = None,
         store: StateStore | None = None) -> DownReport:
    """Tear a cluster down, however it is known: by its spec file, by the local record of its
    name, or — the record lost — by its label in the cloud (every simulated project, or the
    Google Cloud `project`) and its processes on this machine by their owner tag. Safe to
    repeat: nothing left is not an error. A missing or damaged state store never stops it:
    it then finds the cluster by label, as when the record is lost."""
    store_error = None
    if store is None:
        try:
            store = StateStore()
        except StateStoreError as error:
            store_error, store = error, StateStore.in_memory()
    if spec_file is not None:
        target = Cluster.from_yaml(spec_file, dry_run=dry_run, on_event=on_event, store=store)
        if store_error is not None:
            return _down_by_spec_label(target.spec, store_error)
    elif name is not None and (store_error is not None or store.get_cluster(name) is None):
        on_gcp = project is not None and not dry_run
        return DownReport(name, down_by_label(name, dry_run=not on_gcp, project=project, zones=zones, store=store),
                          store_error)
    elif store_error is not None:
        raise StateStoreError(store_error.message, hint="Name the cluster: 'podmanager down -c NAME' finds it "
                              f"without the store. {store_error.hint}")
    else:
        target = resolve_cluster(name, store=store)
        target.on_event = on_event
    try:
        target.down()
    except StateStoreError as error:  # damaged while tearing down: finish the job by label
        return _down_by_spec_label(target.spec, error)
    return DownReport(target.name)


def _down_by_spec_label(spec: ClusterSpec, error: StateStoreError) -> DownReport:
    """`down` of a known spec without the state store: by label in its project and zones."""
    return DownReport(spec.name, down_by_label(spec.name, dry_run=spec.simulated, project=spec.project,
                                               zones=spec.zones, store=StateStore.in_memory()), error)
