"""Hot spares taking lost slices' places, as the recovery plan says (`recovery_plan.Swap`): which
spares are ready to take one now, and the swap itself, one transaction in the run store (the
lost slice becomes a spare, which the cluster's monitor makes again in the background:
`cluster/spare_keeper.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.state.run_records import RunRecord, RunStore
from podmanager.supervision.ports import SupervisedCluster
from podmanager.supervision.recovery_plan import Action, Plan, Swap


class SpareSwap:
    def __init__(self, cluster: SupervisedCluster, runs: RunStore, record: Callable[..., None]):
        self.cluster = cluster
        self.runs = runs
        self.record = record

    def carry_out(self, run: RunRecord, lost: Iterable[int],
                  plan: Callable[[list[int], dict[int, int]], Plan]) -> tuple[Action, dict[int, int]]:
        """Plan with the spares ready now (`plan(ready spares, swaps made)`), make the swaps the
        plan says, and plan again without a spare another run (a replica of the same service,
        say) took since it was seen ready. The plan that follows the swaps, and the swaps made."""
        ready = self.ready(lost)
        swapped: dict[int, int] = {}
        decision = plan(ready, swapped)
        while isinstance(decision, Swap):
            for lost_slice, spare in decision.spares:
                ready.remove(spare)
                if not self.take(run, lost_slice, spare):
                    decision = plan(ready, swapped)
                    break
                swapped[lost_slice] = spare
            else:
                decision = decision.then
        return decision, swapped

    def ready(self, lost: Iterable[int]) -> list[int]:
        """The cluster's spares of a lost slice's accelerator that are READY with every host's
        agent healthy, as recorded and seen now; none when nothing is lost."""
        lost = set(lost)
        recorded = self.runs.spares(self.cluster.name) if lost else []
        if not recorded:
            return []
        kinds = {s.index: s.accelerator.name for s in self.cluster.spec.slice_list()}
        wanted = {kinds.get(i) for i in lost}
        return [index for index in recorded if index not in lost and kinds.get(index) in wanted and self._ready(index)]

    def _ready(self, index: int) -> bool:
        try:
            self.cluster.agents([index])
            return True
        except PodmanagerError:
            return False

    def take(self, run: RunRecord, lost: int, spare: int) -> bool:
        """`spare` becomes the run's slice in place of `lost` (False: another run took it since)."""
        if not self.runs.swap_spare(run, lost, spare):
            return False
        self.record(EventKind.SPARE_SWAPPED, f"run {run.run_id}: hot spare slice {spare} takes the place of lost "
                    f"slice {lost} at once; slice {lost} becomes a spare, made again in the background",
                    lost=lost, spare=spare, slices=run.slices)
        return True
