"""A run's code and requirements set up ahead on the cluster's ready hot spares, so a spare
that takes the place of one of its lost slices costs only the relaunch: the attempt's setup
finds the run set up there (`vm/workload_runs.py::HostRuns.setup`) and does nothing.

Driven by the run's supervisor between its health checks, after its own attempt started: it
never waits for a host. Every PREPARE_EVERY_S it asks each ready spare of the run's
accelerators to set the run up (a host that has it already answers at once), so a spare that
becomes ready later (one the cluster's monitor made again) is prepared when it is seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.exceptions import GetTimeoutError, RayActorError

from podmanager.attempts.attempt import AttemptRunner
from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.core.records import HostSlot
from podmanager.state.run_records import RunStore
from podmanager.supervision.ports import SupervisedCluster
from podmanager.vm.environments import HostSetup

PREPARE_EVERY_S = 5.0  # how often the ready spares are looked at


class SparePreparer:
    def __init__(self, cluster: SupervisedCluster, runs: RunStore, run_id: str, runner: AttemptRunner,
                 record: Callable[..., None]):
        self.cluster = cluster
        self.runs = runs
        self.run_id = run_id
        self.runner = runner
        self.record = record
        self._due = 0.0
        self._asked: dict[Any, HostSlot] = {}  # a setup call in flight -> the spare's host
        self._failed: set[str] = set()  # hosts whose setup failed: not asked again

    def tick(self, run_slices: list[int]) -> None:
        """Collect the answers that came; every PREPARE_EVERY_S, ask the ready spares that
        could take one of `run_slices` and have no call in flight."""
        self._collect()
        now = self.cluster.clock.now()
        if now < self._due:
            return
        self._due = now + PREPARE_EVERY_S
        kinds = {s.index: s.accelerator.name for s in self.cluster.spec.slice_list()}
        wanted = {kinds.get(i) for i in run_slices}
        asked = {slot.label for slot in self._asked.values()}
        for spare in self.runs.spares(self.cluster.name):
            if kinds.get(spare) not in wanted or spare in run_slices:
                continue
            try:
                hosts = self.cluster.agents([spare])
            except PodmanagerError:
                continue  # not ready yet: looked at again next time
            for slot, agent in hosts:
                if slot.label not in asked and slot.label not in self._failed:
                    call = agent.setup_workload.remote(self.runner.setup_record, self.runner.code())
                    self._asked[call] = slot

    def _collect(self) -> None:
        if not self._asked:
            return
        remote = self.runner.remote
        done, _ = remote.wait(list(self._asked), len(self._asked), 0)
        for call in done:
            slot = self._asked.pop(call)
            try:
                report: HostSetup = remote.get(call, timeout=0)
            except (RayActorError, GetTimeoutError):
                continue  # the spare went away: a new one is asked when it is ready
            if not report.ok:
                self._failed.add(slot.label)
                self.record(EventKind.WARNING, f"run {self.run_id}: setting it up ahead on hot spare {slot.label} "
                            f"failed ({report.error}); a swap to it sets it up then", slice_index=slot.slice_index)
            elif not report.already:
                self.record(EventKind.SPARE_PREPARED, f"run {self.run_id}: its code and requirements are set up "
                            f"ahead on hot spare {slot.label} in {report.seconds:.1f}s"
                            + ("" if report.reused else " (installed)"), slice_index=slot.slice_index,
                            host=slot.label, seconds=report.seconds)
