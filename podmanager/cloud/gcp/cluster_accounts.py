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

The controller VM's account (`controller.local: false`) is granted on the project a custom role
of the cluster's own, `projects/<project>/roles/podmanager.<cluster>.controller` (`-` as `_`: a
role id holds no hyphen), holding exactly the permissions of the calls its `up` and `down` make
on the project (`CONTROLLER_CALLS`): Cloud TPU nodes and queued resources made, read, changed
(their metadata) and deleted, and their operations; the network read, the cluster's firewall
rule found, made and deleted (and the operation waited for); Cloud Routers listed; Service
Usage's API check. The predefined roles it replaces are wider: roles/tpu.admin also reimages,
stops and starts nodes, and roles/compute.securityAdmin changes every firewall rule and SSL
policy of the project. The user's machine makes the role, grants it, and takes back those two
from an account an earlier podmanager granted them (`project_roles.py`); a later `up` from a
podmanager whose controller calls more patches the role to its set.

Beside it: on the VMs' account iam.serviceAccounts.actAs (roles/iam.serviceAccountUser granted on
that account alone, not the project: it may then act as no other account). On the cluster's own
resources, in each one's own policy: the channel token read at boot (roles/secretmanager.secretAccessor);
on the Ray-token secret `podmanager.<cluster>.controller_token` (the token read, rewritten with the
head's, its grant read, the secret deleted by `down`: TOKEN_PERMISSIONS); on each bucket
`podmanager.<cluster>.controller_buckets` (the bucket and its policy read, as its `up` checks the
VMs' access, the staged wheel read and uploaded when missing: BUCKET_PERMISSIONS). No predefined
role holds exactly these: roles/secretmanager.admin and roles/storage.legacyBucketOwner, which an
earlier podmanager granted and `up` takes back, could also change the resource's policy. The
user's machine makes all three roles and these grants before the controller VM boots
(`cluster/controller_preflight.py`, `client/controller_machine.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from podmanager.cloud.gcp.project_iam import ProjectIam, account_email
from podmanager.cloud.gcp.project_roles import CustomRole, ensure_role, role_name
from podmanager.core.spec import ClusterSpec

VMS, CONTROLLER = "vms", "ctl"

# The methods (discovery ids) the controller VM calls whose permission is checked on the project:
# its `up` (the network checked, the cluster's firewall rule made when missing, slices made,
# followed and their metadata kept, Service Usage's API check) and its `down`. The emulator's
# method table (emulator/iam/methods.py, from each method's reference page) says what each
# needs; tests/cloud/test_gcp_cluster_accounts.py holds CONTROLLER_PERMISSIONS to exactly that.
CONTROLLER_CALLS = (
    "tpu.projects.locations.nodes.create", "tpu.projects.locations.nodes.get", "tpu.projects.locations.nodes.list",
    "tpu.projects.locations.nodes.delete", "tpu.projects.locations.nodes.patch",
    "tpu.projects.locations.nodes.getGuestAttributes", "tpu.projects.locations.queuedResources.create",
    "tpu.projects.locations.queuedResources.get", "tpu.projects.locations.queuedResources.list",
    "tpu.projects.locations.queuedResources.delete", "tpu.projects.locations.operations.get",
    "compute.networks.get", "compute.subnetworks.list", "compute.routers.list", "compute.firewalls.list",
    "compute.firewalls.insert", "compute.firewalls.delete", "compute.globalOperations.wait",
    "serviceusage.services.get",
)
# https://docs.cloud.google.com/iam/docs/custom-roles-permissions-support: each is usable in a
# project's custom role (none is listed TESTING or NOT_SUPPORTED to our knowledge: docs/permissions.md).
CONTROLLER_PERMISSIONS = (
    "tpu.nodes.create", "tpu.nodes.get", "tpu.nodes.list", "tpu.nodes.delete", "tpu.nodes.update",
    "tpu.operations.get", "compute.networks.get", "compute.subnetworks.list", "compute.routers.list",
    "compute.firewalls.list", "compute.firewalls.create", "compute.firewalls.delete",
    "compute.networks.updatePolicy", "compute.globalOperations.get", "serviceusage.services.get",
)
# What podmanager before the custom role granted the controller's account on the project: taken back.
REPLACED_PROJECT_ROLES = ("roles/tpu.admin", "roles/compute.securityAdmin")

# (account, role, where): the predefined roles `up` grants beside the custom role and the
# resources' own (module docstring): none on the project.
# https://docs.cloud.google.com/iam/docs/roles-permissions/iam
PROJECT_ROLES: dict[str, tuple[str, ...]] = {VMS: (), CONTROLLER: ()}
ON_VMS_ACCOUNT: dict[str, tuple[str, ...]] = {VMS: (), CONTROLLER: ("roles/iam.serviceAccountUser",)}
# The controller's calls on the cluster's own resources, each held by a custom role of the cluster's
# bound in that resource's own policy (no predefined role holds exactly them: roles/secretmanager.admin
# also sets the secret's policy, roles/storage.legacyBucketOwner the bucket's). A project's custom role
# may be bound in the policy of a resource of the same project ("Custom roles can only be used to
# grant permissions in policies for the same project": https://docs.cloud.google.com/iam/docs/roles-overview#custom;
# a bucket's, by example: https://cloud.google.com/sdk/gcloud/reference/storage/buckets/add-iam-policy-binding).
# On the Ray-token secret: its `up` reads the token and rewrites it with its head's, reads the VMs'
# grant (present: written by the user's machine), and its `down` deletes the secret.
TOKEN_CALLS = ("secretmanager.projects.secrets.versions.access", "secretmanager.projects.secrets.addVersion",
               "secretmanager.projects.secrets.getIamPolicy", "secretmanager.projects.secrets.delete")
TOKEN_PERMISSIONS = ("secretmanager.versions.access", "secretmanager.versions.add",
                     "secretmanager.secrets.getIamPolicy", "secretmanager.secrets.delete")
# On each of the cluster's buckets: the bucket and its policy read (the VMs' access checked), the
# staged wheel read, and uploaded when missing (objects.insert, storage.objects.create: a call the
# emulator's gate does not see, the staging writes directly;
# https://docs.cloud.google.com/storage/docs/access-control/iam-json).
BUCKET_CALLS = ("storage.buckets.get", "storage.buckets.getIamPolicy", "storage.objects.get")
BUCKET_PERMISSIONS = ("storage.buckets.get", "storage.buckets.getIamPolicy", "storage.objects.get",
                      "storage.objects.create")
# The role ids' last parts: `podmanager.<cluster>.<part>`.
ON_PROJECT, ON_TOKEN, ON_BUCKETS = "controller", "controller_token", "controller_buckets"
# What podmanager before these roles granted the controller's account on those resources: taken back.
REPLACED_ON_TOKEN = ("roles/secretmanager.admin",)
REPLACED_ON_BUCKETS = ("roles/storage.legacyBucketOwner", "roles/storage.objectViewer")

# Granted on the resources themselves, by the code that makes them (listed for docs and tests).
ON_RESOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    VMS: (("roles/secretmanager.secretAccessor", "the Ray-token secret"),
          ("roles/storage.objectViewer", "the stage bucket"),
          ("roles/storage.objectUser", "the checkpoint bucket")),
    CONTROLLER: (("roles/secretmanager.secretAccessor", "the channel-token secret"),
                 (f"podmanager.<cluster>.{ON_TOKEN}", "the Ray-token secret"),
                 (f"podmanager.<cluster>.{ON_BUCKETS}", "each of the cluster's buckets")),
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
    """The accounts a cluster's machines run as; `own`: podmanager's (made and granted by `up`);
    `named`: the spec names the VMs' already (the user's, or ours named by the `up` that made it)."""

    vms: str
    controller: str
    own: bool
    named: bool

    @property
    def to_make(self) -> bool:
        """Whether this `up` makes them: its spec is the user's, naming none."""
        return self.own and not self.named

    @property
    def check_caller(self) -> bool:
        """Whether this `up` asks the caller's permissions: not when the spec names the cluster's
        own account, which the `up` that made it (the user's machine's) asked already."""
        return self.to_make or not self.own


def controller_role_id(cluster: str, part: str = ON_PROJECT) -> str:
    """`podmanager.<cluster>.<part>`, `-` as `_`: a role id is letters, digits, `_` and `.`,
    3-64 of them (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create);
    a cluster name (at most 30 characters, no `_`) keeps two clusters' roles apart."""
    return f"podmanager.{cluster.replace('-', '_')}.{part}"


def controller_role(project: str, cluster: str, part: str) -> str:
    """The full name a binding names: `projects/<project>/roles/podmanager.<cluster>.<part>`."""
    return role_name(project, controller_role_id(cluster, part))


# Each custom role of the controller's: (part, what it is granted on, its permissions).
_ROLES = ((ON_PROJECT, "the project", CONTROLLER_PERMISSIONS), (ON_TOKEN, "its Ray-token secret", TOKEN_PERMISSIONS),
          (ON_BUCKETS, "each of its buckets", BUCKET_PERMISSIONS))


def ensure_controller_roles(iam: ProjectIam, cluster: str) -> list[tuple[str, str | None]]:
    """The cluster's three controller roles made, undeleted or patched to their permissions: each
    one's name and what was done (`project_roles.ensure_role`)."""
    return [ensure_role(iam, CustomRole(
        role_id=controller_role_id(cluster, part), title=f"podmanager {cluster}: controller VM on {where}"[:100],
        description=f"What the controller VM of podmanager cluster {cluster} calls on {where} "
                    "(docs/permissions.md).", permissions=permissions)) for part, where, permissions in _ROLES]


def accounts_for(spec: ClusterSpec) -> ClusterAccounts:
    """The spec's named account for both machines, else the cluster's own pair."""
    project = spec.project or ""
    named = spec.network.service_account if spec.network else None
    ours = ClusterAccounts(vms=account_email(project, account_id(spec.name, VMS)),
                           controller=account_email(project, account_id(spec.name, CONTROLLER)), own=True,
                           named=bool(named))
    if named and named != ours.vms:  # the user's: used as it is
        return ClusterAccounts(vms=named, controller=named, own=False, named=True)
    return ours


def with_vms_account(spec: ClusterSpec, email: str) -> ClusterSpec:
    """The spec whose TPU VMs run as `email` (what every node request then carries)."""
    from podmanager.core.spec import NetworkSpec

    network = spec.network or NetworkSpec()
    return spec.model_copy(update={"network": network.model_copy(update={"service_account": email})})


def controller_account(spec: ClusterSpec) -> str | None:
    """The account the controller VM runs as: the cluster's own when `up` named the VMs' (it
    made both), the user's named one, else None (the project's default compute account)."""
    return accounts_for(spec).controller if spec.network and spec.network.service_account else None


def grant_channel_token(secrets: Any, spec: ClusterSpec) -> None:
    """The channel token's secret read by the controller VM's account alone."""
    secrets.grant_access(spec.name, controller_account(spec))


def grant_ray_token(secrets: Any, spec: ClusterSpec) -> None:
    """The Ray token's secret read by the TPU VMs' account, and kept by the controller VM's
    (its `up` rewrites it with its head's token, its `down` deletes it)."""
    vms = spec.network.service_account if spec.network else None
    secrets.grant_access(spec.name, vms)
    controller = controller_account(spec)
    if controller != vms:
        secrets.grant_access(spec.name, controller, role=controller_role(spec.project or "", spec.name, ON_TOKEN))
        secrets.take_back(spec.name, [(role, f"serviceAccount:{controller}") for role in REPLACED_ON_TOKEN])
