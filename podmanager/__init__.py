"""podmanager: a Ray-orchestrated manager for Cloud TPU pod slices.

    from podmanager import Cluster, Workload
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Cluster", "ClusterStatus", "Workload"]


def __getattr__(name: str) -> Any:
    # Lazy: JAX programs import `podmanager.runtime` and must not pay for the API's imports.
    if name in ("Cluster", "ClusterStatus"):
        from podmanager import api

        return getattr(api, name)
    if name == "Workload":
        from podmanager.workload import Workload

        return Workload
    raise AttributeError(name)
