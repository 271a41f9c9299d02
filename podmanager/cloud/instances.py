"""A Compute Engine VM as a typed record, in the fields podmanager sets and reads (the cluster's
controller VM, issue 36). The real client (`gcp/instances.py`) sends and returns it, and the
simulated project (`emulator/sim/instances.py`) keeps it as its state.

Names are short names (`default`, `e2-standard-4`), never the API's URLs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from podmanager.core.spec import CLOUD_PLATFORM_SCOPE

RUNNING = "RUNNING"
# The controller VM's role label, beside its cluster's (`cloud/base.py::CLUSTER_LABEL`).
ROLE_LABEL = "podmanager-role"
CONTROLLER_ROLE = "controller"
# Compute Engine's states of an instance on its way out (or out).
LEAVING_STATES = ("STOPPING", "TERMINATED", "SUSPENDING", "SUSPENDED")
# On the way to TERMINATED (a stop, or a delete's first step) or SUSPENDED: wait for what comes.
SETTLING_STATES = ("STOPPING", "SUSPENDING")
STOPPED, SUSPENDED = "TERMINATED", "SUSPENDED"  # started again with instances.start, resumed with .resume


class Instance(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    zone: str
    machine_type: str
    labels: dict[str, str] = Field(default_factory=dict)
    network: str = "default"
    subnetwork: str = ""  # "": the network's subnetwork in the zone's region (an auto-mode network's)
    network_project: str = ""  # "": the instance's own project; else a Shared VPC's host project
    external_ip: bool = True  # a one-to-one NAT access config: reachable from outside the VPC
    service_account: str = "default"  # "default": the project's default compute service account
    scopes: list[str] = Field(default_factory=lambda: [CLOUD_PLATFORM_SCOPE])
    metadata: dict[str, str] = Field(default_factory=dict)  # startup-script, ...
    tags: list[str] = Field(default_factory=list)
    disk_gb: int = 10
    image: str = ""
    # What the API reports, not what is asked for:
    status: str = ""  # PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED, ...
    internal_ip: str = ""
    external_address: str = ""  # the access config's NAT address, when it has one
    disk: str = ""  # the boot disk's name (Google names it after the instance unless told otherwise)
    metadata_fingerprint: str = ""  # what instances.setMetadata must be given back (its lock)
