"""state/service_tokens.py: a service's replica token lives in an owner-only file only, and a
replica run's supervisor finds it there (or, for a run recorded before, in its record)."""

from __future__ import annotations

import stat

import pytest

from podmanager.runtime import replica_protocol as protocol
from podmanager.state import service_tokens


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path))
    return tmp_path


def test_the_token_is_owner_only_and_read_back_for_a_replica_only(home) -> None:
    token = service_tokens.create("c1", "svc-1")
    path = service_tokens.token_path("c1", "svc-1")
    assert path == home / "clusters" / "c1" / "services" / "svc-1.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(token) >= 32 and service_tokens.read("c1", "svc-1") == token
    with pytest.raises(FileExistsError):  # never overwritten: a service's token is made once
        service_tokens.create("c1", "svc-1")

    replica = {protocol.ENV_SERVICE_ID: "svc-1", protocol.ENV_REPLICA: "0"}
    assert service_tokens.replica_env("c1", replica) == {protocol.ENV_SERVE_TOKEN: token}
    assert service_tokens.replica_env("c1", {"OTHER": "1"}) == {}  # a training run
    older = {**replica, protocol.ENV_SERVE_TOKEN: "from-the-record"}  # recorded before the file
    assert service_tokens.replica_env("c1", older) == {}  # its own env already holds it

    service_tokens.remove("c1", "svc-1")
    assert service_tokens.read("c1", "svc-1") is None and service_tokens.replica_env("c1", replica) == {}


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden"])
def test_a_service_id_that_is_no_file_name_is_refused(bad) -> None:
    with pytest.raises(ValueError):
        service_tokens.token_path("c1", bad)
