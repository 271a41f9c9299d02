"""An elastic run that shrank: its lost slices made again in the background while it goes on
with the slices left, and whether it may grow back to all of them.

The supervisor starts it when its plan says shrink (`recovery_plan.Shrink`) and asks
`ready` from its health checks; a failed replacement is tried again after BRING_BACK_RETRY_S.
One replacement at a time: a new one waits for the one under way, and the supervisor's own
(`Replacing`) waits for both (`join`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from podmanager.core.errors import PodmanagerError
from podmanager.core.events import EventKind
from podmanager.supervision.ports import SupervisedCluster

GROW_CHECK_EVERY_S = 1.0  # how often a shrunk run asks whether its lost slices' hosts are back
BRING_BACK_RETRY_S = 60.0  # after a failed background replacement, the next try


class GrowBack:
    def __init__(self, cluster: SupervisedCluster, run_id: str, record: Callable[..., None]):
        self.cluster = cluster
        self.clock = cluster.clock
        self.run_id = run_id
        self.record = record
        self._thread: threading.Thread | None = None  # the replacement under way, or the last one
        self._made = False  # the last replacement ended with every slice made
        self._failed_at = 0.0  # when the last one failed
        self._checked = 0.0  # when `ready` last asked for the hosts

    def start(self, slices: list[int], since: float | None) -> None:
        """Make these lost slices again in the background (delete, create, wait for their hosts),
        after any replacement already under way. `since`: the incident; a slice made again after
        it and READY is kept."""
        before = self._thread
        self._made = False

        def bring_back() -> None:
            if before is not None:
                before.join()
            timings: dict[str, float] = {}
            started = self.clock.now()
            try:
                self.cluster.delete_slices(slices, reason="lost; an elastic run goes on without it", since=since)
                self.cluster.restore_slices(timings)
            except Exception as error:  # noqa: BLE001 - the run goes on shrunk and tries again later
                self._failed_at = self.clock.now()
                self.record(EventKind.WARNING, f"run {self.run_id}: making slice(s) {slices} again failed: {error}; "
                            f"the run goes on without them and tries again in {BRING_BACK_RETRY_S:.0f}s")
                return
            self._made = True
            timings["replace_total"] = self.clock.now() - started
            self.record(EventKind.SLICES_REPLACED, f"slice(s) {slices} made again in the background in "
                        + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()), slices=slices, phases=timings)

        self._thread = threading.Thread(target=bring_back, name=f"bring-back-{self.run_id}", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the replacement under way, if any (it is finished, never cut off mid-create)."""
        if self._thread is not None:
            self._thread.join()

    def ready(self, missing: list[int], slices: list[int], since: float | None) -> bool:
        """The `missing` slices of a shrunk attempt are back: all the run's `slices` READY with
        every host's agent healthy (asked at most every GROW_CHECK_EVERY_S, and only once the
        background replacement has ended). `since`: the run's last incident, for a retry."""
        if not missing or self._thread is None or self._thread.is_alive():
            return False
        now = self.clock.now()
        if not self._made:
            if now - self._failed_at >= BRING_BACK_RETRY_S:
                self.start(missing, since)
            return False
        if now - self._checked < GROW_CHECK_EVERY_S:
            return False
        self._checked = now
        try:
            self.cluster.agents(slices)
        except PodmanagerError:
            return False
        return True
