"""Ray side of podmanager: the head, host join, simulated hosts, one agent per host.

The API uses `HostController` only; see controller.py. Imports are lazy so that a Ray
worker importing `podmanager.hosts.agent` does not pay for the controller's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podmanager.hosts.controller import HostController
    from podmanager.hosts.host_info import HostInfo

__all__ = ["HostController", "HostInfo"]


def __getattr__(name: str) -> Any:
    if name == "HostController":
        from podmanager.hosts.controller import HostController

        return HostController
    if name == "HostInfo":
        from podmanager.hosts.host_info import HostInfo

        return HostInfo
    raise AttributeError(name)
