"""What the head's actors share (the host monitor, each run's supervisor, each service's
router): detached and named in podmanager's namespace, so any later process finds them and
they outlive the client that started them; pinned to the head node; started again by Ray when
their process dies; and working in the state folder of the client that started them, which
each receives as its first argument and enters first thing (`enter_home`).

Light on purpose (no Ray import at module level): what an actor's module imports is paid
again at each of its restarts.
"""

from __future__ import annotations

import os
from typing import Any

from podmanager.core import paths

NAMESPACE = "podmanager"
HEAD_RESOURCE = "node:__internal_head__"  # every Ray head node has it; pins an actor there
NOT_SLOWED = {"RAY_worker_niceness": "0"}  # Ray starts workers at nice 15; these must keep up


def detached(name: str, **options: Any) -> dict[str, Any]:
    """Ray options of a named actor that outlives its creator (the host agents' too)."""
    return {"name": name, "namespace": NAMESPACE, "lifetime": "detached", **options}


def on_head(name: str, **options: Any) -> dict[str, Any]:
    """Ray options of one of the head's actors: `detached`, restarted whenever its process
    dies, on the head node without taking a CPU from the programs' scheduling."""
    return detached(name, **{"max_restarts": -1, "num_cpus": 0, "resources": {HEAD_RESOURCE: 0.001}, **options})


def start(actor_class: type, name: str, *args: Any, **options: Any) -> Any:
    """Create `actor_class` as one of the head's actors (the caller is connected to the
    cluster's Ray), handing it this client's state folder and then `args`; its handle. Raises
    ValueError when an actor of that name exists."""
    import ray

    return ray.remote(actor_class).options(**on_head(name, **options)).remote(client_home(), *args)


def find(name: str) -> Any | None:
    """The live actor of this name in podmanager's namespace, or None."""
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def client_home() -> str:
    """The state folder of this client, as the head's actors are to use it."""
    return str(paths.home().resolve())


def enter_home(home: str) -> None:
    """First thing in a head's actor's __init__: paths, the store and the simulated cloud are
    the starting client's, not those of the Ray worker's environment."""
    os.environ["PODMANAGER_HOME"] = home
