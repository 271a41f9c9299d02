"""Compute Engine's network side through `google-cloud-compute`, as typed records
(`cloud/network.py`): the project's default service account, networks, subnetworks, firewall
rules (read, created, deleted) and Cloud Routers with their NAT. What the preflight of `up` reads
and the rules it makes. `ComputeClients` holds what the VMs' client (`instances.py`) shares with it.

The client speaks REST. Against a dry run's emulator it takes the emulator's root as its
endpoint and anonymous credentials; on Google Cloud, Application Default Credentials. Every
call has a timeout and transient errors are retried (`calls.call_google`); errors become the
taxonomy of `cloud/errors.py` by their HTTP status (a REST error carries no gRPC code). An
insert or delete waits for its operation, polled through our own operations client: the
library's `ExtendedOperation` would poll Google's default endpoint, not the one given.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, TypeVar

import requests
from google.api_core import exceptions as google_exceptions
from google.api_core.client_options import ClientOptions
from google.cloud import compute_v1

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.calls import call_google
from podmanager.cloud.gcp.errors import AUTH_HINT
from podmanager.cloud.network import (
    Allowed,
    FirewallRule,
    Nat,
    Network,
    Router,
    Subnetwork,
    short_name,
)
from podmanager.core.clock import Clock, RealClock, poll_until
from podmanager.core.errors import TimeoutExceededError

T = TypeVar("T")
C = TypeVar("C", bound="ComputeClients")
SERVICE = "the Compute Engine API"
# An operation's `wait` returns when it is DONE or near its 2-minute deadline (compute.v1's
# zoneOperations.wait): its call's timeout is that, with a margin.
WAIT_CALL_TIMEOUT_S = 150.0
_BY_STATUS: dict[int, type[cloud_errors.CloudError]] = {
    400: cloud_errors.InvalidRequestError, 401: cloud_errors.AuthenticationError,
    403: cloud_errors.PermissionDeniedError, 404: cloud_errors.NotFoundError, 409: cloud_errors.AlreadyExistsError,
    412: cloud_errors.InvalidRequestError, 429: cloud_errors.TransientError, 500: cloud_errors.TransientError,
    502: cloud_errors.TransientError, 503: cloud_errors.TransientError, 504: cloud_errors.TransientError,
}


def map_rest_error(error: google_exceptions.GoogleAPICallError, caller: str | None = None) -> cloud_errors.CloudError:
    """A failed Compute Engine call as the taxonomy's error, by its HTTP status; a missing
    permission or API named with what to do (`caller`: who called, when known)."""
    kind = _BY_STATUS.get(int(error.code or 0), cloud_errors.CloudError)
    if kind is cloud_errors.PermissionDeniedError:
        from podmanager.cloud.gcp.permissions import explain

        explained = explain(error.message or "", list(error.details or ()), caller)
        if explained is not None:
            return explained
    hint = {cloud_errors.AuthenticationError: AUTH_HINT,
            cloud_errors.PermissionDeniedError: "The account needs Compute Engine's network roles on the project "
                                                "(roles/compute.networkViewer to read, roles/compute.securityAdmin "
                                                "to create firewall rules) and the Compute Engine API enabled."}.get(kind)
    return kind(f"{error.message} (HTTP {error.code})", hint=hint)


def _rest_call(method: Callable[..., T]) -> Callable[..., T]:
    """A client method whose unreachable or silent endpoint is UNAVAILABLE or DEADLINE_EXCEEDED
    (both retried), as gRPC reports them; the REST transport raises `requests`' own errors."""
    def call(**arguments: Any) -> T:
        try:
            return method(**arguments)
        except requests.exceptions.ConnectionError as unreachable:
            raise google_exceptions.ServiceUnavailable(f"cannot reach {SERVICE}: {unreachable}") from unreachable
        except requests.exceptions.Timeout as slow:
            raise google_exceptions.DeadlineExceeded(f"{SERVICE} did not answer in time: {slow}") from slow
    return call


def _firewall_record(m: compute_v1.Firewall) -> FirewallRule:
    return FirewallRule(name=m.name, network=short_name(m.network), direction=m.direction or "INGRESS",
                        priority=m.priority if "priority" in m else 1000, source_ranges=list(m.source_ranges),
                        source_tags=list(m.source_tags), target_tags=list(m.target_tags),
                        allowed=[Allowed(protocol=a.I_p_protocol, ports=list(a.ports)) for a in m.allowed],
                        denied=[Allowed(protocol=d.I_p_protocol, ports=list(d.ports)) for d in m.denied],
                        destination_ranges=list(m.destination_ranges), disabled=m.disabled)


class ComputeClients:
    """What every Compute Engine client here shares: the project, the clients' options, each
    call's timeout and retries, and waiting for an operation.

    endpoint: a dry run's emulator root (http://127.0.0.1:PORT), with the caller's emulator token;
      None: Google's, with `credentials` (Application Default Credentials).
    """

    def __init__(self, project: str, *, endpoint: str | None = None, credentials: Any = None,
                 clock: Clock | None = None, call_timeout_s: float = 30.0, retry_deadline_s: float = 60.0,
                 retry_initial_s: float = 1.0, retry_max_s: float = 10.0, poll_interval_s: float = 1.0):
        self.project = project
        self.clock = clock or RealClock()
        self.timing = {"call_timeout_s": call_timeout_s, "retry_deadline_s": retry_deadline_s,
                       "retry_initial_s": retry_initial_s, "retry_max_s": retry_max_s}
        self.poll_interval_s = poll_interval_s
        self.options: dict[str, Any] = {"credentials": credentials}
        self.caller: str | None = None  # who calls, named in a refusal (a dry run's)
        if endpoint:
            from podmanager.cloud.gcp.emulator_identity import (
                credentials as emulator_credentials,
            )
            from podmanager.cloud.gcp.emulator_identity import principal

            self.caller = principal()
            self.options = {"credentials": emulator_credentials(), "client_options": ClientOptions(api_endpoint=endpoint)}

    def clients(self) -> tuple[Any, ...]:
        """The library's clients this one holds (closed by `close`)."""
        return ()

    def close(self) -> None:
        for client in self.clients():
            client.transport.close()

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, what: str, method: Callable[..., T], **request: Any) -> T:
        return call_google(what, _rest_call(method), request, service=SERVICE, clock=self.clock,
                           map_error=lambda error: map_rest_error(error, self.caller), **self.timing)

    def _wait_call(self, what: str, method: Callable[..., T], **request: Any) -> T:
        """An operation's `wait`, which Google holds up to its 2-minute deadline: given longer
        than that, not the ordinary call timeout (which would end every long wait as an error)."""
        timing = {**self.timing, "call_timeout_s": max(self.timing["call_timeout_s"], WAIT_CALL_TIMEOUT_S)}
        return call_google(what, _rest_call(method), request, service=SERVICE, clock=self.clock,
                           map_error=map_rest_error, **timing)

    @staticmethod
    def _all_pages(method: Callable[..., Any]) -> Callable[..., list[Any]]:
        return lambda **call: list(method(**call))

    def _wait_done(self, operation: compute_v1.Operation, poll: Callable[[], compute_v1.Operation], what: str,
                   timeout_s: float) -> None:
        """Until the operation is DONE or `timeout_s` passes (`poll`: an operation's `wait`, which
        may return it not DONE, at its deadline or at once); its error as the taxonomy's."""
        def finished() -> compute_v1.Operation | None:
            current = poll()
            return current if current.status == compute_v1.Operation.Status.DONE else None

        done = operation if operation.status == compute_v1.Operation.Status.DONE else poll_until(
            finished, timeout_s=timeout_s, interval_s=self.poll_interval_s, clock=self.clock,
            on_timeout=lambda: TimeoutExceededError(f"{what}: its operation still runs after {timeout_s:g}s"))
        if done.error.errors:
            first = done.error.errors[0]
            kind = {"RESOURCE_ALREADY_EXISTS": cloud_errors.AlreadyExistsError,
                    "RESOURCE_NOT_FOUND": cloud_errors.NotFoundError}.get(first.code, cloud_errors.CloudError)
            raise kind(f"{what} failed: {first.message} ({first.code})")


class ComputeNetworks(ComputeClients):
    """One project's networks through the Compute Engine API (see `ComputeClients` for the endpoint)."""

    def __init__(self, project: str, **options: Any):
        super().__init__(project, **options)
        self._networks = compute_v1.NetworksClient(**self.options)
        self._subnetworks = compute_v1.SubnetworksClient(**self.options)
        self._firewalls = compute_v1.FirewallsClient(**self.options)
        self._routers = compute_v1.RoutersClient(**self.options)
        self._operations = compute_v1.GlobalOperationsClient(**self.options)
        self._projects = compute_v1.ProjectsClient(**self.options)

    def in_project(self, project: str) -> ComputeNetworks:
        """The same clients on another project's resources (a Shared VPC's host project)."""
        other = copy.copy(self)
        other.project = project
        return other

    def clients(self) -> tuple[Any, ...]:
        return self._networks, self._subnetworks, self._firewalls, self._routers, self._operations, self._projects

    # ------------------------------------------------------------------ reads

    def default_service_account(self) -> str:
        """The account the project's VMs run as unless told otherwise (PROJECT_NUMBER-compute@...)."""
        message = self._call("get project", self._projects.get, project=self.project)
        return message.default_service_account

    def network(self, name: str) -> Network:
        message = self._call(f"get network {name}", self._networks.get, project=self.project, network=name)
        return Network(name=message.name, auto_create_subnetworks=message.auto_create_subnetworks)

    def subnetworks(self, region: str) -> list[Subnetwork]:
        messages = self._call(f"list subnetworks in {region}", self._all_pages(self._subnetworks.list),
                              project=self.project, region=region)
        return [Subnetwork(name=m.name, region=short_name(m.region) or region, network=short_name(m.network),
                           ip_cidr_range=m.ip_cidr_range, private_ip_google_access=m.private_ip_google_access)
                for m in messages]

    def firewalls(self) -> list[FirewallRule]:
        messages = self._call("list firewall rules", self._all_pages(self._firewalls.list), project=self.project)
        return [_firewall_record(m) for m in messages]

    def firewall(self, name: str) -> FirewallRule | None:
        try:
            return _firewall_record(self._call(f"get firewall rule {name}", self._firewalls.get, project=self.project,
                                               firewall=name))
        except cloud_errors.NotFoundError:
            return None

    def routers(self, region: str) -> list[Router]:
        messages = self._call(f"list routers in {region}", self._all_pages(self._routers.list),
                              project=self.project, region=region)
        return [Router(name=m.name, region=region, network=short_name(m.network),
                       nats=[Nat(name=n.name, source_subnetwork_ip_ranges_to_nat=n.source_subnetwork_ip_ranges_to_nat,
                                 subnetworks=[short_name(s.name) for s in n.subnetworks]) for n in m.nats])
                for m in messages]

    # ------------------------------------------------------------------ the cluster's rule

    def create_firewall(self, rule: FirewallRule, *, timeout_s: float = 120.0) -> None:
        message = compute_v1.Firewall(
            name=rule.name, network=f"projects/{self.project}/global/networks/{rule.network}",
            direction=rule.direction, priority=rule.priority, source_ranges=rule.source_ranges,
            source_tags=rule.source_tags, target_tags=rule.target_tags, disabled=rule.disabled,
            allowed=[compute_v1.Allowed(I_p_protocol=a.protocol, ports=a.ports) for a in rule.allowed])
        operation = self._call(f"create firewall rule {rule.name}", self._firewalls.insert_unary,
                               project=self.project, firewall_resource=message)
        self._wait(operation, f"create firewall rule {rule.name}", timeout_s)

    def delete_firewall(self, name: str, *, timeout_s: float = 120.0) -> None:
        operation = self._call(f"delete firewall rule {name}", self._firewalls.delete_unary,
                               project=self.project, firewall=name)
        self._wait(operation, f"delete firewall rule {name}", timeout_s)

    def _wait(self, operation: compute_v1.Operation, what: str, timeout_s: float) -> None:
        """Until the (global) operation is DONE."""
        self._wait_done(operation, lambda: self._wait_call(f"wait for {what}", self._operations.wait,
                                                           project=self.project, operation=operation.name),
                        what, timeout_s)
