"""`podmanager dashboard`: the Ray dashboard (and `ray job submit`), or a service's endpoint, on
this machine, for a cluster whose controller is a VM; the address of either otherwise."""

from __future__ import annotations

import threading
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console


def dashboard(
    cluster: Optional[str] = CLUSTER_OPTION,
    service: Optional[str] = typer.Option(None, "--service", metavar="SERVICE", help="A service's endpoint instead of the dashboard."),
    port: int = typer.Option(0, "--port", metavar="PORT", min=0, max=65535, help="The local port (default: any free one)."),
) -> None:
    """Forward the Ray dashboard (its job API too), or a service's endpoint, to a local port until Ctrl-C."""
    target = api.resolve_cluster(cluster)
    if not isinstance(target, api.RemoteCluster):  # this machine is the controller: nothing to forward
        status = target.status()
        if service is not None:
            console.print(status.service(service).endpoint, markup=False)
            return
        console.print(status.ray.dashboard_url if status.ray and status.ray.dashboard_url
                      else f"{target.name} has no dashboard", markup=False)
        return
    forward = api.forward(target.name, service or "dashboard", port=port)
    try:
        url = f"http://127.0.0.1:{forward.port}"
        if service is None:
            token = api.ray_token_file(target.name)
            console.print(f"the Ray dashboard of {target.name}: {url}\nfor Ray's own tools, in another shell:\n"
                          f"  export RAY_ADDRESS={url} RAY_API_SERVER_ADDRESS={url} RAY_AUTH_MODE=token "
                          f"RAY_AUTH_TOKEN_PATH={token}\nCtrl-C stops the forward.", markup=False)
        else:
            console.print(f"service {service} of {target.name}: {url}\nCtrl-C stops the forward.", markup=False)
        threading.Event().wait()  # until Ctrl-C
    finally:
        forward.stop()
