"""`podmanager dashboard`: podmanager's page of a cluster on this machine (served here, or relayed
from its controller VM over the channel); with `--ray` the Ray dashboard (and `ray job submit`),
with `--service` a service's endpoint, forwarded the same way."""

from __future__ import annotations

import threading
import webbrowser
from typing import Optional

import typer

from podmanager import api
from podmanager.cli.options import CLUSTER_OPTION
from podmanager.cli.render import console


def dashboard(
    cluster: Optional[str] = CLUSTER_OPTION,
    ray: bool = typer.Option(False, "--ray", help="The Ray dashboard instead of podmanager's page."),
    service: Optional[str] = typer.Option(None, "--service", metavar="SERVICE", help="A service's endpoint instead of the page."),
    port: int = typer.Option(0, "--port", metavar="PORT", min=0, max=65535, help="The local port (default: any free one)."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Print the page's address; open no browser."),
) -> None:
    """Open podmanager's page of a cluster (its slices, hosts, runs, timelines, services, events, /metrics) on a local port until Ctrl-C."""
    if ray and service is not None:
        raise typer.BadParameter("give --ray or --service, not both", param_hint="--ray")
    if ray or service is not None:
        _forward(cluster, service, port)
        return
    name = cluster or api.resolve_cluster(None).name
    page = api.open_page(name, port=port)
    try:
        url = page.url  # type: ignore[attr-defined]
        console.print(f"podmanager's page of {name}: {url}\nits metrics: {url}metrics\nCtrl-C stops it.", markup=False)
        if not no_browser:
            webbrowser.open(url)
        threading.Event().wait()  # until Ctrl-C
    finally:
        page.stop()


def _forward(cluster: Optional[str], service: Optional[str], port: int) -> None:
    target = api.resolve_cluster(cluster)
    reached = target.reach_here(service or "dashboard", port=port)
    if reached.forward is None:  # this machine is the controller: the address itself
        console.print(reached.url or f"{target.name} has no dashboard", markup=False)
        return
    try:
        url = reached.url
        if service is None:
            token = api.ray_token_file(target.name)
            console.print(f"the Ray dashboard of {target.name}: {url}\nfor Ray's own tools, in another shell:\n"
                          f"  export RAY_ADDRESS={url} RAY_API_SERVER_ADDRESS={url} RAY_AUTH_MODE=token "
                          f"RAY_AUTH_TOKEN_PATH={token}\nCtrl-C stops the forward.", markup=False)
        else:
            console.print(f"service {service} of {target.name}: {url}\nCtrl-C stops the forward.", markup=False)
        threading.Event().wait()  # until Ctrl-C
    finally:
        reached.stop()
