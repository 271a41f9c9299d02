"""Compute Engine's network side through its REST API as plain JSON
(https://cloud.google.com/compute/docs/reference/rest/v1), as typed records (`cloud/network.py`):
the project's default service account, networks, subnetworks, firewall rules (read, created,
deleted) and Cloud Routers with their NAT. What the preflight of `up` reads and the rules it
makes. `ComputeClients` holds what the VMs' client (`instances.py`) shares with it.

Plain JSON over the HTTP session the other JSON APIs use (`json_session.py`), not
`google-cloud-compute`, whose import alone takes seconds (its package imports every service and
message type: issue 43), paid by every `up` and `down`. Against a dry run's emulator it takes the
emulator's root as its endpoint and the caller's emulator token; on Google Cloud, Application
Default Credentials. Every call has a timeout and transient errors are retried
(`calls.call_google`); a failed call is Google's own error type (`from_http_response`, as the
library raised it), mapped to the taxonomy of `cloud/errors.py` by its HTTP status. A list is
read page by page (`nextPageToken`). An insert or delete waits for its operation through the
operation's `wait`.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, TypeVar
from urllib.parse import quote

import requests
from google.api_core import exceptions as google_exceptions

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.calls import call_google
from podmanager.cloud.gcp.errors import AUTH_HINT
from podmanager.cloud.gcp.json_session import json_api_session
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

C = TypeVar("C", bound="ComputeClients")
Json = dict[str, Any]
SERVICE = "the Compute Engine API"
GOOGLE_ROOT = "https://compute.googleapis.com"
API_PATH = "/compute/v1"
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


def path(*parts: str) -> str:
    """`/projects/P/...` with each name quoted as one path segment."""
    return "".join(f"/{quote(part, safe='')}" for part in parts)


def _firewall_record(m: Json) -> FirewallRule:
    return FirewallRule(name=m["name"], network=short_name(m.get("network", "")), direction=m.get("direction") or "INGRESS",
                        priority=m.get("priority", 1000), source_ranges=m.get("sourceRanges", []),
                        source_tags=m.get("sourceTags", []), target_tags=m.get("targetTags", []),
                        allowed=[Allowed(protocol=a["IPProtocol"], ports=a.get("ports", [])) for a in m.get("allowed", [])],
                        denied=[Allowed(protocol=d["IPProtocol"], ports=d.get("ports", [])) for d in m.get("denied", [])],
                        destination_ranges=m.get("destinationRanges", []), disabled=m.get("disabled", False))


def _firewall_body(project: str, rule: FirewallRule) -> Json:
    """The insert's body for `rule` (Firewall's JSON; empty lists left out, as the library left them)."""
    body: Json = {"name": rule.name, "network": f"projects/{project}/global/networks/{rule.network}",
                  "direction": rule.direction, "priority": rule.priority, "sourceRanges": rule.source_ranges,
                  "sourceTags": rule.source_tags, "targetTags": rule.target_tags, "disabled": rule.disabled,
                  "allowed": [{"IPProtocol": a.protocol, **({"ports": a.ports} if a.ports else {})}
                              for a in rule.allowed]}
    return {key: value for key, value in body.items() if value != []}


class ComputeClients:
    """What every Compute Engine client here shares: the project, the HTTP session, each call's
    timeout and retries, lists read page by page, and waiting for an operation.

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
        self.root = (endpoint or GOOGLE_ROOT).rstrip("/") + API_PATH
        self.caller: str | None = None  # who calls, named in a refusal (a dry run's)
        if endpoint:
            from podmanager.cloud.gcp.emulator_identity import principal

            self.caller = principal()
        self._session = json_api_session(endpoint, credentials)

    def close(self) -> None:
        self._session.close()

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, verb: str, where: str, params: Json, body: Json | None, timeout: float) -> Json:
        """One HTTP request; an unreachable or silent endpoint is UNAVAILABLE or DEADLINE_EXCEEDED
        (both retried), as gRPC reports them; an HTTP error Google's own exception for it."""
        try:
            response = self._session.request(verb, self.root + where, params=params or None, json=body,
                                             timeout=timeout)
        except requests.exceptions.ConnectionError as unreachable:
            raise google_exceptions.ServiceUnavailable(f"cannot reach {SERVICE}: {unreachable}") from unreachable
        except requests.exceptions.Timeout as slow:
            raise google_exceptions.DeadlineExceeded(f"{SERVICE} did not answer in time: {slow}") from slow
        if response.status_code >= 400:
            raise google_exceptions.from_http_response(response)
        try:
            return response.json() if response.content else {}
        except ValueError as garbled:  # not Google's answer (a proxy's page?): no taxonomy's kind, not retried
            raise google_exceptions.GoogleAPICallError(f"{SERVICE} answered no JSON: {garbled}") from garbled

    def _call(self, what: str, verb: str, where: str, *, params: Json | None = None, body: Json | None = None,
              call_timeout_s: float | None = None) -> Json:
        """`verb` of `where` (under the API's root) with its timeout, retried while transient."""
        timing = {**self.timing, "call_timeout_s": call_timeout_s or self.timing["call_timeout_s"]}

        def send(*, request: Json, retry: None, timeout: float) -> Json:
            return self._send(verb, where, request["params"], request["body"], timeout)

        return call_google(what, send, {"params": params or {}, "body": body}, service=SERVICE, clock=self.clock,
                           map_error=lambda error: map_rest_error(error, self.caller), **timing)

    def _pages(self, what: str, where: str, params: Json | None = None) -> list[Any]:
        """Every page's `items` of a list, in order: a list's are resources, an aggregated
        list's (scope, scoped list) pairs."""
        found: list[Any] = []
        token = ""
        while True:
            page = self._call(what, "GET", where, params={**(params or {}), **({"pageToken": token} if token else {})})
            items = page.get("items", [])
            found += list(items.items()) if isinstance(items, dict) else items
            token = page.get("nextPageToken", "")
            if not token:
                return found

    def _wait_done(self, operation: Json, poll: Callable[[], Json], what: str, timeout_s: float) -> None:
        """Until the operation is DONE or `timeout_s` passes (`poll`: an operation's `wait`, which
        may return it not DONE, at its deadline or at once); its error as the taxonomy's."""
        def finished() -> Json | None:
            current = poll()
            return current if current.get("status") == "DONE" else None

        done = operation if operation.get("status") == "DONE" else poll_until(
            finished, timeout_s=timeout_s, interval_s=self.poll_interval_s, clock=self.clock,
            on_timeout=lambda: TimeoutExceededError(f"{what}: its operation still runs after {timeout_s:g}s"))
        errors = done.get("error", {}).get("errors", [])
        if errors:
            first = errors[0]
            kind = {"RESOURCE_ALREADY_EXISTS": cloud_errors.AlreadyExistsError,
                    "RESOURCE_NOT_FOUND": cloud_errors.NotFoundError}.get(first.get("code", ""), cloud_errors.CloudError)
            raise kind(f"{what} failed: {first.get('message', '')} ({first.get('code', '')})")

    def _wait_call(self, what: str, where: str) -> Json:
        """An operation's `wait` (POST `where`), which Google holds up to its 2-minute deadline:
        given longer than that, not the ordinary call timeout (which would end every long wait
        as an error)."""
        return self._call(what, "POST", where,
                          call_timeout_s=max(self.timing["call_timeout_s"], WAIT_CALL_TIMEOUT_S))


class ComputeNetworks(ComputeClients):
    """One project's networks through the Compute Engine API (see `ComputeClients` for the endpoint)."""

    def in_project(self, project: str) -> ComputeNetworks:
        """The same session on another project's resources (a Shared VPC's host project)."""
        other = copy.copy(self)
        other.project = project
        return other

    # ------------------------------------------------------------------ reads

    def default_service_account(self) -> str:
        """The account the project's VMs run as unless told otherwise (PROJECT_NUMBER-compute@...)."""
        found = self._call("get project", "GET", path("projects", self.project))
        return str(found.get("defaultServiceAccount", ""))

    def network(self, name: str) -> Network:
        found = self._call(f"get network {name}", "GET", path("projects", self.project, "global", "networks", name))
        return Network(name=found["name"], auto_create_subnetworks=found.get("autoCreateSubnetworks", False))

    def subnetworks(self, region: str) -> list[Subnetwork]:
        found = self._pages(f"list subnetworks in {region}", path("projects", self.project, "regions", region,
                                                                   "subnetworks"))
        return [Subnetwork(name=m["name"], region=short_name(m.get("region", "")) or region,
                           network=short_name(m.get("network", "")), ip_cidr_range=m.get("ipCidrRange", ""),
                           private_ip_google_access=m.get("privateIpGoogleAccess", False))
                for m in found]

    def firewalls(self) -> list[FirewallRule]:
        found = self._pages("list firewall rules", path("projects", self.project, "global", "firewalls"))
        return [_firewall_record(m) for m in found]

    def firewall(self, name: str) -> FirewallRule | None:
        try:
            return _firewall_record(self._call(f"get firewall rule {name}", "GET",
                                               path("projects", self.project, "global", "firewalls", name)))
        except cloud_errors.NotFoundError:
            return None

    def routers(self, region: str) -> list[Router]:
        found = self._pages(f"list routers in {region}", path("projects", self.project, "regions", region, "routers"))
        return [Router(name=m["name"], region=region, network=short_name(m.get("network", "")),
                       nats=[Nat(name=n["name"], source_subnetwork_ip_ranges_to_nat=n.get(
                                 "sourceSubnetworkIpRangesToNat", ""),
                                 subnetworks=[short_name(s["name"]) for s in n.get("subnetworks", [])])
                             for n in m.get("nats", [])])
                for m in found]

    # ------------------------------------------------------------------ the cluster's rule

    def create_firewall(self, rule: FirewallRule, *, timeout_s: float = 120.0) -> None:
        what = f"create firewall rule {rule.name}"
        operation = self._call(what, "POST", path("projects", self.project, "global", "firewalls"),
                               body=_firewall_body(self.project, rule))
        self._wait(operation, what, timeout_s)

    def patch_firewall_sources(self, name: str, source_ranges: list[str], *, timeout_s: float = 120.0) -> None:
        """The rule's source ranges set to `source_ranges` (firewalls.patch: the user's
        compute.firewalls.update permission), its other fields kept."""
        what = f"update firewall rule {name}"
        operation = self._call(what, "PATCH", path("projects", self.project, "global", "firewalls", name),
                               body={"sourceRanges": source_ranges})
        self._wait(operation, what, timeout_s)

    def delete_firewall(self, name: str, *, timeout_s: float = 120.0) -> None:
        what = f"delete firewall rule {name}"
        operation = self._call(what, "DELETE", path("projects", self.project, "global", "firewalls", name))
        self._wait(operation, what, timeout_s)

    def _wait(self, operation: Json, what: str, timeout_s: float) -> None:
        """Until the (global) operation is DONE."""
        where = path("projects", self.project, "global", "operations", operation["name"], "wait")
        self._wait_done(operation, lambda: self._wait_call(f"wait for {what}", where), what, timeout_s)
