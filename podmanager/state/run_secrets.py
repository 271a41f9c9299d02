"""A run's environment values (`--env`, a replica's router token): secrets, kept out of records.

The run's record (`state/run_records.py`) keeps the variables' names only; the values live in one
owner-only file per run, `clusters/<cluster>/secrets/<run_id>.json` (0600 in a 0700 folder),
beside the cluster's Ray token, where the run's supervisor reads them for every launch.
A few variables podmanager sets itself and that are no secret stay readable in the record
(`PUBLIC`): `runs` shows which service a replica belongs to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from podmanager.core import paths
from podmanager.runtime.replica_protocol import ENV_SERVICE_ID

PUBLIC = frozenset({ENV_SERVICE_ID})
HIDDEN = "<secret>"  # what a record shows in place of a value


class RunEnvironment(BaseModel):
    """What the secrets file of a run holds."""

    env: dict[str, str]


def redacted(env: dict[str, str]) -> dict[str, str]:
    """`env` as a record may show it: every value hidden but podmanager's public ones."""
    return {name: value if name in PUBLIC else HIDDEN for name, value in env.items()}


def _path(cluster: str, run_id: str) -> Path:
    return paths.private_dir(paths.cluster_dir(cluster) / "secrets") / f"{run_id}.json"


def save(cluster: str, run_id: str, env: dict[str, str]) -> None:
    """Keep `env` for the run, readable by the owner only."""
    path = _path(cluster, run_id)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(RunEnvironment(env=env).model_dump_json())
    os.replace(temporary, path)


def load(cluster: str, run_id: str, recorded: dict[str, str]) -> dict[str, str]:
    """The run's environment: `recorded` (its record's, values hidden) with the values kept by
    `save`. A record from before the values moved here holds them itself and is taken as is."""
    try:
        kept = RunEnvironment.model_validate(json.loads(_path(cluster, run_id).read_text())).env
    except FileNotFoundError:
        kept = {}
    missing = [name for name, value in recorded.items() if value == HIDDEN and name not in kept]
    if missing:
        raise FileNotFoundError(f"run {run_id}: the values of {', '.join(sorted(missing))} are lost "
                                f"(their file under {paths.cluster_dir(cluster) / 'secrets'} is gone)")
    return {**recorded, **{name: kept[name] for name in recorded if name in kept}}


def remove(cluster: str, run_id: str) -> None:
    _path(cluster, run_id).unlink(missing_ok=True)
