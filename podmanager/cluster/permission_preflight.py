"""The caller's permissions for everything `up` will do, asked before anything bills, in one
Resource Manager `projects.testIamPermissions` call (it needs no permission and answers the
subset held: https://docs.cloud.google.com/resource-manager/reference/rest/v3/projects/testIamPermissions);
every one missing is named with the smallest predefined role holding it and the
`gcloud projects add-iam-policy-binding` that grants it, exit 2, nothing created.

Asked on the spec's project, for what `up` calls there with the caller's credentials (each
method's permission as its reference page lists it; docs/permissions.md has the table):
- Cloud TPU: nodes create, get, list, delete and their operations (queued resources use the
  same permissions);
- Compute Engine, when the network is the project's own (a Shared VPC's host project is
  another's): the network and subnetworks read, the firewall rules listed (and Cloud Routers
  without external IPs). Creating the cluster's firewall rule is not asked: a rule made by the
  network's administrator does instead, which `preflight.py` checks;
- Secret Manager, where VMs boot: the Ray-token secret made, written, read, deleted and shared;
- IAM: the cluster's own account made (when podmanager makes it), and acting as the account the
  VMs run as;
- for a controller VM (`controller.local: false`, from the user's machine): the VM made, read,
  followed, changed in place (started, stopped, reset, its machine type set, its disk grown)
  and deleted, its channel's firewall rule made and deleted (no rule of another will
  do: it admits one address), and, when podmanager makes the accounts, the controller's custom
  role made (or brought up to date) and granted on the project, and its role on the VMs' account.
Cloud Storage's are not asked here: a bucket's own policy may grant them, which the project's
answer would miss; `bucket_preflight.py` asks each bucket.
"""

from __future__ import annotations

from podmanager.cloud.gcp.permissions import role_for
from podmanager.core.errors import SpecError
from podmanager.core.network_names import network_project
from podmanager.core.spec import ClusterSpec

_TPU = ("tpu.nodes.create", "tpu.nodes.get", "tpu.nodes.list", "tpu.nodes.delete", "tpu.operations.get")
_NETWORK = ("compute.networks.get", "compute.subnetworks.list", "compute.firewalls.list")
_SECRET = ("secretmanager.secrets.create", "secretmanager.secrets.get", "secretmanager.secrets.delete",
           "secretmanager.versions.add", "secretmanager.versions.access", "secretmanager.secrets.getIamPolicy",
           "secretmanager.secrets.setIamPolicy")


_CONTROLLER_VM = ("compute.instances.create", "compute.disks.create", "compute.subnetworks.use",
                  "compute.subnetworks.useExternalIp", "compute.instances.setMetadata",
                  "compute.instances.setServiceAccount", "compute.instances.get", "compute.instances.list",
                  "compute.instances.delete", "compute.instances.getGuestAttributes", "compute.zones.list",
                  "compute.machineTypes.get", "compute.firewalls.create", "compute.firewalls.delete",
                  "compute.networks.updatePolicy",
                  # the VM changed in place (client/controller_plan.py), and a stopped one started again
                  "compute.instances.start", "compute.instances.stop", "compute.instances.reset",
                  "compute.instances.setMachineType", "compute.disks.resize")
_GRANTS = ("resourcemanager.projects.getIamPolicy", "resourcemanager.projects.setIamPolicy",
           "iam.serviceAccounts.getIamPolicy", "iam.serviceAccounts.setIamPolicy",
           # the controller's custom role made, read, brought up to date or undeleted (cluster_accounts.py)
           "iam.roles.create", "iam.roles.get", "iam.roles.update", "iam.roles.undelete")


def needed_permissions(spec: ClusterSpec, *, vms_boot: bool, makes_account: bool,
                       controller_vm: bool = False) -> list[str]:
    """What `up` of `spec` calls with the caller's credentials on its project (module docstring)."""
    needed = [*_TPU]
    if network_project(spec) == spec.project:
        needed += _NETWORK
        if spec.network is not None and not spec.network.enable_external_ips:
            needed.append("compute.routers.list")
    if vms_boot:
        needed += _SECRET
    if makes_account:
        needed.append("iam.serviceAccounts.create")
    needed.append("iam.serviceAccounts.actAs")  # every node runs as an account
    if controller_vm:
        needed += _CONTROLLER_VM
        if makes_account:
            needed += _GRANTS
    return list(dict.fromkeys(needed))


def refuse_missing(spec: ClusterSpec, missing: list[str], caller: str | None) -> None:
    """A SpecError naming each missing permission with its role and the command granting it."""
    if not missing:
        return
    project = spec.project or "PROJECT"
    who = caller or "the account of your Application Default Credentials"
    member = caller or "user:YOUR_EMAIL"
    roles = list(dict.fromkeys(role_for(permission) for permission in missing))
    raise SpecError(
        f"{who} lacks {len(missing)} permission(s) `up` of cluster {spec.name} needs in project {project} "
        "(nothing was created):\n  " + "\n  ".join(f"{p} (granted by {role_for(p)})" for p in missing),
        hint="Grant the roles (a project owner may):\n  " + "\n  ".join(
            f"gcloud projects add-iam-policy-binding {project} --member {member} --role {role}" for role in roles))
