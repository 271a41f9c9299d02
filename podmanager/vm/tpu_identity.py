"""A TPU VM's identity, read from its metadata server by the join itself (issue 37).

Ray labels a node with its slice (`ray.io/tpu-slice-name`), worker and pod type, and podmanager
places a slice's agents by those labels. Ray finds them in `TPU_NAME`, `TPU_WORKER_ID`, ...
or else asks `metadata.google.internal` itself, a host a simulated VM cannot have. So the join
reads them from the VM's own metadata server (where `GCE_METADATA_IP` points, as JAX and
Google's libraries honour it) and hands them to Ray in the environment: on Google Cloud and in
a dry run the same code derives them, and placement never depends on Ray's own detection.
"""

from __future__ import annotations

import re

from podmanager.core.catalog import lookup
from podmanager.vm import boot_status

ATTRIBUTES = "instance/attributes/"


def worker_hostnames(endpoints: str) -> list[str]:
    """`worker-network-endpoints` as hostnames: a list of hostnames, or of name:id:ip triples
    (the older form), as JAX reads it."""
    hosts = []
    for entry in filter(None, (e.strip() for e in endpoints.split(","))):
        parts = entry.split(":")
        hosts.append(parts[2] if len(parts) == 3 else parts[0])
    return hosts


def topology(tpu_env: str | None, accelerator_type: str) -> str | None:
    """The slice's topology: `TOPOLOGY` of `tpu-env` where the VM has one, else the catalog's
    (None for a type it does not know: Ray then goes without)."""
    found = re.search(r"TOPOLOGY:\s*'([^']+)'", tpu_env or "")
    if found:
        return found.group(1).strip().lower()
    try:
        return lookup(accelerator_type).topology
    except KeyError:
        return None


def from_metadata() -> dict[str, str]:
    """`TPU_NAME`, `TPU_WORKER_ID`, `TPU_ACCELERATOR_TYPE`, `TPU_TOPOLOGY` and
    `TPU_WORKER_HOSTNAMES` of this VM; empty when the metadata server names no TPU (no
    `instance-id`): not a TPU VM, Ray then finds no TPU either."""
    name = boot_status.read_metadata(ATTRIBUTES + "instance-id")
    worker = boot_status.read_metadata(ATTRIBUTES + "agent-worker-number")
    accelerator = boot_status.read_metadata(ATTRIBUTES + "accelerator-type")
    if not (name and worker and accelerator):
        return {}
    identity = {"TPU_NAME": name.strip(), "TPU_WORKER_ID": worker.strip(), "TPU_ACCELERATOR_TYPE": accelerator.strip()}
    shape = topology(boot_status.read_metadata(ATTRIBUTES + "tpu-env"), accelerator.strip())
    if shape:
        identity["TPU_TOPOLOGY"] = shape
    hostnames = worker_hostnames(boot_status.read_metadata(ATTRIBUTES + "worker-network-endpoints") or "")
    if hostnames:
        identity["TPU_WORKER_HOSTNAMES"] = ",".join(hostnames)
    return identity
