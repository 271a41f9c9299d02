"""Nobody but the owner reads $PODMANAGER_HOME, and no record holds a run's secrets (issue 34, 2).

The state store held every `--env` value and every replica's router token, in a 0644 file of a
0755 folder: any local user could read them. Tested as an unprivileged user where it is about
other users."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from podmanager.core import paths
from podmanager.core.errors import UnsafeFolderError
from podmanager.core.workload import Workload
from podmanager.state import run_secrets
from podmanager.state.run_records import RunStore
from podmanager.supervision.supervisor import new_run

SECRET = "hunter2-not-in-any-record"
NOBODY = 65534


class _Cluster:
    name = "vault"


def _as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def open_parent(monkeypatch):
    """A home inside a folder every user may enter (pytest's own tmp folder is private)."""
    parent = Path(tempfile.mkdtemp(prefix="pm-private-test-"))
    os.chmod(parent, 0o755)
    monkeypatch.setenv("PODMANAGER_HOME", str(parent / "home"))
    yield parent / "home"
    shutil.rmtree(parent)


def _store_a_run(home: Path) -> None:
    runs = RunStore()
    workload = Workload(entrypoint="train.py", env={"API_KEY": SECRET, "PODMANAGER_SERVICE_ID": "svc-1"})
    record = new_run(_Cluster(), workload, "train-1", [0], None, {})
    assert runs.claim(record) is None
    run_secrets.save("vault", "train-1", workload.env)
    runs.close()


def test_the_home_and_the_store_are_the_owners_only(open_parent):
    _store_a_run(open_parent)
    assert stat.S_IMODE(open_parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((open_parent / "state.db").stat().st_mode) == 0o600
    secrets_file = paths.cluster_dir("vault") / "secrets" / "train-1.json"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    if os.geteuid() != 0:
        pytest.skip("reading as another user needs root to switch to it")
    for target in (open_parent / "state.db", secrets_file):
        refused = _as_nobody("cat", str(target))
        assert refused.returncode != 0 and "Permission denied" in refused.stderr
    listing = _as_nobody("ls", str(open_parent))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr


def test_a_home_made_open_by_an_older_version_is_closed_again(open_parent):
    open_parent.mkdir(mode=0o755)
    os.chmod(open_parent, 0o755)
    assert paths.home() == open_parent
    assert stat.S_IMODE(open_parent.stat().st_mode) == 0o700


def test_no_record_holds_an_env_value_and_the_supervisor_gets_them_back(open_parent):
    _store_a_run(open_parent)
    record = RunStore().get("train-1")
    assert record.workload.env == {"API_KEY": run_secrets.HIDDEN, "PODMANAGER_SERVICE_ID": "svc-1"}
    with sqlite3.connect(open_parent / "state.db") as db:
        dump = "\n".join(db.iterdump())
    assert SECRET not in dump
    restored = run_secrets.load("vault", "train-1", record.workload.env)
    assert restored == {"API_KEY": SECRET, "PODMANAGER_SERVICE_ID": "svc-1"}
    run_secrets.remove("vault", "train-1")
    with pytest.raises(FileNotFoundError, match="API_KEY"):
        run_secrets.load("vault", "train-1", record.workload.env)


def test_a_record_from_before_keeps_its_values():
    old = {"API_KEY": "plain"}
    assert run_secrets.load("vault", "old-run", old) == old


def test_a_home_another_user_made_is_refused_and_nothing_goes_in(open_parent):
    """Adopted, it would be theirs to read (issue 43, 1): never chmod-ed and used."""
    if os.geteuid() != 0:
        pytest.skip("making a folder of another user's needs root")
    open_parent.mkdir()
    os.chown(open_parent, NOBODY, NOBODY)
    os.chmod(open_parent, 0o777)
    with pytest.raises(UnsafeFolderError, match=f"belongs to uid {NOBODY}"):
        paths.home()
    assert list(open_parent.iterdir()) == [] and stat.S_IMODE(open_parent.stat().st_mode) == 0o777
