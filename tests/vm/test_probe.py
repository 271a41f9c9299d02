"""vm/probe.py: a host's probe of its chips, a held libtpu lock included."""

from __future__ import annotations

import fcntl
import os
import time

from podmanager.vm import probe


def test_probe_sees_a_held_libtpu_lock(tmp_path):
    lockfile = tmp_path / "libtpu_lockfile"
    assert probe.lock_holder(str(lockfile)) is None
    lockfile.write_text("")
    assert probe.lock_holder(str(lockfile)) is None  # stale file, nobody holds it
    pid = os.fork()
    if pid == 0:  # a "stray process" holding the chips
        fd = os.open(lockfile, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        time.sleep(3)
        os._exit(0)
    try:
        deadline = time.monotonic() + 2
        holder = None
        while holder is None and time.monotonic() < deadline:
            holder = probe.lock_holder(str(lockfile))
            time.sleep(0.05)
        assert holder is not None
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_probe_result_health():
    good = probe.probe_host(4, simulated=True)
    assert good.healthy and good.detail == "ok"
    bad = probe.ProbeResult(alive=True, chips_expected=4, chips_visible=0, chips_held_by="pid 1 (x)",
                            memory_free_bytes=1, disk_free_bytes=1, timestamp=0.0)
    assert not bad.healthy and "0 of 4 chips" in bad.detail and "pid 1" in bad.detail


def test_a_probe_answered_as_the_previous_version_did_reads_alike():
    # Its agent answered a dict: the probe's fields, its verdict and where the agent is.
    answered = {"alive": True, "chips_expected": 4, "chips_visible": 4, "chips_held_by": None,
                "memory_free_bytes": 1, "disk_free_bytes": 1, "timestamp": 5.0, "healthy": True, "detail": "ok",
                "ray_node_id": "n0", "ip": "10.0.0.2"}
    read = probe.ProbeResult.model_validate(answered)
    assert (read.healthy, read.detail, read.ray_node_id, read.ip, read.timestamp) == (True, "ok", "n0", "10.0.0.2", 5.0)
