"""Shared fixtures: every test gets its own $PODMANAGER_HOME, its simulated cloud in it; `clock` and `sim` give a
simulated cloud on a fake clock. Under pytest-xdist, the Ray tests run in a lane of their
own (tests/support/lanes.py)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from homes import use_home
from lanes import RayLaneScheduling, settle_lane

from podmanager.core.clock import FakeClock
from podmanager.emulator.sim.cloud import SimCloud


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return RayLaneScheduling(config, log)


def pytest_runtest_setup(item):
    settle_lane(item.path)


def pytest_configure(config):
    """No test may write to this machine's real ~/.local/state, where the simulated cloud lives by
    default (`paths.default_sim_home`): a process that misses the fixtures below (a module's
    cluster, a subprocess with an environment of its own making) finds a temporary one instead."""
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="pm-test-state-")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.get("XDG_STATE_HOME", ""), ignore_errors=True)


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
