"""The cluster's own service accounts and what each is granted: least privilege, from what each
machine really calls (docs/permissions.md lists every call with its permission and role).

A project of a secure-by-default organization gives the default compute account no role at all
(https://docs.cloud.google.com/resource-manager/docs/secure-by-default-organizations), so a TPU VM
running as it cannot even read the Ray token. `up` therefore makes `pm-<cluster>-vms` for the TPU
VMs (and names `pm-<cluster>-ctl` for a controller VM), idempotently, unless the spec's
`network.service_account` names an account of the user's: then that one is used as it is and
podmanager makes and grants no account of its own.

What a TPU VM calls: Secret Manager's `versions.access` of the Ray-token secret (its startup
script), Cloud Storage's `objects.get` of the staged wheel and the objects of the checkpoint
bucket (orbax reads, writes, lists and deletes). Guest attributes go through the metadata server
and need no role. So the VMs' account gets no project role at all: only roles on those resources
(the secret's and each bucket's own policy), granted where they are made (`secrets.grant_access`,
`cluster/bucket_preflight.py`).

The controller VM's account (`controller.local: false`) is granted on the project what its `up`
calls: Cloud TPU nodes and queued resources (roles/tpu.admin), the network read and the
cluster's firewall rule made and deleted (roles/compute.securityAdmin, the only predefined role
that creates firewall rules), and on the VMs' account iam.serviceAccounts.actAs
(roles/iam.serviceAccountUser granted on that account alone, not the project: it may then act as
no other account).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from podmanager.cloud.gcp.project_iam import account_email
from podmanager.core.spec import ClusterSpec

VMS, CONTROLLER = "vms", "ctl"

# (account, role, where): the grants `up` makes beside the resources' own (module docstring).
# https://docs.cloud.google.com/iam/docs/roles-permissions/tpu, .../compute, .../iam
PROJECT_ROLES: dict[str, tuple[str, ...]] = {
    VMS: (),
    CONTROLLER: ("roles/tpu.admin", "roles/compute.securityAdmin"),
}
ON_VMS_ACCOUNT: dict[str, tuple[str, ...]] = {VMS: (), CONTROLLER: ("roles/iam.serviceAccountUser",)}
# Granted on the resources themselves, by the code that makes them (listed for docs and tests).
ON_RESOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    VMS: (("roles/secretmanager.secretAccessor", "the Ray-token secret"),
          ("roles/storage.objectViewer", "the stage bucket"),
          ("roles/storage.objectUser", "the checkpoint bucket")),
    CONTROLLER: (("roles/secretmanager.secretAccessor", "the Ray-token and channel-token secrets"),),
}


def account_id(cluster: str, role: str) -> str:
    """`pm-<cluster>-<role>`; a cluster name too long for an account id's 30 characters is cut
    and a short hash of the whole name keeps two such clusters apart."""
    whole = f"pm-{cluster}-{role}"
    if len(whole) <= 30:
        return whole
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:4]
    return f"pm-{cluster[:30 - len(role) - 10].rstrip('-')}-{digest}-{role}"


@dataclass(frozen=True)
class ClusterAccounts:
    """The accounts a cluster's machines run as; `own`: podmanager's (made and granted by `up`)."""

    vms: str
    controller: str
    own: bool


def accounts_for(spec: ClusterSpec) -> ClusterAccounts:
    """The spec's named account for both machines, else the cluster's own pair."""
    project = spec.project or ""
    ours = ClusterAccounts(vms=account_email(project, account_id(spec.name, VMS)),
                           controller=account_email(project, account_id(spec.name, CONTROLLER)), own=True)
    named = spec.network.service_account if spec.network else None
    if named and named != ours.vms:  # the user's: used as it is
        return ClusterAccounts(vms=named, controller=named, own=False)
    return ours


def with_vms_account(spec: ClusterSpec, email: str) -> ClusterSpec:
    """The spec whose TPU VMs run as `email` (what every node request then carries)."""
    from podmanager.core.spec import NetworkSpec

    network = spec.network or NetworkSpec()
    return spec.model_copy(update={"network": network.model_copy(update={"service_account": email})})
