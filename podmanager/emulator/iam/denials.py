"""Google's refusals, in Google's shapes, for REST (a JSON body) and gRPC (a status with details).

- No token, or one no one was issued: 401 UNAUTHENTICATED
  (https://docs.cloud.google.com/docs/authentication/troubleshoot-adc#user-creds-client-based and
  the messages Google's front end answers).
- An API not enabled: 403 PERMISSION_DENIED with an ErrorInfo, reason SERVICE_DISABLED, domain
  googleapis.com, metadata service / consumer / activationUrl
  (https://docs.cloud.google.com/service-usage/docs/troubleshooting and
  https://cloud.google.com/apis/design/errors#error_info).
- A permission missing: Compute Engine says "Required 'PERMISSION' permission for 'RESOURCE'"
  (https://docs.cloud.google.com/compute/docs/troubleshooting/troubleshooting-permissions); the
  newer APIs "Permission 'PERMISSION' denied for resource 'RESOURCE' (or it may not exist)."
  with an ErrorInfo, reason IAM_PERMISSION_DENIED, domain iam.googleapis.com
  (https://docs.cloud.google.com/iam/docs/troubleshooting-access).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from podmanager.emulator.iam import methods


@dataclass(frozen=True)
class Denial:
    http: int
    status: str  # the google.rpc code's name
    message: str
    reason: str = ""  # the ErrorInfo's, if any
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    def json_body(self) -> bytes:
        error: dict[str, object] = {"code": self.http, "message": self.message, "status": self.status}
        if self.reason:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": self.reason,
                                 "domain": self.domain, "metadata": self.metadata}]
            error["errors"] = [{"message": self.message, "domain": "global",
                                "reason": "forbidden" if self.http == 403 else "badRequest"}]
        return json.dumps({"error": error}).encode()

    def grpc_status(self) -> status_pb2.Status:
        status = status_pb2.Status(code=code_pb2.Code.Value(self.status), message=self.message)
        if self.reason:
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.ErrorInfo(reason=self.reason, domain=self.domain, metadata=self.metadata))
            status.details.append(detail)
        return status

    @property
    def grpc_code(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.status]


NO_CREDENTIALS = Denial(401, "UNAUTHENTICATED", "Request is missing required authentication credential. Expected "
                        "OAuth 2 access token, login cookie or other valid authentication credential. See "
                        "https://developers.google.com/identity/sign-in/web/devconsole-project.")
BAD_CREDENTIALS = Denial(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 "
                         "access token, login cookie or other valid authentication credential. See "
                         "https://developers.google.com/identity/sign-in/web/devconsole-project.")


def activation_url(service: str, number: str) -> str:
    return f"https://console.developers.google.com/apis/api/{service}/overview?project={number}"


def service_disabled(service: str, number: str) -> Denial:
    url = activation_url(service, number)
    title = methods.TITLES.get(service, service)
    return Denial(403, "PERMISSION_DENIED",
                  f"{title} has not been used in project {number} before or it is disabled. Enable it by visiting "
                  f"{url} then retry. If you enabled this API recently, wait a few minutes for the action to "
                  "propagate to our systems and retry.",
                  reason="SERVICE_DISABLED", domain="googleapis.com",
                  metadata={"service": service, "consumer": f"projects/{number}", "activationUrl": url,
                            "serviceTitle": title, "containerInfo": number})


def no_such_account(service: str, email: str) -> Denial:
    """A VM or node (or a policy member) naming a service account the project does not have.
    Google answers 400 "Service account EMAIL does not exist." (reason badRequest/invalid) where
    a policy names one [R: reported by users of Resource Manager, Storage and Compute Engine;
    the reference pages are silent on the node's and instance's field, so the emulator refuses
    there too, the stricter answer]."""
    return Denial(400, "INVALID_ARGUMENT", f"Service account {email} does not exist.",
                  reason="SERVICE_ACCOUNT_NOT_FOUND", domain=service, metadata={"email": email})


def permission_denied(service: str, permission: str, resource: str) -> Denial:
    if service == methods.COMPUTE:
        return Denial(403, "PERMISSION_DENIED", f"Required '{permission}' permission for '{resource}'",
                      reason="IAM_PERMISSION_DENIED", domain="compute.googleapis.com",
                      metadata={"permission": permission, "resource": resource})
    return Denial(403, "PERMISSION_DENIED",
                  f"Permission '{permission}' denied for resource '{resource}' (or it may not exist).",
                  reason="IAM_PERMISSION_DENIED", domain="iam.googleapis.com",
                  metadata={"permission": permission, "resource": resource})
