"""A run whose supervisor is gone (lost with a crashed Ray head) is not stuck (issue 34, 5):
`cancel` ends it within seconds instead of failing after 60, and a live supervisor's run is
left to its supervisor. The restart of lost supervisors by `up` is tested with a real head
crash in test_vm_boot.py."""

from __future__ import annotations

import subprocess
import sys
import time

from podmanager.api.resume import supervisor_gone
from podmanager.api.run_handle import RunHandle
from podmanager.core.workload import Workload
from podmanager.state.run_records import RunStore
from podmanager.state.run_state import SupervisorProcess
from podmanager.supervision.supervisor import new_run


class _Cluster:
    name = "orphans"


def _running(runs: RunStore, run_id: str, pid: int, started_at: float, slice_index: int = 0) -> None:
    record = new_run(_Cluster(), Workload(entrypoint="train.py"), run_id, [slice_index], None, {})
    assert runs.claim(record) is None
    record.status = "running"
    record.supervisor = SupervisorProcess(pid=pid, started_at=started_at, starts=1)
    runs.save(record)


def test_cancel_ends_a_run_whose_supervisor_is_gone_at_once():
    runs = RunStore()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    _running(runs, "lost-1", ended.pid, time.time() - 5)
    assert supervisor_gone(runs.get("lost-1"))
    started = time.monotonic()
    record = RunHandle("orphans", "lost-1", runs=runs).cancel(timeout_s=30)
    assert record.status == "cancelled" and time.monotonic() - started < 10
    assert "supervisor was gone" in record.result.message


def test_a_live_supervisor_is_not_gone_and_a_reused_pid_is():
    runs = RunStore()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _running(runs, "live-1", live.pid, time.time() + 1)
        assert not supervisor_gone(runs.get("live-1"))
        # The same pid, but a process started after the supervisor did: not the supervisor.
        _running(runs, "reused-1", live.pid, time.time() - 3600, slice_index=1)
        assert supervisor_gone(runs.get("reused-1"))
    finally:
        live.kill()
        live.wait()
