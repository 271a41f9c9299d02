"""Shared fixtures: every test gets its own $PODMANAGER_HOME; `clock` and `sim` give a
simulated cloud on a fake clock. Under pytest-xdist, the Ray tests run in a lane of their
own (tests/support/lanes.py)."""

from __future__ import annotations

import os

import pytest
from lanes import RayLaneScheduling, settle_lane

from podmanager.core.clock import FakeClock
from podmanager.emulator import schema_gate
from podmanager.emulator.sim.cloud import SimCloud

# Every emulator the tests start (in this process, or in the background: it inherits this) also
# checks its answers against Google's API definitions, and fails loudly on one that breaks them.
os.environ[schema_gate.STRICT_ENV] = "1"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return RayLaneScheduling(config, log)


def pytest_runtest_setup(item):
    settle_lane(item.path)


@pytest.fixture(autouse=True)
def podmanager_home(tmp_path, monkeypatch):
    home = tmp_path / "pmhome"
    monkeypatch.setenv("PODMANAGER_HOME", str(home))
    monkeypatch.delenv("TPU_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("PODMANAGER_SIM_HOME", raising=False)
    yield home
    # A dry run started this home's emulator; `down` stops it, a test that never downs does here.
    from podmanager.emulator import launcher

    monkeypatch.setenv("PODMANAGER_HOME", str(home))
    monkeypatch.delenv("PODMANAGER_SIM_HOME", raising=False)  # this home's emulators, not a cloud the test read
    launcher.stop_all()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """$PODMANAGER_HOME at the test's own tmp_path, for tests that build paths under it."""
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def sim(clock):
    return SimCloud(clock=clock, create_latency_s=2.0, delete_latency_s=0.5)
