"""A blocking `Cluster.run` takes its run with it however it ends (any exception cancels it;
`down_on_exit` deletes the cluster), and `Cluster` as a context manager cleans up what it
started. The simulated control plane, and a stand-in for the run's handle: no Ray."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sim_view import sim_nodes

from podmanager.api import Cluster
from podmanager.core.records import HostRef
from podmanager.core.workload import Workload
from podmanager.state import StateStore

SPEC = {"name": "exits", "zones": ["zone-a"], "slices": [{"accelerator": "v4-8", "count": 2}],
        "simulation": {"boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}}
WORKLOAD = Workload(command=["train"], working_dir=None)


@dataclass
class _Status:
    active: bool


class FakeHandle:
    """A submitted run that prints one line, then (if nobody cancels it) goes on forever."""

    run_id = "train-1"

    def __init__(self) -> None:
        self.cancelled = False

    def submit_event_id(self) -> int:
        return 0

    def follow(self, printer, on_event, *, after_event=None, on_interrupt=None):  # type: ignore[no-untyped-def]
        try:
            printer(HostRef(0, 0), "step 1 loss 0.5\n")
        except KeyboardInterrupt:
            if on_interrupt is None or not on_interrupt(self):
                raise
        raise AssertionError("a run followed to its end is not what these tests are about")

    def status(self) -> _Status:
        return _Status(active=not self.cancelled)

    def cancel(self) -> _Status:
        self.cancelled = True
        return self.status()


@pytest.fixture
def cluster(monkeypatch) -> Cluster:
    cluster = Cluster.from_dict(SPEC, dry_run=True)
    cluster.up()
    handle = FakeHandle()
    monkeypatch.setattr(cluster, "submit", lambda workload, budgets=None: handle)
    cluster.handle = handle  # type: ignore[attr-defined]
    return cluster


def nodes() -> list[str]:
    return sorted(n.name for n in sim_nodes("podmanager-sim"))


def raising(error: BaseException):  # type: ignore[no-untyped-def]
    def printer(host, text):  # type: ignore[no-untyped-def]
        raise error

    return printer


def test_an_exception_from_the_printer_cancels_the_run_and_the_cluster_stays_without_down_on_exit(cluster):
    with pytest.raises(ValueError, match="disk full"):
        cluster.run(WORKLOAD, printer=raising(ValueError("disk full")))
    assert cluster.handle.cancelled
    assert nodes() == ["exits-s0", "exits-s1"]


def test_an_exception_from_the_printer_with_down_on_exit_cancels_the_run_and_deletes_the_cluster(cluster):
    with pytest.raises(ValueError, match="disk full"):
        cluster.run(WORKLOAD, printer=raising(ValueError("disk full")), down_on_exit=True)
    assert cluster.handle.cancelled
    assert nodes() == [] and StateStore().get_cluster("exits") is None


def test_an_interrupt_the_caller_turns_into_a_detach_leaves_the_run_and_the_cluster(cluster):
    detached = []
    with pytest.raises(KeyboardInterrupt):
        cluster.run(WORKLOAD, printer=raising(KeyboardInterrupt()), down_on_exit=True,
                    on_interrupt=lambda handle: detached.append(handle.run_id) or False)
    assert detached == ["train-1"] and not cluster.handle.cancelled
    assert nodes() == ["exits-s0", "exits-s1"]  # a run left going keeps its cluster


def test_a_plain_interrupt_cancels_the_run(cluster):
    with pytest.raises(KeyboardInterrupt):
        cluster.run(WORKLOAD, printer=raising(KeyboardInterrupt()))
    assert cluster.handle.cancelled


def test_the_context_closes_the_ray_connection_and_leaves_the_cluster_up(monkeypatch):
    closed = []
    monkeypatch.setattr(Cluster, "close", lambda self: closed.append(self.name))
    with Cluster.from_dict(SPEC, dry_run=True) as cluster:
        cluster.up()
    assert closed == ["exits"]
    assert nodes() == ["exits-s0", "exits-s1"]


def test_the_context_with_down_on_exit_downs_the_cluster_also_when_the_block_raises(monkeypatch):
    closed = []
    monkeypatch.setattr(Cluster, "close", lambda self: closed.append(self.name))
    with pytest.raises(RuntimeError, match="the script failed"):
        with Cluster.from_dict(SPEC, dry_run=True, down_on_exit=True) as cluster:
            cluster.up()
            raise RuntimeError("the script failed")
    assert nodes() == [] and StateStore().get_cluster("exits") is None
    assert closed == ["exits"]
