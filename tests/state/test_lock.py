"""The cluster lock (state/lock.py) that `up`, `down` and recovery take: one holder at a time
across processes and threads, re-entrant for its holder, freed by the kernel when its
holder dies, and it names its holder to whoever waits."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from race_workers import SPAWN, append, hold_in_turns, hold_until_told, start, stop_all

from podmanager.core.errors import TimeoutExceededError
from podmanager.state.lock import cluster_lock, holder_of

ROUNDS = 20


def test_processes_hold_the_lock_one_at_a_time(podmanager_home, tmp_path):
    log = tmp_path / "turns.log"
    barrier = SPAWN.Barrier(3)
    procs = [start(hold_in_turns, str(podmanager_home), "locked", ROUNDS, barrier, str(log)) for _ in range(3)]
    stop_all(procs)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert_turns(log.read_text().splitlines(), 3)


def assert_turns(lines: list[str], holders: int) -> None:
    """Never two holders at once: every 'enter X' is followed by 'exit X'."""
    assert len(lines) == 2 * holders * ROUNDS
    for enter, leave in zip(lines[::2], lines[1::2]):
        assert enter.startswith("enter ") and leave == f"exit {enter.split()[1]}", lines


def test_threads_take_turns_and_the_holding_thread_may_take_it_again(podmanager_home, tmp_path):
    log = tmp_path / "turns.log"
    barrier = threading.Barrier(4)

    def work() -> None:
        for _ in range(ROUNDS):
            barrier.wait(timeout=60)
            with cluster_lock("locked", "up", timeout_s=30):
                with cluster_lock("locked", "recovery", timeout_s=30):  # re-entered: no deadlock
                    append(str(log), f"enter {threading.get_ident()}")
                    append(str(log), f"exit {threading.get_ident()}")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert_turns(log.read_text().splitlines(), 4)


def test_a_killed_holder_leaves_the_lock_free(podmanager_home):
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = start(hold_until_told, str(podmanager_home), "locked", held, release)
    try:
        assert held.wait(timeout=60)
        assert holder_of("locked").pid == holder.pid and holder_of("locked").verb == "up"
        with pytest.raises(TimeoutExceededError, match=f"another podmanager up of locked \\(pid {holder.pid}\\) "
                                                       "still holds the cluster's lock"):
            with cluster_lock("locked", "down", timeout_s=0.3):
                pass
        os.kill(holder.pid, signal.SIGKILL)  # no chance to let go: the kernel does
        with cluster_lock("locked", "down", timeout_s=10):
            assert holder_of("locked").pid == os.getpid()
    finally:
        stop_all([holder])
