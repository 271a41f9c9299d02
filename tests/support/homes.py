"""A test's $PODMANAGER_HOME with its simulated cloud in it: outside the suite the simulated cloud
has a place of its own per user (`paths.default_sim_home`), which a test must never write to, and
each test's cloud must be its own; so here `$PODMANAGER_SIM_HOME` goes wherever the home goes."""

from __future__ import annotations

import os
from pathlib import Path


def home_env(home: str | Path) -> dict[str, str]:
    """The variables that put the state folder and the simulated cloud at `home`."""
    return {"PODMANAGER_HOME": str(home), "PODMANAGER_SIM_HOME": str(home)}


def use_home(monkeypatch, home: str | Path) -> None:  # type: ignore[no-untyped-def]
    for name, value in home_env(home).items():
        monkeypatch.setenv(name, value)


def set_home(home: str | Path) -> dict[str, str | None]:
    """`home_env` into os.environ (for a module's fixture, which no monkeypatch outlives); what
    was there before, for `restore`."""
    saved = {name: os.environ.get(name) for name in home_env(home)}
    os.environ.update(home_env(home))
    return saved


def restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
