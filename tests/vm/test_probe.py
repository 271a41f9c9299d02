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
    bad = probe.ProbeResult(True, 4, 0, "pid 1 (x)", 1, 1, 0.0)
    assert not bad.healthy and "0 of 4 chips" in bad.detail and "pid 1" in bad.detail
