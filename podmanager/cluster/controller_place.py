"""Whether this machine may be its cluster's controller (`controller.local: true`) on Google Cloud.

The TPU VMs join the Ray head on the controller by its internal address, so the controller must
sit in the cluster's VPC network: a laptop's head is one no TPU VM can reach, and its slices
would wait for it until `up` gives up, billing. This machine can tell where it is: a Compute
Engine VM's metadata server names the network of each of its interfaces
(`instance/network-interfaces/N/network`, "projects/NUMBER/networks/NAME":
https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys), and any other
machine has no metadata server. So `up` on Google Cloud with a local controller asks it
first, and refuses (exit 2, naming `controller.local`) unless one of the interfaces is on the
cluster's network. A cloud served by `podmanager emulator` (`TPU_EMULATOR_HOST`) is not asked,
nor a dry run in the loopback mode: their VMs are processes of this machine, which reach its
head. A dry run in the namespace mode is asked as Google Cloud asks: this machine stands outside
the simulated VPC, and a simulated controller VM's metadata server names its network.

`GCE_METADATA_HOST`, as Google's client libraries read it, points the question elsewhere.
"""

from __future__ import annotations

import json
import os
import urllib.request

from podmanager.cluster import backends
from podmanager.core.errors import SpecError
from podmanager.core.spec import ClusterSpec

METADATA_HOST = "metadata.google.internal"
TIMEOUT_S = 2.0  # a VM's metadata server answers in milliseconds; a laptop has none to wait for
FIX = "set `controller: {local: false}` in the spec: `up` then makes a controller VM in the cluster's network"


def interface_networks(timeout_s: float = TIMEOUT_S) -> list[str] | None:
    """The network names of this machine's interfaces as its metadata server gives them; None
    when no metadata server answers (not a Compute Engine VM)."""
    host = os.environ.get("GCE_METADATA_HOST") or METADATA_HOST
    request = urllib.request.Request(
        f"http://{host}/computeMetadata/v1/instance/network-interfaces/?recursive=true",
        headers={"Metadata-Flavor": "Google"})
    try:
        # Never through a proxy: the metadata server answers only the VM itself, as Google's libraries ask it.
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=timeout_s) as reply:
            if reply.headers.get("Metadata-Flavor") != "Google":  # a captive portal or proxy, not GCE's
                return None
            interfaces = json.loads(reply.read().decode())
    except (OSError, ValueError):  # no such host, refused, timed out, not JSON
        return None
    return [str(entry.get("network", "")).rsplit("/", 1)[-1] for entry in interfaces if isinstance(entry, dict)]


def cluster_network(spec: ClusterSpec) -> str:
    """The name of the VPC network the cluster's TPU VMs are in."""
    named = spec.network.network if spec.network is not None else None
    return (named or "default").rsplit("/", 1)[-1]


def check_local_controller(spec: ClusterSpec) -> None:
    """Refuse a local controller on Google Cloud anywhere but a VM in the cluster's network."""
    if not spec.controller.local or os.environ.get("TPU_EMULATOR_HOST"):
        return
    if spec.simulated and not backends.vms_in_namespaces(spec):
        return
    networks = interface_networks()
    wanted = cluster_network(spec)
    if networks is None:
        where = "a simulated VM of the dry run's namespace mode" if spec.simulated else "a Compute Engine VM"
        raise SpecError(
            f"controller.local: true: this machine is not {where} (no metadata server answered at "
            f"{os.environ.get('GCE_METADATA_HOST') or METADATA_HOST}), so the TPU VMs could not reach a Ray head "
            f"here", hint=FIX[0].upper() + FIX[1:] + ".")
    if wanted not in networks:
        raise SpecError(
            f"controller.local: true: this VM's network is {', '.join(networks) or 'none'}, not the cluster's "
            f"{wanted}, so the TPU VMs could not reach a Ray head here",
            hint=f"Run podmanager on a VM in network {wanted}, or {FIX}.")
