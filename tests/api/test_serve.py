"""api/serve.py::start_service when it is interrupted or fails part way: the service's record
is written before anything starts (so `runs` lists it and `cancel` stops it), and what was
started is stopped again; `serve` says what became of the service, not `up`'s message.
The router and the runs are fakes: this is about the order of things, not Ray."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from podmanager import api
from podmanager.api import serve
from podmanager.api.serve import ServeInterrupted, ServeOptions, start_service
from podmanager.cli import app
from podmanager.core.workload import Workload
from podmanager.serving.router_actor import RouterPlace
from podmanager.state import service_tokens
from podmanager.state.services import ServiceStore


class FakeRuns:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def active(self, cluster: str) -> list:
        return []

    def spares(self, cluster: str) -> list[int]:
        return []  # no hot spares: every slice serves

    def request_cancel(self, run_id: str) -> None:
        self.cancelled.append(run_id)


@pytest.fixture
def started(monkeypatch):
    """What start_service started: the router (service ids) and the replica runs, and what it stopped."""
    seen = SimpleNamespace(routers=[], stopped=[], submitted=[], interrupt_at=None, codes=[])

    def start_router(cluster, service_id, config, place):
        assert ServiceStore().get(service_id) is not None  # the record came first
        assert service_tokens.read(cluster, service_id) is not None  # and the token
        seen.routers.append(service_id)
        if seen.interrupt_at == "router":
            raise KeyboardInterrupt

    def submit_run(runtime, runs, workload, budgets, code=None):
        if seen.interrupt_at == len(seen.submitted):
            raise KeyboardInterrupt
        seen.submitted.append(f"replica-run-{len(seen.submitted)}")
        seen.codes.append(code)
        return seen.submitted[-1]

    monkeypatch.setattr(serve, "start_router", start_router)
    monkeypatch.setattr(serve, "stop_router", seen.stopped.append)
    monkeypatch.setattr(serve, "submit_run", submit_run)
    monkeypatch.setattr(serve, "run_slices", lambda spec, workload, spares=None, shipped=None: [0, 1])
    monkeypatch.setattr(serve, "packed", lambda workload, code=None: None)  # packing: its own test below
    monkeypatch.setattr(serve, "_router_place", lambda runtime, options: RouterPlace("127.0.0.1", 1, "127.0.0.1", 2))
    return seen


RUNTIME = SimpleNamespace(name="demo", spec=None, hosts=SimpleNamespace(), connect_ray=lambda: True,
                          record=lambda *args, **fields: None)


@pytest.mark.parametrize("interrupt_at", ["router", 1])  # starting the router; submitting the second replica
def test_ctrl_c_while_serve_starts_stops_what_it_started_and_the_record_says_so(started, interrupt_at) -> None:
    started.interrupt_at = interrupt_at
    runs = FakeRuns()
    with pytest.raises(ServeInterrupted) as interrupted:
        start_service(RUNTIME, runs, ServiceStore(), Workload(entrypoint="doubler.py"), ServeOptions(), {})
    [service] = ServiceStore().list("demo")
    assert started.routers == started.stopped == [service.service_id]
    assert runs.cancelled == started.submitted == service.replica_runs == ([] if interrupt_at == "router"
                                                                           else ["replica-run-0"])
    assert service.status == "cancelled" and "interrupted" in service.message
    assert service_tokens.read("demo", service.service_id) is None
    assert f"service {service.service_id} was not started" in str(interrupted.value)


def test_a_started_service_records_each_replica_run(started) -> None:
    service_id = start_service(RUNTIME, FakeRuns(), ServiceStore(), Workload(entrypoint="doubler.py"), ServeOptions(),
                               {})
    service = ServiceStore().get(service_id)
    assert (service.status, service.replica_runs, started.stopped) == ("serving", ["replica-run-0", "replica-run-1"], [])
    assert service_tokens.read("demo", service_id) is not None


def test_serve_interrupted_says_what_became_of_the_service_not_ups_message(monkeypatch) -> None:
    class Target:
        name = "demo"

        def serve(self, *args, **kwargs):
            raise ServeInterrupted("svc-1", undone=True)

        def close(self) -> None:
            pass

    monkeypatch.setattr(api, "resolve_cluster", lambda name: Target())
    result = CliRunner().invoke(app, ["serve", "doubler.py"])
    assert result.exit_code == 130, result.output
    assert "service svc-1 was not started; its router and replica runs were stopped" in result.output
    assert "podmanager down" not in result.output


def test_the_services_code_is_packed_once_for_every_replica(started, monkeypatch, tmp_path) -> None:
    from podmanager.api import submit

    (tmp_path / "doubler.py").write_text("print(2)\n")
    packs = []
    monkeypatch.setattr(serve, "packed", lambda workload, code=None: packs.append(1) or submit.packed(workload, code))
    start_service(RUNTIME, FakeRuns(), ServiceStore(), Workload(entrypoint="doubler.py", working_dir=str(tmp_path)),
                  ServeOptions(), {})
    [code, again] = started.codes
    assert packs == [1] and code is again and code.files == {"doubler.py"}
