"""Each emulated method, by its discovery method id, with the API that serves it and the
permissions Google documents for it ("IAM Permissions" on each method's reference page, cited
per API below). The discovery id is resolved here from the gRPC method or the REST path with a
small table of our own (to be unified with the schema gate's discovery lookup)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

COMPUTE = "compute.googleapis.com"
TPU = "tpu.googleapis.com"
SECRET_MANAGER = "secretmanager.googleapis.com"
STORAGE = "storage.googleapis.com"
RESOURCE_MANAGER = "cloudresourcemanager.googleapis.com"
SERVICE_USAGE = "serviceusage.googleapis.com"
IAM = "iam.googleapis.com"

# The API's name as Google's SERVICE_DISABLED message says it ("Cloud TPU API has not been used ...").
TITLES = {COMPUTE: "Compute Engine API", TPU: "Cloud TPU API", SECRET_MANAGER: "Secret Manager API",
          STORAGE: "Cloud Storage JSON API", RESOURCE_MANAGER: "Cloud Resource Manager API",
          SERVICE_USAGE: "Service Usage API", IAM: "Identity and Access Management (IAM) API"}

ACT_AS = "iam.serviceAccounts.actAs"


@dataclass(frozen=True)
class Method:
    service: str
    permissions: tuple[str, ...]  # every one is needed; () : none (testIamPermissions)


def _tpu(permission: str) -> Method:
    return Method(TPU, (permission,))


# Cloud TPU v2: https://docs.cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.nodes
# (each method's "IAM Permissions"); queued resources are checked with the tpu.nodes.*
# permissions (https://docs.cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.queuedResources).
# Creating a node that runs as a service account also needs iam.serviceAccounts.actAs on it
# (https://docs.cloud.google.com/iam/docs/service-accounts-actas).
# Secret Manager v1: https://docs.cloud.google.com/secret-manager/docs/access-control
# Compute Engine v1: https://docs.cloud.google.com/compute/docs/reference/rest/v1/instances/insert
# and its siblings (firewalls, networks, subnetworks, routers, zoneOperations, ...), and
# https://docs.cloud.google.com/compute/docs/access/iam-permissions.
# Cloud Storage JSON: https://docs.cloud.google.com/storage/docs/access-control/iam-json
# Service Usage: https://docs.cloud.google.com/service-usage/docs/access-control
# Resource Manager v3 projects.testIamPermissions: "There are no permissions required for making
# this API call." (https://docs.cloud.google.com/resource-manager/reference/rest/v3/projects/testIamPermissions);
# getIamPolicy and setIamPolicy need resourcemanager.projects.getIamPolicy / .setIamPolicy
# (https://docs.cloud.google.com/resource-manager/reference/rest/v3/projects/setIamPolicy).
# IAM v1 service accounts: iam.serviceAccounts.create / .get / .getIamPolicy / .setIamPolicy
# (https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts, each method's
# "Authorization scopes" and https://docs.cloud.google.com/iam/docs/service-accounts-create#permissions).
METHODS: dict[str, Method] = {
    "tpu.projects.locations.nodes.create": _tpu("tpu.nodes.create"),
    "tpu.projects.locations.nodes.get": _tpu("tpu.nodes.get"),
    "tpu.projects.locations.nodes.list": _tpu("tpu.nodes.list"),
    "tpu.projects.locations.nodes.delete": _tpu("tpu.nodes.delete"),
    "tpu.projects.locations.nodes.patch": _tpu("tpu.nodes.update"),
    "tpu.projects.locations.nodes.getGuestAttributes": _tpu("tpu.nodes.get"),
    "tpu.projects.locations.queuedResources.create": _tpu("tpu.nodes.create"),
    "tpu.projects.locations.queuedResources.get": _tpu("tpu.nodes.get"),
    "tpu.projects.locations.queuedResources.list": _tpu("tpu.nodes.list"),
    "tpu.projects.locations.queuedResources.delete": _tpu("tpu.nodes.delete"),
    "tpu.projects.locations.operations.get": _tpu("tpu.operations.get"),
    "secretmanager.projects.secrets.create": Method(SECRET_MANAGER, ("secretmanager.secrets.create",)),
    "secretmanager.projects.secrets.get": Method(SECRET_MANAGER, ("secretmanager.secrets.get",)),
    "secretmanager.projects.secrets.delete": Method(SECRET_MANAGER, ("secretmanager.secrets.delete",)),
    "secretmanager.projects.secrets.addVersion": Method(SECRET_MANAGER, ("secretmanager.versions.add",)),
    "secretmanager.projects.secrets.versions.access": Method(SECRET_MANAGER, ("secretmanager.versions.access",)),
    "secretmanager.projects.secrets.versions.disable": Method(SECRET_MANAGER, ("secretmanager.versions.disable",)),
    "secretmanager.projects.secrets.getIamPolicy": Method(SECRET_MANAGER, ("secretmanager.secrets.getIamPolicy",)),
    "secretmanager.projects.secrets.setIamPolicy": Method(SECRET_MANAGER, ("secretmanager.secrets.setIamPolicy",)),
    "compute.projects.get": Method(COMPUTE, ("compute.projects.get",)),
    "compute.networks.get": Method(COMPUTE, ("compute.networks.get",)),
    "compute.networks.list": Method(COMPUTE, ("compute.networks.list",)),
    "compute.networks.delete": Method(COMPUTE, ("compute.networks.delete",)),
    "compute.subnetworks.get": Method(COMPUTE, ("compute.subnetworks.get",)),
    "compute.subnetworks.list": Method(COMPUTE, ("compute.subnetworks.list",)),
    "compute.subnetworks.delete": Method(COMPUTE, ("compute.subnetworks.delete",)),
    "compute.subnetworks.setPrivateIpGoogleAccess": Method(COMPUTE, ("compute.subnetworks.setPrivateIpGoogleAccess",)),
    "compute.firewalls.get": Method(COMPUTE, ("compute.firewalls.get",)),
    "compute.firewalls.list": Method(COMPUTE, ("compute.firewalls.list",)),
    "compute.firewalls.insert": Method(COMPUTE, ("compute.firewalls.create", "compute.networks.updatePolicy")),
    "compute.firewalls.delete": Method(COMPUTE, ("compute.firewalls.delete", "compute.networks.updatePolicy")),
    "compute.firewalls.patch": Method(COMPUTE, ("compute.firewalls.update", "compute.networks.updatePolicy")),
    "compute.routers.get": Method(COMPUTE, ("compute.routers.get",)),
    "compute.routers.list": Method(COMPUTE, ("compute.routers.list",)),
    "compute.routers.insert": Method(COMPUTE, ("compute.routers.create",)),
    "compute.routers.delete": Method(COMPUTE, ("compute.routers.delete",)),
    "compute.globalOperations.get": Method(COMPUTE, ("compute.globalOperations.get",)),
    "compute.regionOperations.get": Method(COMPUTE, ("compute.regionOperations.get",)),
    "compute.zoneOperations.get": Method(COMPUTE, ("compute.zoneOperations.get",)),
    "compute.zoneOperations.wait": Method(COMPUTE, ("compute.zoneOperations.get",)),
    "compute.globalOperations.wait": Method(COMPUTE, ("compute.globalOperations.get",)),
    "compute.regionOperations.wait": Method(COMPUTE, ("compute.regionOperations.get",)),
    "compute.zones.get": Method(COMPUTE, ("compute.zones.get",)),
    "compute.zones.list": Method(COMPUTE, ("compute.zones.list",)),
    "compute.machineTypes.get": Method(COMPUTE, ("compute.machineTypes.get",)),
    # What the request sets adds its own permission (metadata, a service account, an external IP).
    "compute.instances.insert": Method(COMPUTE, ("compute.instances.create", "compute.disks.create",
                                                 "compute.subnetworks.use")),
    "compute.instances.get": Method(COMPUTE, ("compute.instances.get",)),
    "compute.instances.list": Method(COMPUTE, ("compute.instances.list",)),
    "compute.instances.aggregatedList": Method(COMPUTE, ("compute.instances.list",)),
    "compute.instances.delete": Method(COMPUTE, ("compute.instances.delete",)),
    "compute.instances.getGuestAttributes": Method(COMPUTE, ("compute.instances.getGuestAttributes",)),
    # https://docs.cloud.google.com/compute/docs/reference/rest/v1/instances/stop (and start, suspend, resume)
    "compute.instances.start": Method(COMPUTE, ("compute.instances.start",)),
    "compute.instances.stop": Method(COMPUTE, ("compute.instances.stop",)),
    "compute.instances.suspend": Method(COMPUTE, ("compute.instances.suspend",)),
    "compute.instances.resume": Method(COMPUTE, ("compute.instances.resume",)),
    # https://docs.cloud.google.com/compute/docs/reference/rest/v1/instances/reset (and setMachineType,
    # setMetadata; disks/resize)
    "compute.instances.reset": Method(COMPUTE, ("compute.instances.reset",)),
    "compute.instances.setMachineType": Method(COMPUTE, ("compute.instances.setMachineType",)),
    "compute.instances.setMetadata": Method(COMPUTE, ("compute.instances.setMetadata",)),
    "compute.disks.resize": Method(COMPUTE, ("compute.disks.resize",)),
    "storage.buckets.get": Method(STORAGE, ("storage.buckets.get",)),
    "storage.buckets.getIamPolicy": Method(STORAGE, ("storage.buckets.getIamPolicy",)),
    "storage.buckets.setIamPolicy": Method(STORAGE, ("storage.buckets.setIamPolicy",)),
    "storage.buckets.testIamPermissions": Method(STORAGE, ()),
    "storage.objects.get": Method(STORAGE, ("storage.objects.get",)),
    "cloudresourcemanager.projects.testIamPermissions": Method(RESOURCE_MANAGER, ()),
    "cloudresourcemanager.projects.getIamPolicy": Method(RESOURCE_MANAGER, ("resourcemanager.projects.getIamPolicy",)),
    "cloudresourcemanager.projects.setIamPolicy": Method(RESOURCE_MANAGER, ("resourcemanager.projects.setIamPolicy",)),
    "iam.projects.serviceAccounts.create": Method(IAM, ("iam.serviceAccounts.create",)),
    "iam.projects.serviceAccounts.get": Method(IAM, ("iam.serviceAccounts.get",)),
    "iam.projects.serviceAccounts.getIamPolicy": Method(IAM, ("iam.serviceAccounts.getIamPolicy",)),
    "iam.projects.serviceAccounts.setIamPolicy": Method(IAM, ("iam.serviceAccounts.setIamPolicy",)),
    # https://docs.cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create (and get, list,
    # patch, delete, undelete: each page's "Authorization requires the following IAM permission").
    "iam.projects.roles.create": Method(IAM, ("iam.roles.create",)),
    "iam.projects.roles.get": Method(IAM, ("iam.roles.get",)),
    "iam.projects.roles.list": Method(IAM, ("iam.roles.list",)),
    "iam.projects.roles.patch": Method(IAM, ("iam.roles.update",)),
    "iam.projects.roles.delete": Method(IAM, ("iam.roles.delete",)),
    "iam.projects.roles.undelete": Method(IAM, ("iam.roles.undelete",)),
    "serviceusage.services.get": Method(SERVICE_USAGE, ("serviceusage.services.get",)),
    "serviceusage.services.list": Method(SERVICE_USAGE, ("serviceusage.services.list",)),
    "serviceusage.services.enable": Method(SERVICE_USAGE, ("serviceusage.services.enable",)),
}

# gRPC full method name -> discovery id (the Cloud TPU and Secret Manager clients speak gRPC).
GRPC: dict[str, str] = {
    "/google.cloud.tpu.v2.Tpu/CreateNode": "tpu.projects.locations.nodes.create",
    "/google.cloud.tpu.v2.Tpu/GetNode": "tpu.projects.locations.nodes.get",
    "/google.cloud.tpu.v2.Tpu/ListNodes": "tpu.projects.locations.nodes.list",
    "/google.cloud.tpu.v2.Tpu/DeleteNode": "tpu.projects.locations.nodes.delete",
    "/google.cloud.tpu.v2.Tpu/UpdateNode": "tpu.projects.locations.nodes.patch",
    "/google.cloud.tpu.v2.Tpu/GetGuestAttributes": "tpu.projects.locations.nodes.getGuestAttributes",
    "/google.cloud.tpu.v2.Tpu/CreateQueuedResource": "tpu.projects.locations.queuedResources.create",
    "/google.cloud.tpu.v2.Tpu/GetQueuedResource": "tpu.projects.locations.queuedResources.get",
    "/google.cloud.tpu.v2.Tpu/ListQueuedResources": "tpu.projects.locations.queuedResources.list",
    "/google.cloud.tpu.v2.Tpu/DeleteQueuedResource": "tpu.projects.locations.queuedResources.delete",
    "/google.longrunning.Operations/GetOperation": "tpu.projects.locations.operations.get",
    "/google.cloud.secretmanager.v1.SecretManagerService/CreateSecret": "secretmanager.projects.secrets.create",
    "/google.cloud.secretmanager.v1.SecretManagerService/GetSecret": "secretmanager.projects.secrets.get",
    "/google.cloud.secretmanager.v1.SecretManagerService/DeleteSecret": "secretmanager.projects.secrets.delete",
    "/google.cloud.secretmanager.v1.SecretManagerService/AddSecretVersion": "secretmanager.projects.secrets.addVersion",
    "/google.cloud.secretmanager.v1.SecretManagerService/AccessSecretVersion":
        "secretmanager.projects.secrets.versions.access",
    "/google.cloud.secretmanager.v1.SecretManagerService/DisableSecretVersion":
        "secretmanager.projects.secrets.versions.disable",
    "/google.cloud.secretmanager.v1.SecretManagerService/GetIamPolicy": "secretmanager.projects.secrets.getIamPolicy",
    "/google.cloud.secretmanager.v1.SecretManagerService/SetIamPolicy": "secretmanager.projects.secrets.setIamPolicy",
}

_COMPUTE = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)(?:/(?P<scope>global|regions/[^/]+|zones/[^/]+|aggregated))?"
                      r"(?:/(?P<collection>[A-Za-z]+)(?:/(?P<name>[^/]+)(?:/(?P<verb>[A-Za-z]+))?)?)?$")
_COMPUTE_VERBS = {("POST", False): "insert", ("GET", False): "list", ("GET", True): "get", ("DELETE", True): "delete",
                  ("PATCH", True): "patch"}
_STORAGE_OBJECT = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)$")
_STORAGE_BUCKET = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)(?P<iam>/iam(?P<test>/testPermissions)?)?$")
_SECRET_ACCESS = re.compile(r"^/v1/(?P<name>projects/[^/]+/secrets/[^/]+/versions/[^/:]+):access$")
_PROJECT_IAM = re.compile(r"^/v3/projects/(?P<project>[^/:]+):(?P<verb>testIamPermissions|getIamPolicy|setIamPolicy)$")
_ACCOUNTS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/serviceAccounts(?:/(?P<email>[^/:]+)(?::(?P<verb>getIamPolicy|setIamPolicy))?)?$")
_ROLES = re.compile(r"^/v1/projects/(?P<project>[^/]+)/roles(?:/(?P<role>[^/:]+)(?P<undelete>:undelete)?)?$")
_ROLE_VERBS = {("POST", False): "create", ("GET", False): "list", ("GET", True): "get", ("PATCH", True): "patch",
               ("DELETE", True): "delete"}
_SERVICES = re.compile(r"^/v1/projects/(?P<project>[^/]+)/services(?:/(?P<service>[^/:]+)(?P<enable>:enable)?)?$")


@dataclass(frozen=True)
class RestCall:
    method: str  # the discovery id
    resource: str  # the resource as Google's denial names it


def rest_call(http_method: str, path: str) -> RestCall | None:
    """The emulated method a REST request is, and the resource it acts on; None: not one of them."""
    url = urlsplit(path).path
    if (found := _COMPUTE.match(url)) is not None:
        return _compute_call(http_method, found)
    if (found := _STORAGE_OBJECT.match(url)) is not None:
        return RestCall("storage.objects.get", f"projects/_/buckets/{unquote(found['bucket'])}/objects/"
                                               f"{unquote(found['object'])}")
    if (found := _STORAGE_BUCKET.match(url)) is not None:
        verb = "testIamPermissions" if found["test"] else (
            ("setIamPolicy" if http_method == "PUT" else "getIamPolicy") if found["iam"] else "get")
        return RestCall(f"storage.buckets.{verb}", f"projects/_/buckets/{unquote(found['bucket'])}")
    if (found := _SECRET_ACCESS.match(unquote(url))) is not None:
        return RestCall("secretmanager.projects.secrets.versions.access", found["name"])
    if (found := _PROJECT_IAM.match(url)) is not None:
        return RestCall(f"cloudresourcemanager.projects.{found['verb']}", f"projects/{found['project']}")
    if (found := _ACCOUNTS.match(unquote(url))) is not None:
        if found["email"] is None:
            return RestCall("iam.projects.serviceAccounts.create", f"projects/{found['project']}") \
                if http_method == "POST" else None
        return RestCall(f"iam.projects.serviceAccounts.{found['verb'] or 'get'}",
                        f"projects/{found['project']}/serviceAccounts/{found['email']}")
    if (found := _ROLES.match(unquote(url))) is not None:
        verb = "undelete" if found["undelete"] else _ROLE_VERBS.get((http_method, bool(found["role"])))
        if verb is None:
            return None
        where = f"projects/{found['project']}"
        return RestCall(f"iam.projects.roles.{verb}", f"{where}/roles/{found['role']}" if found["role"] else where)
    if (found := _SERVICES.match(url)) is not None:
        verb = "enable" if found["enable"] else ("get" if found["service"] else "list")
        return RestCall(f"serviceusage.services.{verb}", f"projects/{found['project']}")
    return None


def _compute_call(http_method: str, found: re.Match[str]) -> RestCall | None:
    collection, name, verb, scope = found["collection"], found["name"], found["verb"], found["scope"] or ""
    where = f"projects/{found['project']}"
    if collection is None:
        return RestCall("compute.projects.get", where) if http_method == "GET" and not scope else None
    if scope:
        where = f"{where}/{scope}"
    if collection == "operations":
        kind = {"global": "globalOperations"}.get(scope, "regionOperations" if scope.startswith("regions/")
                                                  else "zoneOperations")
        return RestCall(f"compute.{kind}.{'wait' if verb == 'wait' else 'get'}", f"{where}/operations/{name}")
    if verb is not None:
        method = f"compute.{collection}.{verb}"
    elif scope == "aggregated":
        method = f"compute.{collection}.aggregatedList"
    else:
        method = f"compute.{collection}.{_COMPUTE_VERBS.get((http_method, bool(name)), 'unknown')}"
    return RestCall(method, f"{where}/{collection}/{name}" if name else where)
