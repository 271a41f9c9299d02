"""A refusal of Google Cloud's IAM or Service Usage, read into what the user must do: the
permission, the identity that lacks it, and the role to grant (or the API to enable).

Google says "Permission 'P' denied for resource 'R' (or it may not exist)." (reason
IAM_PERMISSION_DENIED), Compute Engine "Required 'P' permission for 'R'", and an API not
enabled answers ErrorInfo reason SERVICE_DISABLED with its service and activation URL
(https://docs.cloud.google.com/iam/docs/troubleshooting-access,
https://docs.cloud.google.com/service-usage/docs/troubleshooting)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from google.rpc import error_details_pb2

from podmanager.cloud import errors as cloud_errors

_DENIED = (re.compile(r"Permission '(?P<permission>[\w.]+)' denied for resource '(?P<resource>[^']*)'"),
           re.compile(r"Required '(?P<permission>[\w.]+)' permission for '(?P<resource>[^']*)'"))

# The smallest predefined role that holds a permission (https://docs.cloud.google.com/iam/docs/roles-permissions).
_ROLES = (("secretmanager.versions.access", "roles/secretmanager.secretAccessor"),
          ("secretmanager.", "roles/secretmanager.admin"), ("tpu.", "roles/tpu.admin"),
          ("iam.serviceAccounts.actAs", "roles/iam.serviceAccountUser"),
          ("iam.serviceAccounts.create", "roles/iam.serviceAccountCreator"),
          ("iam.serviceAccounts.", "roles/iam.serviceAccountAdmin"), ("iam.roles.", "roles/iam.roleAdmin"),
          ("compute.networks.get", "roles/compute.networkViewer"),
          ("compute.subnetworks.list", "roles/compute.networkViewer"),
          ("compute.firewalls.list", "roles/compute.networkViewer"),
          ("compute.routers.list", "roles/compute.networkViewer"),
          ("compute.firewalls.", "roles/compute.securityAdmin"),
          ("compute.networks.updatePolicy", "roles/compute.securityAdmin"),
          ("compute.instances.", "roles/compute.instanceAdmin.v1"), ("compute.disks.", "roles/compute.instanceAdmin.v1"),
          ("compute.subnetworks.use", "roles/compute.instanceAdmin.v1"), ("compute.", "roles/compute.networkAdmin"),
          ("storage.objects.", "roles/storage.objectAdmin"), ("storage.", "roles/storage.admin"),
          ("serviceusage.", "roles/serviceusage.serviceUsageAdmin"),
          ("resourcemanager.projects.", "roles/resourcemanager.projectIamAdmin"))


class ServiceDisabledError(cloud_errors.PermissionDeniedError):
    """An API the call needs is not enabled in the project: the user's setup."""

    exit_code = 2


class MissingPermissionError(cloud_errors.PermissionDeniedError):
    """The caller lacks a permission: the user's setup (a role to grant)."""

    exit_code = 2


def role_for(permission: str) -> str:
    return next((role for prefix, role in _ROLES if permission.startswith(prefix)), "a role holding it")


def _error_infos(details: Sequence[Any]) -> list[tuple[str, dict[str, str]]]:
    """(reason, metadata) of each ErrorInfo: a gRPC call's are messages, a REST call's JSON
    objects with "@type" (https://cloud.google.com/apis/design/errors#error_info)."""
    found = []
    for detail in details:
        if isinstance(detail, error_details_pb2.ErrorInfo):
            found.append((detail.reason, dict(detail.metadata)))
        elif isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo"):
            found.append((str(detail.get("reason", "")), dict(detail.get("metadata") or {})))
    return found


def explain(message: str, details: Sequence[Any], caller: str | None) -> cloud_errors.CloudError | None:
    """The refusal as one of the errors above, naming what to do; None if it is neither kind."""
    for reason, metadata in _error_infos(details):
        if reason == "SERVICE_DISABLED":
            service, consumer = metadata.get("service", "?"), metadata.get("consumer", "")
            project = consumer.removeprefix("projects/") or "PROJECT"
            return ServiceDisabledError(
                f"the {service} API is not enabled in project {project} (SERVICE_DISABLED: {metadata.get('activationUrl', '')})",
                hint=f"Enable it: gcloud services enable {service} --project {project} (it takes a few minutes).")
    for pattern in _DENIED:
        found = pattern.search(message)
        if found is None:
            continue
        permission, resource = found["permission"], found["resource"]
        who = caller or "the account of your Application Default Credentials"
        role = role_for(permission)
        member = caller or "MEMBER"
        if permission == "iam.serviceAccounts.actAs":
            account = resource.rsplit("/", 1)[-1]
            fix = (f"gcloud iam service-accounts add-iam-policy-binding {account} --member {member} "
                   f"--role {role}")
        else:
            project = resource.split("/")[1] if resource.startswith("projects/") else "PROJECT"
            fix = f"gcloud projects add-iam-policy-binding {project} --member {member} --role {role}"
        return MissingPermissionError(f"{who} lacks the permission {permission} on {resource}: {message}",
                                      hint=f"Grant {role} to {who}: {fix}")
    return None
