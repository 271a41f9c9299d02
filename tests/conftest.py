"""Shared fixtures: every test gets its own $PODMANAGER_HOME, its simulated cloud in it; `clock` and `sim` give a
simulated cloud on a fake clock. Under pytest-xdist, the Ray tests run in a lane of their
own (tests/support/lanes.py), where the modules of one dry-run cluster's spec share it
(tests/support/cluster_pool.py)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

import pytest
from cluster_pool import (
    FRESH,
    FRESH_MEANS,
    SPENDS,
    SPENDS_MEANS,
    close_pool,
    current,
    hand_homes_root,
    open_pool,
    order_by_spec,
    sweep_homes,
)
from homes import use_home
from lanes import (
    RayLaneScheduling,
    hand_lane_file,
    record_ray_files,
    remove_lane_file,
    settle_lane,
)

from podmanager.core.clock import FakeClock
from podmanager.emulator import schema_gate
from podmanager.emulator.sim.cloud import SimCloud

FAILED = pytest.StashKey[bool]()  # whether the session failed: its pooled homes are kept for their logs

# Every emulator the tests start (in this process, or in the background: it inherits this) also
# checks its answers against Google's API definitions, and fails loudly on one that breaks them.
os.environ[schema_gate.STRICT_ENV] = "1"


def pytest_configure(config):
    terminal_signal_dispositions()
    temporary_state_home()
    config.addinivalue_line("markers", f"{FRESH}: {FRESH_MEANS}")
    config.addinivalue_line("markers", f"{SPENDS}: {SPENDS_MEANS}")


def terminal_signal_dispositions() -> None:
    """Give this process, and so every process a test starts, SIGINT as a terminal gives it.
    A runner started as a background job (`… &` in a script, some CI runners) has SIGINT
    ignored, Python keeps an ignored SIGINT ignored, and every child inherits that: a test that
    presses Ctrl-C on its client would then wait for nothing. A handler, unlike SIG_IGN, is
    reset to the default action in a child's exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return RayLaneScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    hand_lane_file(node)
    hand_homes_root(node)


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[FAILED] = exitstatus != 0


def pytest_unconfigure(config):
    remove_lane_file()
    sweep_homes(keep=config.stash.get(FAILED, True))
    shutil.rmtree(os.environ.get("XDG_STATE_HOME", ""), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    order_by_spec(items)
    record_ray_files(config, items)


def pytest_runtest_setup(item):
    settle_lane(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's own teardown, the pool downs the clusters the next test does not use."""
    try:
        return (yield)
    finally:
        pool = current()
        if pool is not None:
            pool.keep_for(item, nextitem)


@pytest.fixture(scope="session")
def cluster_pool(request):
    """The session's shared dry-run clusters (this worker's); every one is downed at the end,
    after a failure or Ctrl-C too."""
    try:
        yield open_pool(request.config)
    finally:
        close_pool()


def temporary_state_home() -> None:
    """No test may write to this machine's real ~/.local/state, where the simulated cloud lives by
    default (`paths.default_sim_home`): a process that misses the fixtures below (a module's
    cluster, a subprocess with an environment of its own making) finds a temporary one instead."""
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="pm-test-state-")



@pytest.fixture(autouse=True)
def podmanager_home(tmp_path, monkeypatch):
    home = tmp_path / "pmhome"
    use_home(monkeypatch, home)
    monkeypatch.delenv("TPU_EMULATOR_HOST", raising=False)
    yield home
    # A dry run started this home's emulator; `down` stops it, a test that never downs does here.
    from podmanager.emulator import launcher

    use_home(monkeypatch, home)  # this home's emulators, not a cloud the test read
    launcher.stop_all()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """$PODMANAGER_HOME (and the simulated cloud) at the test's own tmp_path, for tests that build
    paths under it."""
    use_home(monkeypatch, tmp_path)
    return tmp_path


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def sim(clock):
    return SimCloud(clock=clock, create_latency_s=2.0, delete_latency_s=0.5)
