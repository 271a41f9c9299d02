"""Each service's replica token: the bearer token its replicas present to its router.

A secret, so it lives where the cluster's Ray token does and nowhere else: an owner-only
file, `clusters/<name>/services/<service_id>.token` (0600, in a 0700 folder), never in a
record, an event, a log or an output. `serve` creates it; the router reads it when its actor
starts (again after a restart); each replica run's supervisor reads it at every launch and
hands it to the replica's processes through Ray (authenticated by the Ray token) in their
environment. A replica run recorded before the token moved here still holds it in its
workload's environment, which is used as before.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from podmanager.core import paths
from podmanager.runtime import replica_protocol as protocol

FOLDER = "services"
SUFFIX = ".token"


def token_path(cluster: str, service_id: str) -> Path:
    if not service_id or "/" in service_id or service_id.startswith("."):
        raise ValueError(f"service id {service_id!r} cannot name a file")
    return paths.cluster_dir(cluster) / FOLDER / f"{service_id}{SUFFIX}"


def create(cluster: str, service_id: str) -> str:
    """A new token for the service, written owner-only before anyone is told of it."""
    path = token_path(cluster, service_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)
    return token


def read(cluster: str, service_id: str) -> str | None:
    try:
        return token_path(cluster, service_id).read_text().strip() or None
    except FileNotFoundError:
        return None


def remove(cluster: str, service_id: str) -> None:
    token_path(cluster, service_id).unlink(missing_ok=True)


def replica_env(cluster: str, workload_env: dict[str, str]) -> dict[str, str]:
    """What a run's processes need besides its recorded environment: for a replica of a
    service, its token (unless its record predates this file and holds the token itself)."""
    service_id = workload_env.get(protocol.ENV_SERVICE_ID)
    if not service_id or protocol.ENV_SERVE_TOKEN in workload_env:
        return {}
    token = read(cluster, service_id)
    return {protocol.ENV_SERVE_TOKEN: token} if token else {}
