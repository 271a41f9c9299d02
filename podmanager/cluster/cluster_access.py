"""One cluster as everything that acts on it reaches it: its spec (as the last `up` stored
it), its cloud backend, its Ray side (`ClusterHosts`), its event log and lock, and the
cloud's view of its slices. `ClusterRuntime` builds on this to converge and replace slices;
the cluster's monitor (`cluster_monitor.py`) works through this alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, ContextManager, Self

from podmanager.cloud.base import InProcessSimulator, SimulatedCloud, TpuCloud
from podmanager.cloud.retry import RetryingCloud
from podmanager.cluster.backends import local_machines, make_cloud
from podmanager.controller.cluster_hosts import ClusterHosts
from podmanager.core.cadence import Cadence
from podmanager.core.clock import Clock, RealClock
from podmanager.core.errors import ClusterNotFoundError, SpecError
from podmanager.core.events import EventKind
from podmanager.core.spec import ClusterSpec
from podmanager.provisioning.loop import Provisioner
from podmanager.provisioning.plan import Observed
from podmanager.state import Event, StateStore
from podmanager.state.lock import Holder, cluster_lock

EventCallback = Callable[[Event], None]

# Retries failing alike no further apart than this are one outage, recorded once (RetryingCloud
# gives a call a minute).
OUTAGE_GAP_S = 60.0


class ClusterAccess:
    def __init__(self, spec: ClusterSpec, *, store: StateStore, clock: Clock | None = None,
                 cloud: TpuCloud | None = None, simulator: InProcessSimulator | None = None,
                 run_id: str | None = None, on_event: EventCallback | None = None):
        """`cloud`: talk to this backend as it is; `simulator`: a simulator a test drives
        in-process, with client-side retries; neither: the backend the spec asks for (a dry
        run: the real client on the project's local emulator).
        `run_id`: the run this runtime acts for (its supervisor's), stamped on every event it
        records. `on_event` sees every event recorded through it."""
        self.spec = spec
        self.store = store
        self.clock = clock or RealClock()
        self.run_id = run_id
        self._cloud = cloud
        self._simulator: SimulatedCloud | None = simulator
        # Made here from the spec (`make_cloud`), so configured and closed here; a backend handed
        # in (a test's in-process simulator, a caller's client) keeps its own settings and channels.
        self._backend_from_spec = cloud is None and simulator is None
        if simulator is not None and cloud is None:
            self._cloud = RetryingCloud(simulator, clock=self.clock, on_retry=self._record_retry)
        self._listeners: list[EventCallback] = [on_event] if on_event else []
        self._hosts: ClusterHosts | None = None
        self._hosts_built = False
        self._last_retry: tuple[str, float] | None = None  # (the error, when): see _record_retry

    @classmethod
    def from_name(cls, name: str, *, store: StateStore | None = None, run_id: str | None = None) -> Self:
        """The cluster as the last `up` stored it."""
        store = store or StateStore()
        record = store.get_cluster(name)
        if record is None:
            raise ClusterNotFoundError(f"cluster {name!r} is not in the state store (it was torn down)")
        return cls(record.spec, store=store, run_id=run_id)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def backend_from_spec(self) -> bool:
        """Whether the backend is the one the spec asks for (not one handed in by a caller or test)."""
        return self._backend_from_spec

    @property
    def cloud(self) -> TpuCloud:
        if self._cloud is None:
            self._cloud, self._simulator = make_cloud(self.spec, clock=self.clock, on_retry=self._record_retry)
        return self._cloud

    @property
    def simulator(self) -> SimulatedCloud:
        """The simulated cloud behind a dry-run cluster (its emulator's controls), for faults."""
        self.cloud  # opens the backend (and the simulator with it)
        if self._simulator is None:
            raise SpecError(f"--cluster: {self.name} runs on {self.spec.backend.value}; "
                            "'podmanager sim' only injects faults into dry-run clusters")
        return self._simulator

    @property
    def hosts(self) -> ClusterHosts | None:
        """The Ray side (head, host agents); None for a control-plane-only simulation."""
        if not self._hosts_built:
            self._hosts = ClusterHosts.for_spec(self.spec, local_machines(self.spec), secrets_host=self._secrets_host)
            self._hosts_built = True
        return self._hosts

    def connect_ray(self) -> bool:
        """Connect this process to the cluster's Ray as a driver; False when it has no Ray side
        or no head."""
        return self.hosts is not None and self.hosts.connect()

    def _secrets_host(self) -> str | None:
        """Where the cluster's Secret Manager is: a dry run's emulator (opened on first need);
        None on Google Cloud (the client finds it, or TPU_EMULATOR_HOST)."""
        if not self.spec.simulated:
            return None
        self.cloud  # opens the backend (and the emulator's control with it)
        return getattr(self._simulator, "address", None)

    def close_cloud(self) -> None:
        """Close the channels to the cloud (made again on next use): before its emulator stops,
        so no open channel sees the server go away."""
        if not self._backend_from_spec:
            return
        for backend in (self._cloud, self._simulator):
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        self._cloud, self._simulator = None, None

    # ------------------------------------------------------------------ events and the lock

    def record(self, kind: EventKind, message: str, slice_index: int | None = None, **data: Any) -> Event:
        if self.run_id is not None:
            # What a run's supervisor causes through us (a slice replaced, a retried call)
            # belongs to that run: following it shows these, and no other run does.
            data.setdefault("run_id", self.run_id)
        event = self.store.add_event(self.name, kind, message, slice_index=slice_index, **data)
        self.notify(event)
        return event

    def notify(self, event: Event) -> None:
        """Hand an event (recorded here or read from the log) to everyone listening."""
        for listener in list(self._listeners):
            listener(event)

    @contextmanager
    def listening(self, on_event: EventCallback | None) -> Iterator[None]:
        """`on_event` sees every event recorded while the block runs."""
        if on_event is None:
            yield
            return
        self._listeners.append(on_event)
        try:
            yield
        finally:
            self._listeners.remove(on_event)

    def _record_retry(self, call: str, error: BaseException, attempt: int) -> None:
        """One event per outage: the retries of any call that fail alike, each within
        OUTAGE_GAP_S of the last, are one outage (a dead emulator wrote twelve alike events)."""
        now, what = self.clock.now(), f"{type(error).__name__}: {error}"
        last, self._last_retry = self._last_retry, (what, now)
        if last is not None and last[0] == what and now - last[1] < OUTAGE_GAP_S:
            return
        self.record(EventKind.RETRY, f"{call} failed ({error}); retrying until the API answers", call=call)

    def lock(self, verb: str, timeout_s: float) -> ContextManager[None]:
        """The cluster's lock (state/lock.py), saying whom it waits for when it must."""

        def waiting(holder: Holder | None) -> None:
            who = holder.describe(self.name) if holder else f"another podmanager process working on {self.name}"
            self.record(EventKind.WAITING, f"waiting for {who}", holder_pid=holder.pid if holder else None,
                        holder_verb=holder.verb if holder else None)

        return cluster_lock(self.name, verb, timeout_s=timeout_s, on_wait=waiting)

    # ------------------------------------------------------------------ the spec and the cloud

    def provisioner(self) -> Provisioner:
        return Provisioner(self.cloud, self.name, self.spec.zones, record=self.record, batch=self.store.batch,
                           clock=self.clock, poll_interval_s=Cadence.for_spec(self.spec).converge_poll_s)

    def observe(self) -> Observed:
        """The cluster's nodes and queued resources as the cloud has them now."""
        return self.provisioner().observe()

    def use_spec(self, spec: ClusterSpec) -> None:
        """Act on `spec` from now on (`up`'s, with the slices it retires): the Ray side is built
        again from it."""
        self.spec = spec
        self._hosts, self._hosts_built = None, False

    def stored_spec(self) -> ClusterSpec | None:
        """The spec the last `up` stored; None before the first."""
        record = self.store.get_cluster(self.name)
        return record.spec if record is not None else None

    def refresh_spec(self) -> None:
        """Take the spec the last `up` stored. A run's supervisor holds the spec of when it
        started; its recovery must converge to the cluster as it is now, or it would
        re-create a slice an edited spec dropped (or delete one it added)."""
        record = self.store.get_cluster(self.name)
        if record is None or record.spec == self.spec:
            return
        self.spec = record.spec
        self._hosts, self._hosts_built = None, False  # built from the old spec's slices

    def close(self) -> None:
        """Disconnect from Ray (the cluster stays up)."""
        if self._hosts is not None:
            self._hosts.close()
