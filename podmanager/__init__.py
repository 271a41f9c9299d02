"""podmanager: a Ray-orchestrated manager for Cloud TPU pod slices.

    from podmanager import Cluster, Workload
"""

from __future__ import annotations

from typing import Any

from podmanager.core.version import __version__  # noqa: F401  (the documented place to read it)

__all__ = ["Cluster", "ClusterStatus", "ServeOptions", "Workload"]


def __getattr__(name: str) -> Any:
    # Lazy: JAX programs import `podmanager.runtime` and must not pay for the API's imports.
    if name in ("Cluster", "ClusterStatus"):
        from podmanager import api

        return getattr(api, name)
    if name == "runtime":  # `import podmanager; podmanager.runtime.initialize()`
        import importlib

        return importlib.import_module("podmanager.runtime")
    if name == "Workload":
        from podmanager.core.workload import Workload

        return Workload
    if name == "ServeOptions":
        from podmanager.api.serve import ServeOptions

        return ServeOptions
    raise AttributeError(name)
