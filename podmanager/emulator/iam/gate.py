"""The one check every emulated call passes before its handler: who calls (the bearer token),
whether the API is enabled in the project, and whether the caller holds every permission the
method needs (`methods.METHODS`), `iam.serviceAccounts.actAs` on the account a new VM or node
runs as included. A resource's own policy counts beside the project's (a secret's, a bucket's,
and for actAs the service account's own). A VM or node asked to run as an account the project
does not have is refused. Every call checked is remembered (`calls_made`, the newest 10,000):
who made it and whether it passed, what a test reads to see each machine call as its account.

Served from the REST dispatcher (`rest.serve(gate=...)`) and as a gRPC server interceptor."""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any, Callable, Iterable, Mapping

import grpc
from grpc_status import rpc_status

from podmanager.emulator.iam import denials, methods, tokens
from podmanager.emulator.iam.denials import Denial
from podmanager.emulator.iam.project import ProjectIam, default_compute_account

# A resource's own bindings (role, members) by its name; [] when it has none.
ResourcePolicy = Callable[[str], Iterable[tuple[str, Iterable[str]]]]


class Gate:
    def __init__(self, iam: ProjectIam, resource_policy: ResourcePolicy = lambda name: ()):
        self.iam = iam
        self.resource_policy = resource_policy
        self._calls: deque[dict[str, object]] = deque(maxlen=10_000)
        self._calls_lock = threading.Lock()

    def calls_made(self, methods: list[str] | None = None) -> list[dict[str, object]]:
        """The calls checked, oldest first ({"method", "principal", "resource", "denied"}), only
        `methods`' if given (discovery ids)."""
        with self._calls_lock:
            return [dict(call) for call in self._calls if methods is None or call["method"] in methods]

    def caller(self, headers: Mapping[str, str]) -> str | Denial:
        """The principal the request's bearer token stands for, or the 401 Google answers."""
        authorization = headers.get("authorization", "")
        if not authorization.startswith("Bearer "):
            return denials.NO_CREDENTIALS
        found = tokens.principal_of(authorization.removeprefix("Bearer ").strip())
        return found if found is not None else denials.BAD_CREDENTIALS

    def check(self, method_id: str, principal: str, resource: str, *, also: Iterable[str] = (),
              act_as: str | None = None) -> Denial | None:
        """None if `principal` may call `method_id` on `resource`; else Google's refusal.
        `also`: permissions what the request sets adds; `act_as`: the account a VM or node it
        creates runs as (iam.serviceAccounts.actAs on it:
        https://docs.cloud.google.com/iam/docs/service-accounts-actas)."""
        denial = self._denial(method_id, principal, resource, also, act_as)
        with self._calls_lock:
            self._calls.append({"method": method_id, "principal": principal, "resource": resource,
                                "denied": denial.message if denial else None})
        return denial

    def _denial(self, method_id: str, principal: str, resource: str, also: Iterable[str],
                act_as: str | None) -> Denial | None:
        method = methods.METHODS[method_id]
        if not self.iam.enabled(method.service):
            return denials.service_disabled(method.service, self.iam.number)
        extra = list(self._resource_bindings(resource))
        for permission in (*method.permissions, *also):
            if not self.iam.holds(principal, permission, extra):
                return denials.permission_denied(method.service, permission, resource)
        if act_as is None:
            return None
        account = act_as.removeprefix("serviceAccount:")
        own = self.iam.account_policy(account).items()  # who may act as it, granted on the account itself
        if not self.iam.holds(principal, methods.ACT_AS, own):
            return denials.permission_denied(methods.IAM, methods.ACT_AS, f"projects/-/serviceAccounts/{account}")
        if not self.iam.account_exists(account):
            return denials.no_such_account(method.service, account)
        return None

    def _resource_bindings(self, resource: str) -> Iterable[tuple[str, Iterable[str]]]:
        """A resource's own policy: a service account's is the project's record; others the server's."""
        if "/serviceAccounts/" in resource:
            return self.iam.account_policy(resource.rsplit("/", 1)[-1]).items()
        return self.resource_policy(resource)

    def holding(self, principal: str, asked: Iterable[str]) -> list[str]:
        """The permissions of `asked` the principal holds on the project (testIamPermissions)."""
        return [p for p in asked if self.iam.holds(principal, p)]

    # ------------------------------------------------------------------ REST

    def rest(self, http_method: str, path: str, headers: Mapping[str, str], body: bytes) -> Denial | None:
        call = methods.rest_call(http_method, path)
        if call is None or call.method not in methods.METHODS:
            return None  # not an emulated method: the routes answer (404, 405)
        who = self.caller(headers)
        if isinstance(who, Denial):
            return who
        also: list[str] = []
        act_as = None
        if call.method == "compute.instances.insert":
            also, act_as = self._instance_extras(body)
        return self.check(call.method, who, call.resource, also=also, act_as=act_as)

    def _instance_extras(self, body: bytes) -> tuple[list[str], str | None]:
        """What an instance's request adds (https://docs.cloud.google.com/compute/docs/reference/rest/v1/instances/insert):
        metadata -> setMetadata, a service account -> setServiceAccount and actAs on it, an
        external address -> subnetworks.useExternalIp."""
        try:
            asked = json.loads(body or b"{}")
        except ValueError:
            return [], None  # malformed: the route says so
        also, act_as = [], None
        if asked.get("metadata", {}).get("items"):
            also.append("compute.instances.setMetadata")
        accounts = asked.get("serviceAccounts") or []
        if accounts:
            also.append("compute.instances.setServiceAccount")
            email = accounts[0].get("email") or "default"
            act_as = default_compute_account(self.iam.number) if email == "default" else f"serviceAccount:{email}"
        if any(interface.get("accessConfigs") for interface in asked.get("networkInterfaces", [])):
            also.append("compute.subnetworks.useExternalIp")
        return also, act_as

    # ------------------------------------------------------------------ gRPC

    def grpc(self, method_id: str, request: Any, metadata: Mapping[str, str]) -> Denial | None:
        who = self.caller(metadata)
        if isinstance(who, Denial):
            return who
        act_as = None
        if method_id == "tpu.projects.locations.nodes.create":
            act_as = self._node_account(request.node)
        elif method_id == "tpu.projects.locations.queuedResources.create":
            specs = list(request.queued_resource.tpu.node_spec)
            act_as = self._node_account(specs[0].node) if specs else None
        return self.check(method_id, who, _grpc_resource(request), act_as=act_as)

    def _node_account(self, node: Any) -> str:
        """The account a TPU node runs as: its service_account, else the default compute account."""
        email = node.service_account.email if "service_account" in node else ""
        return f"serviceAccount:{email}" if email else default_compute_account(self.iam.number)


def _grpc_resource(request: Any) -> str:
    for field in ("resource", "name", "parent"):
        value = getattr(request, field, "")
        if isinstance(value, str) and value:
            return value
    node = getattr(request, "node", None)
    return getattr(node, "name", "") or ""


class GateInterceptor(grpc.ServerInterceptor):
    """`Gate.grpc` before every emulated gRPC method; other services (the control service) pass."""

    def __init__(self, gate: Gate):
        self.gate = gate

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        method_id = methods.GRPC.get(handler_call_details.method)
        if handler is None or method_id is None or handler.unary_unary is None:
            return handler
        inner, gate = handler.unary_unary, self.gate

        def checked(request: Any, context: grpc.ServicerContext) -> Any:
            denial = gate.grpc(method_id, request, {k.lower(): v for k, v in context.invocation_metadata()})
            if denial is not None:
                context.abort_with_status(rpc_status.to_status(denial.grpc_status()))
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(checked, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)
