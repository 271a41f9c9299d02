"""The predefined roles podmanager relies on, with their permissions: facts copied from
Google's IAM reference (each role cites its page). Only the permissions an emulated method
checks matter here; a role's other permissions are left out, and the basic roles (huge) list
at least every permission any emulated method needs."""

from __future__ import annotations

_PROJECT_READ = frozenset({"resourcemanager.projects.get", "resourcemanager.projects.list"})

# https://docs.cloud.google.com/iam/docs/roles-permissions/tpu.md.txt (roles/tpu.admin: tpu.*)
_TPU_ALL = frozenset({
    "tpu.acceleratortypes.get", "tpu.acceleratortypes.list", "tpu.locations.get", "tpu.locations.list",
    "tpu.nodes.create", "tpu.nodes.delete", "tpu.nodes.get", "tpu.nodes.list", "tpu.nodes.reimage",
    "tpu.nodes.reset", "tpu.nodes.start", "tpu.nodes.stop", "tpu.nodes.update", "tpu.operations.get",
    "tpu.operations.list", "tpu.runtimeversions.get", "tpu.runtimeversions.list",
})
_TPU_READ = frozenset(p for p in _TPU_ALL if p.rsplit(".", 1)[1] in ("get", "list"))

# https://docs.cloud.google.com/iam/docs/roles-permissions/secretmanager.md.txt (roles/secretmanager.admin)
_SECRETS_ALL = frozenset({
    "secretmanager.locations.get", "secretmanager.locations.list", "secretmanager.secrets.create",
    "secretmanager.secrets.delete", "secretmanager.secrets.get", "secretmanager.secrets.getIamPolicy",
    "secretmanager.secrets.list", "secretmanager.secrets.setIamPolicy", "secretmanager.secrets.update",
    "secretmanager.versions.access", "secretmanager.versions.add", "secretmanager.versions.destroy",
    "secretmanager.versions.disable", "secretmanager.versions.enable", "secretmanager.versions.get",
    "secretmanager.versions.list",
})

# https://docs.cloud.google.com/iam/docs/roles-permissions/compute.md.txt: of each role, the
# permissions the emulated Compute Engine methods check (checked against the role's listing,
# 2026-11). All three read the project's networks and its operations; only securityAdmin makes
# or deletes firewall rules (networkAdmin reads them), and none holds iam.serviceAccounts.actAs
# (the page: grant roles/iam.serviceAccountUser beside them for VMs that run as an account).
_COMPUTE_READ_NETWORKS = frozenset({
    "compute.networks.get", "compute.networks.list", "compute.subnetworks.get", "compute.subnetworks.list",
    "compute.firewalls.get", "compute.firewalls.list", "compute.routers.get", "compute.routers.list",
})
_COMPUTE_COMMON = frozenset({
    "compute.projects.get", "compute.zones.get", "compute.zones.list", "compute.globalOperations.get",
    "compute.regionOperations.get", "compute.zoneOperations.get",
    "serviceusage.services.get", "serviceusage.services.list",
})
_COMPUTE_INSTANCE_ADMIN = _COMPUTE_READ_NETWORKS | _COMPUTE_COMMON | {
    "compute.instances.create", "compute.instances.delete", "compute.instances.get", "compute.instances.list",
    "compute.instances.getGuestAttributes", "compute.instances.setMetadata", "compute.instances.setServiceAccount",
    "compute.instances.start", "compute.instances.stop", "compute.instances.suspend", "compute.instances.resume",
    "compute.instances.reset", "compute.instances.setMachineType", "compute.disks.resize",
    "compute.disks.create", "compute.subnetworks.use", "compute.subnetworks.useExternalIp",
    "compute.machineTypes.get",
}
_COMPUTE_NETWORK_ADMIN = _COMPUTE_READ_NETWORKS | _COMPUTE_COMMON | {
    "compute.networks.delete", "compute.networks.updatePolicy", "compute.subnetworks.delete",
    "compute.subnetworks.setPrivateIpGoogleAccess", "compute.subnetworks.use", "compute.subnetworks.useExternalIp",
    "compute.routers.create", "compute.routers.delete",
    "compute.instances.get", "compute.instances.list", "compute.instances.getGuestAttributes",
    "compute.machineTypes.get",
}
_COMPUTE_SECURITY_ADMIN = _COMPUTE_READ_NETWORKS | _COMPUTE_COMMON | {
    "compute.firewalls.create", "compute.firewalls.delete", "compute.firewalls.update", "compute.networks.updatePolicy",
    "compute.instances.list",
}

# https://docs.cloud.google.com/iam/docs/roles-permissions/storage.md.txt
_STORAGE_OBJECTS = frozenset({"storage.objects.create", "storage.objects.delete", "storage.objects.get",
                              "storage.objects.list", "storage.objects.update"})
_STORAGE_BUCKETS = frozenset({"storage.buckets.create", "storage.buckets.delete", "storage.buckets.get",
                              "storage.buckets.list", "storage.buckets.update", "storage.buckets.getIamPolicy",
                              "storage.buckets.setIamPolicy"})

# The roles a new bucket's policy grants the project's basic roles (`projectOwner:P`, ...):
# https://docs.cloud.google.com/iam/docs/roles-permissions/storage.md.txt (legacyBucketOwner,
# legacyBucketReader; of each, the permissions the emulated methods check).
_LEGACY_BUCKET_OWNER = frozenset({"storage.buckets.get", "storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy",
                                  "storage.buckets.update", "storage.objects.create", "storage.objects.delete",
                                  "storage.objects.list"})
_LEGACY_BUCKET_READER = frozenset({"storage.buckets.get", "storage.objects.list"})

# https://docs.cloud.google.com/iam/docs/roles-permissions/serviceusage.md.txt
_SERVICE_USAGE = frozenset({"serviceusage.services.enable", "serviceusage.services.disable",
                            "serviceusage.services.get", "serviceusage.services.list", "serviceusage.services.use"})

# https://docs.cloud.google.com/iam/docs/roles-permissions/iam.md.txt (roles/iam.serviceAccountUser)
_ACT_AS = frozenset({"iam.serviceAccounts.actAs", "iam.serviceAccounts.get", "iam.serviceAccounts.list"})
# The same page: roles/iam.serviceAccountAdmin makes, reads and shares accounts but may not act as
# them (no actAs); roles/iam.serviceAccountCreator only makes them.
_ACCOUNT_ADMIN = frozenset({"iam.serviceAccounts.create", "iam.serviceAccounts.delete", "iam.serviceAccounts.get",
                            "iam.serviceAccounts.list", "iam.serviceAccounts.update",
                            "iam.serviceAccounts.getIamPolicy", "iam.serviceAccounts.setIamPolicy"})

# The same page: roles/iam.roleAdmin makes, reads, changes, deletes and undeletes the project's
# custom roles (iam.roles.*); roles/iam.roleViewer reads them.
_ROLE_ADMIN = frozenset({"iam.roles.create", "iam.roles.delete", "iam.roles.get", "iam.roles.list",
                         "iam.roles.undelete", "iam.roles.update"})

# https://docs.cloud.google.com/iam/docs/roles-permissions/resourcemanager.md.txt
_PROJECT_IAM = frozenset({"resourcemanager.projects.getIamPolicy", "resourcemanager.projects.setIamPolicy"})

EVERYTHING = (_PROJECT_READ | _TPU_ALL | _SECRETS_ALL | _COMPUTE_INSTANCE_ADMIN | _COMPUTE_NETWORK_ADMIN
              | _COMPUTE_SECURITY_ADMIN
              | _STORAGE_OBJECTS | _STORAGE_BUCKETS | _SERVICE_USAGE | _ACT_AS | _ACCOUNT_ADMIN | _PROJECT_IAM
              | _ROLE_ADMIN)

# Basic roles: https://docs.cloud.google.com/iam/docs/roles-permissions/basic.md.txt and
# https://docs.cloud.google.com/iam/docs/roles-overview#basic. Editor lacks the permissions that
# change access (setIamPolicy) and read secrets' payloads: secretmanager.versions.access,
# secretmanager.secrets.setIamPolicy, resourcemanager.projects.setIamPolicy (and
# iap.tunnelInstances.accessViaIAP, not emulated); the documentation lists Editor's
# setIamPolicy permissions on no resource emulated here, so storage.buckets.setIamPolicy and
# iam.serviceAccounts.setIamPolicy are left out too (the stricter answer). Editor includes
# iam.serviceAccounts.actAs and .create (its listing on the basic roles page names them beside
# iam.serviceAccounts.get and .list). Managing roles changes access too: whether Editor may
# create, change, delete or undelete custom roles the pages do not list, so it may not here (the
# stricter answer; it reads them, as Viewer does).
EDITOR_LACKS = frozenset({"secretmanager.versions.access", "secretmanager.secrets.setIamPolicy",
                          "resourcemanager.projects.setIamPolicy", "storage.buckets.setIamPolicy",
                          "iam.serviceAccounts.setIamPolicy", "iam.roles.create", "iam.roles.update",
                          "iam.roles.delete", "iam.roles.undelete"})
_VIEWER = frozenset(p for p in EVERYTHING if p.rsplit(".", 1)[1] in ("get", "list", "getIamPolicy")
                    and p != "secretmanager.versions.access")

ROLES: dict[str, frozenset[str]] = {
    "roles/owner": EVERYTHING,
    "roles/editor": EVERYTHING - EDITOR_LACKS,
    "roles/viewer": _VIEWER,
    "roles/tpu.admin": _PROJECT_READ | _TPU_ALL,
    "roles/tpu.viewer": _PROJECT_READ | _TPU_READ,
    "roles/secretmanager.admin": _PROJECT_READ | _SECRETS_ALL,
    "roles/secretmanager.secretAccessor": _PROJECT_READ | {"secretmanager.versions.access"},
    "roles/compute.instanceAdmin.v1": _PROJECT_READ | _COMPUTE_INSTANCE_ADMIN,
    "roles/compute.networkAdmin": _PROJECT_READ | _COMPUTE_NETWORK_ADMIN,
    "roles/compute.securityAdmin": _PROJECT_READ | _COMPUTE_SECURITY_ADMIN,
    "roles/storage.admin": _PROJECT_READ | _STORAGE_OBJECTS | _STORAGE_BUCKETS,
    "roles/storage.objectAdmin": _PROJECT_READ | _STORAGE_OBJECTS,  # lacks storage.buckets.get
    "roles/storage.legacyBucketOwner": _LEGACY_BUCKET_OWNER,
    "roles/storage.legacyBucketReader": _LEGACY_BUCKET_READER,
    "roles/storage.objectViewer": _PROJECT_READ | {"storage.objects.get", "storage.objects.list"},
    # objects read and written, no bucket permission (the same storage page)
    "roles/storage.objectUser": _PROJECT_READ | _STORAGE_OBJECTS,
    # the networks, subnetworks, routers and firewall rules read, nothing changed (the compute page)
    "roles/compute.networkViewer": _COMPUTE_READ_NETWORKS,
    "roles/serviceusage.serviceUsageAdmin": _SERVICE_USAGE,
    "roles/iam.serviceAccountUser": _PROJECT_READ | _ACT_AS,
    "roles/iam.serviceAccountAdmin": _PROJECT_READ | _ACCOUNT_ADMIN,
    "roles/iam.serviceAccountCreator": _PROJECT_READ | {"iam.serviceAccounts.create"},
    "roles/iam.roleAdmin": _PROJECT_READ | _ROLE_ADMIN,
    "roles/iam.roleViewer": _PROJECT_READ | {"iam.roles.get", "iam.roles.list"},
    "roles/resourcemanager.projectIamAdmin": _PROJECT_READ | _PROJECT_IAM,
}


def permissions_of(role: str) -> frozenset[str]:
    """What predefined `role` grants here; empty for a role this table does not know (it grants
    nothing). A project's custom roles are the project's (`project.ProjectIam.role_permissions`)."""
    return ROLES.get(role, frozenset())
