"""Shared fixtures: every test gets its own $PODMANAGER_HOME."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def podmanager_home(tmp_path, monkeypatch):
    home = tmp_path / "pmhome"
    monkeypatch.setenv("PODMANAGER_HOME", str(home))
    monkeypatch.delenv("TPU_EMULATOR_HOST", raising=False)
    return home
