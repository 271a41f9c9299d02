"""Shared fixtures: every test gets its own $PODMANAGER_HOME; `clock` and `sim` give a
simulated cloud on a fake clock. Under pytest-xdist, the Ray tests run in a lane of their
own (tests/support/lanes.py)."""

from __future__ import annotations

import signal

import pytest
from lanes import (
    RayLaneScheduling,
    hand_lane_file,
    record_ray_files,
    remove_lane_file,
    settle_lane,
)

from podmanager.core.clock import FakeClock
from podmanager.emulator.sim.cloud import SimCloud


def pytest_configure(config):
    terminal_signal_dispositions()


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


def pytest_unconfigure(config):
    remove_lane_file()


def pytest_collection_modifyitems(config, items):
    record_ray_files(config, items)


def pytest_runtest_setup(item):
    settle_lane(item)


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
