"""One cluster as the user's verbs use it, whoever its controller is: this machine
(`api/cluster.py::Cluster`) or a VM reached through the channel (`remote.py::RemoteCluster`).

`Cluster.from_name`, `from_yaml` and `from_dict` return a `ClusterClient`, and the CLI calls
these methods without asking which it holds. A handle's run or service reads its records here
or over the channel alike (`RunView`, `ServiceView`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:  # annotations only: this module loads nothing
    from podmanager.channel.cluster_status import ClusterStatus
    from podmanager.channel.run_status import RunStatus
    from podmanager.channel.service_summary import ReplicaState, ServiceSummary
    from podmanager.client.run_view import EventCallback, Printer, RunView
    from podmanager.core.event_data import Event
    from podmanager.core.faults import FaultKind
    from podmanager.core.records import RayAccess
    from podmanager.core.run_results import RunResult
    from podmanager.core.serve_options import ServeOptions
    from podmanager.core.spec import ClusterSpec
    from podmanager.core.workload import Workload


class ServiceView(Protocol):
    """A service's handle: its summary (as `runs --json` prints it), followed until it stops,
    waited for, and reached from this machine."""

    cluster: str
    service_id: str

    @property
    def reach(self) -> str:
        """How a user reaches the service from this machine, as a phrase."""
        ...

    def summary_record(self) -> ServiceSummary: ...

    def summary(self) -> dict[str, Any]:
        """`summary_record`, as `runs --json` prints it."""
        ...

    def follow(self, on_summary: Callable[[dict[str, Any]], None], *, every_s: float = 2.0) -> dict[str, Any]: ...

    def wait_ready(self, replicas: int | None = None, *, timeout_s: float = 300.0) -> list[ReplicaState]: ...

    def reachable(self, *, port: int = 0) -> AbstractContextManager[str]: ...


class Stopped(Protocol):
    """What cancelling a service returns: its record as it is now."""

    @property
    def status(self) -> str: ...


class Stoppable(Protocol):
    def stop(self) -> None: ...


@dataclass(frozen=True)
class Reached:
    """Where this machine reaches a cluster's dashboard or a service: the address itself when
    this machine is the controller (`forward` None), else a local port forwarded to it over the
    channel until `stop`."""

    url: str | None  # None: there is no dashboard (no head)
    forward: Stoppable | None = None

    def stop(self) -> None:
        if self.forward is not None:
            self.forward.stop()


class ClusterClient(Protocol):
    """The user's verbs on one cluster. Leaving a `with` block closes the connection (and with
    `down_on_exit`, first downs the cluster)."""

    name: str

    @property
    def spec(self) -> ClusterSpec: ...

    def __enter__(self) -> ClusterClient: ...

    def __exit__(self, *exc_info: object) -> None: ...

    def close(self) -> None: ...

    # ------------------------------------------------------------------ the cluster

    def up(self, *, timeout_s: float = 1800.0, force: bool = False, on_plan: Callable[[Any], None] | None = None,
           on_event: EventCallback | None = None, delete_on_failure: bool = False) -> ClusterStatus: ...

    def down(self, *, timeout_s: float = 600.0, on_event: EventCallback | None = None) -> None: ...

    def status(self) -> ClusterStatus: ...

    def events(self, *, after_id: int = 0) -> list[Event]: ...

    def ray_access(self, *, required: bool = False) -> RayAccess | None:
        """Where Ray's own tools reach the head; with `required`, the error that says why they
        cannot instead of None."""
        ...

    def reach_here(self, target: str, *, port: int = 0) -> Reached:
        """The Ray dashboard (`target` "dashboard") or a service (its id) as this machine reaches
        it; a forward on `port` (0: any free one) when it is on a controller VM."""
        ...

    # ------------------------------------------------------------------ runs

    def runs(self) -> list[RunStatus]: ...

    def submit(self, workload: Workload, *, budgets: dict[str, int] | None = None) -> RunView: ...

    def run(self, workload: Workload, *, printer: Printer | None = None, budgets: dict[str, int] | None = None,
            down_on_exit: bool = False, on_interrupt: Callable[[Any], bool] | None = None,
            on_event: EventCallback | None = None) -> RunResult: ...

    def run_handle(self, run_id: str) -> RunView: ...

    # ------------------------------------------------------------------ services

    def serve(self, workload: Workload, options: ServeOptions | None = None, *,
              budgets: dict[str, int] | None = None) -> ServiceView: ...

    def service_handle(self, service_id: str) -> ServiceView: ...

    def has_service(self, service_id: str) -> bool: ...

    def cancel_service(self, service_id: str) -> Stopped: ...

    # ------------------------------------------------------------------ a dry run's faults

    def inject(self, fault: FaultKind) -> str:
        """Inject one fault into the dry run's simulated cloud or hosts now; what happened."""
        ...

    def head_crash(self) -> str: ...

    def controller_crash(self) -> str: ...

    def controller_stop(self, *, suspend: bool = False) -> str: ...
