"""Preemptions a test fires while its run goes on, each from a thread of its own (as the cloud
would: the run's printer that decides to fire must not wait for the cloud's answer), and
every one of them over before the test ends.

On a shared cluster a fault must not outlive its test: under load a thread started at step 50
can reach the cloud after its run has ended, and a notice's preemption lands `notice_s` after
the announcement; either would then land in the next test's run. `settle` (on leaving the
`with` block) joins the threads, then waits until every node given a notice has been
preempted, so the next test is handed a cluster whose faults are all behind it
(`hand_over_clean` then makes the preempted slices again).
"""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podmanager.api import simulation
from podmanager.cloud.base import NodeState
from podmanager.core.clock import poll_until

if TYPE_CHECKING:
    from podmanager.cluster.cluster_runtime import ClusterRuntime

# A preemption call is a node listing and one call to the emulator, which the next call
# restarts if it died: well within this on a loaded machine.
CALL_TIMEOUT_S = 120.0
# How long after its notice period a noticed node may still be READY (the emulator's ticker).
LANDING_MARGIN_S = 60.0


@dataclass(frozen=True)
class Noticed:
    """A node given a preemption notice: it, not a later node of the same name."""

    slice_index: int
    name: str
    create_time: float | None
    notice_s: float


class FiredFaults:
    """`preempt(slice, notice_s)` from a thread; on leaving the `with` block, every preemption
    fired has reached the cloud and every announced one has landed (or the block raises)."""

    def __init__(self, runtime: "ClusterRuntime", *, call_timeout_s: float = CALL_TIMEOUT_S,
                 landing_margin_s: float = LANDING_MARGIN_S) -> None:
        self.runtime = runtime
        self.call_timeout_s, self.landing_margin_s = call_timeout_s, landing_margin_s
        self._threads: list[threading.Thread] = []
        self._noticed: list[Noticed] = []
        self._errors: list[str] = []
        self._lock = threading.Lock()

    def __enter__(self) -> FiredFaults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.settle()

    def preempt(self, slice_index: int, notice_s: float = 0.0) -> None:
        """Preempt the node that holds `slice_index` (after `notice_s`), from another thread."""
        thread = threading.Thread(target=self._preempt, args=(slice_index, notice_s),
                                  name=f"preempt slice {slice_index}", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _preempt(self, slice_index: int, notice_s: float) -> None:
        try:
            # The product's own fault verb first: its first call goes through the Cloud TPU
            # client, which retries an UNAVAILABLE; a first call on the simulator's controls
            # after the emulator's restart failed so (restarted-emulator test, load 6).
            name = simulation.preempt(self.runtime, slice_index, notice_s)
            if notice_s > 0:
                # The noticed node, still READY for its notice period, is told from a later one
                # of its name by its create time as the simulator keeps it (the Cloud TPU API's
                # is rounded to the microsecond: never equal to it).
                created = [n.create_time for n in self.runtime.simulator.all_nodes() if n.name == name]
                with self._lock:  # (a node gone already has nothing left to land)
                    self._noticed += [Noticed(slice_index, name, time, notice_s) for time in created]
        except Exception as error:  # told by settle, in the test, not lost in this thread
            where = "".join(traceback.format_tb(error.__traceback__)).rstrip()  # which call failed
            with self._lock:
                self._errors.append(f"preempting slice {slice_index}: {type(error).__name__}: {error}\n{where}")

    def settle(self) -> None:
        """Join every fired preemption, then wait for every announced one to land."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(self.call_timeout_s)
        late = [t.name for t in threads if t.is_alive()]
        assert not late, f"{late}: the call to the cloud did not end within {self.call_timeout_s:.0f} s"
        assert not self._errors, "; ".join(self._errors)
        for noticed in self._noticed:
            poll_until(lambda: not self._still_ready(noticed), timeout_s=noticed.notice_s + self.landing_margin_s,
                       interval_s=0.25,
                       what=f"the preemption announced for slice {noticed.slice_index} ({noticed.name}) to land")

    def _still_ready(self, noticed: Noticed) -> bool:
        return any(n.name == noticed.name and n.create_time == noticed.create_time and n.state == NodeState.READY
                   for n in self.runtime.simulator.all_nodes())
