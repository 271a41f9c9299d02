"""The real Cloud TPU backend: `google.cloud.tpu_v2.TpuClient` behind the `TpuCloud` protocol.

- Credentials come from Application Default Credentials; `check_credentials` fails at
  once (no metadata-server wait off GCE) with the command that fixes it.
- With an emulator (`TPU_EMULATOR_HOST=127.0.0.1:8470`, see `podmanager emulator`) the
  client talks plain gRPC to it and needs no credentials.
- The client's methods have no retry and no timeout of their own: every call here has a
  timeout, and transient errors (UNAVAILABLE, DEADLINE_EXCEEDED, rate limits) are retried
  with jittered exponential backoff until a deadline, then reported as `TransientError`.
- Google's errors become the taxonomy of `podmanager.cloud.errors` in one function,
  `gcp_errors.map_google_error`, for both failed calls and failed long-running operations.
"""

from __future__ import annotations

import functools
import math
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, TypeVar

from google.api_core import exceptions as google_exceptions
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import field_mask_pb2
from google.rpc import code_pb2

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import (
    GuestAttribute,
    Node,
    NodeNetwork,
    NodeRequest,
    NodeState,
    Operation,
    QueuedResource,
    QueuedResourceState,
)
from podmanager.cloud.gcp.calls import call_google
from podmanager.cloud.gcp.errors import (
    AUTH_HINT,
    map_call_error,
    map_google_error,
    unpack_details,
)
from podmanager.core.clock import Clock, RealClock, poll_until
from podmanager.core.errors import TimeoutExceededError
from podmanager.core.spec import Capacity

EMULATOR_ENV = "TPU_EMULATOR_HOST"


def emulator_address(explicit: str | None = None) -> str | None:
    """host:port of the emulator to talk to: `explicit`, else $TPU_EMULATOR_HOST; None for Google Cloud."""
    host = explicit if explicit is not None else os.environ.get(EMULATOR_ENV, "")
    return host.removeprefix("http://").removeprefix("grpc://").rstrip("/") or None


T = TypeVar("T")

# ---------------------------------------------------------------------- credentials


def _adc_file() -> Path:
    config = os.environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    return Path(config) / "application_default_credentials.json"


def _on_gce() -> bool:
    if os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_IP"):
        return True
    try:
        return Path("/sys/class/dmi/id/product_name").read_text().strip().startswith("Google")
    except OSError:
        return False


def check_credentials(project: str) -> Any:
    """Application Default Credentials for `project`, or AuthenticationError at once.

    Off Google Cloud with no credentials file this never touches the network (the
    metadata-server probe of google.auth would wait seconds before failing).
    """
    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit and not Path(explicit).is_file():
        raise cloud_errors.AuthenticationError(
            f"GOOGLE_APPLICATION_CREDENTIALS points to {explicit}, which does not exist; no credentials for project {project}.",
            hint=AUTH_HINT,
        )
    if not explicit and not _adc_file().is_file() and not _on_gce():
        raise cloud_errors.AuthenticationError(
            f"No Google Cloud credentials found for project {project} (no {_adc_file()}, not on Google Cloud).",
            hint=AUTH_HINT,
        )
    import google.auth
    from google.auth import exceptions as auth_exceptions

    try:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except auth_exceptions.GoogleAuthError as error:
        raise cloud_errors.AuthenticationError(f"Google Cloud credentials are unusable: {error}", hint=AUTH_HINT) from error
    return credentials


# ---------------------------------------------------------------------- records

_NODE_STATES: dict[int, NodeState] = {  # Node.State is an IntEnum: a raw message's int finds it
    cloud_tpu.Node.State.CREATING: NodeState.CREATING,
    cloud_tpu.Node.State.READY: NodeState.READY,
    cloud_tpu.Node.State.RESTARTING: NodeState.RESTARTING,
    cloud_tpu.Node.State.REIMAGING: NodeState.RESTARTING,
    cloud_tpu.Node.State.STARTING: NodeState.RESTARTING,
    cloud_tpu.Node.State.DELETING: NodeState.DELETING,
    cloud_tpu.Node.State.REPAIRING: NodeState.REPAIRING,
    cloud_tpu.Node.State.STOPPED: NodeState.STOPPED,
    cloud_tpu.Node.State.STOPPING: NodeState.STOPPED,
    cloud_tpu.Node.State.PREEMPTED: NodeState.PREEMPTED,
    cloud_tpu.Node.State.TERMINATED: NodeState.TERMINATED,
    cloud_tpu.Node.State.HIDING: NodeState.HIDING,
    cloud_tpu.Node.State.HIDDEN: NodeState.HIDDEN,
    cloud_tpu.Node.State.UNHIDING: NodeState.UNHIDING,
    cloud_tpu.Node.State.UNKNOWN: NodeState.UNKNOWN,
}


def _split(path: str) -> tuple[str, str]:
    """(zone, id) of projects/P/locations/Z/<kind>/ID."""
    parts = path.split("/")
    return (parts[3] if len(parts) > 3 else "", parts[-1])


def _capacity(scheduling: Any) -> Capacity:
    if scheduling.spot or scheduling.preemptible:
        return Capacity.SPOT
    return Capacity.RESERVED if scheduling.reserved else Capacity.ON_DEMAND


def node_record(message: cloud_tpu.Node) -> Node:
    """The node as podmanager's record. Read from the raw protobuf message, not proto-plus's
    wrapper: a list of 1,024 nodes is converted at every look at the cloud, and each wrapped field
    costs a conversion (two thirds of a 1,024-slice `up`'s client time went here)."""
    raw = cloud_tpu.Node.pb(message)
    zone, node_id = _split(raw.name)
    created = raw.create_time if raw.HasField("create_time") else None
    return Node(
        name=node_id,
        zone=zone,
        accelerator_type=raw.accelerator_type,
        state=_NODE_STATES.get(raw.state, NodeState.UNSPECIFIED),
        labels=dict(raw.labels),
        capacity=_capacity(raw.scheduling_config),
        runtime_version=raw.runtime_version,
        health=cloud_tpu.Node.Health(raw.health).name if raw.health else None,
        endpoints=tuple(endpoint.ip_address for endpoint in raw.network_endpoints),
        metadata=dict(raw.metadata),
        create_time=created.seconds + created.nanos / 1e9 if created is not None else None,
        network=_network_of(raw),
    )


def network_record(message: cloud_tpu.Node) -> NodeNetwork | None:
    """The node's network settings as the API reports them; None when it reports none."""
    return _network_of(cloud_tpu.Node.pb(message))


def _network_of(raw: Any) -> NodeNetwork | None:
    if not raw.HasField("network_config") and not raw.HasField("service_account") and not raw.tags:
        return None
    config, account = raw.network_config, raw.service_account
    return NodeNetwork(network=config.network, subnetwork=config.subnetwork,
                       enable_external_ips=config.enable_external_ips, service_account=account.email,
                       scopes=tuple(account.scope), tags=tuple(raw.tags))


def node_message(request: NodeRequest) -> cloud_tpu.Node:
    node = cloud_tpu.Node(
        accelerator_type=request.accelerator_type,
        runtime_version=request.runtime_version,
        labels=request.labels,
        metadata=request.metadata,
        scheduling_config=cloud_tpu.SchedulingConfig(
            spot=request.capacity is Capacity.SPOT, reserved=request.capacity is Capacity.RESERVED
        ),
    )
    network = request.network
    if network is not None:
        # Sent whole, even where a field is empty: an empty network or email is the API's default.
        node.network_config = cloud_tpu.NetworkConfig(
            network=network.network, subnetwork=network.subnetwork, enable_external_ips=network.enable_external_ips)
        node.service_account = cloud_tpu.ServiceAccount(email=network.service_account, scope=list(network.scopes))
        node.tags = list(network.tags)
    return node


def queued_record(message: cloud_tpu.QueuedResource) -> QueuedResource:
    zone, qr_id = _split(message.name)
    specs = list(message.tpu.node_spec)
    state = message.state.state.name if message.state.state else "UNKNOWN"
    return QueuedResource(
        name=qr_id,
        zone=zone,
        node_name=specs[0].node_id if specs else "",
        state=QueuedResourceState.__members__.get(state, QueuedResourceState.UNKNOWN),
        labels=dict(specs[0].node.labels) if specs else {},
    )


def operation_record(message: operations_pb2.Operation) -> Operation:
    error = None
    if message.HasField("error") and message.error.code != code_pb2.OK:
        error = map_google_error(
            message.error.code, message.error.message, unpack_details(message.error.details), in_operation=True
        )
    return Operation(name=message.name, done=message.done, error=error)


def named_call_error(error: cloud_errors.CloudError, method: Callable[..., Any],
                     request: dict[str, Any]) -> cloud_errors.CloudError:
    """`error` with the API call that failed in front of its message: `Cloud TPU API
    GetNode(projects/p/locations/z/nodes/x) failed: ...`. A transient error is left as it is:
    it is retried, and the retry's last word names the call already."""
    if isinstance(error, cloud_errors.TransientError):
        return error
    rpc = "".join(word.capitalize() for word in method.__name__.strip("_").split("_"))  # get_node -> GetNode
    node = request.get("node")
    resource = request.get("name") or request.get("parent") or getattr(node, "name", "")
    error.message = f"Cloud TPU API {rpc}({resource}) failed: {error.message}"
    error.args = (error.message, *error.args[1:])
    return error


# ---------------------------------------------------------------------- the backend

LIST_PAGE_SIZE = 100


class GcpCloud:
    """Cloud TPU through the official client; implements `TpuCloud`.

    emulator_host: host:port of `podmanager emulator` (default: $TPU_EMULATOR_HOST); set,
      the client uses an insecure channel and no credentials; unset, ADC (else
      AuthenticationError at once).
    call_timeout_s: timeout of every single call. retry_deadline_s: how long transient
      errors are retried (backoff: full jitter, retry_initial_s doubling up to retry_max_s).
    poll_interval_s: how often `wait` polls an operation.
    clock: time and sleep for backoff and polling (a FakeClock in tests).
    list_page_size: how many resources one page of a list asks for (every page is fetched): a
      reply stays far below gRPC's 4 MB limit (a node with its startup script is about 10 kB).
    on_retry(what, error, attempt): told before each retry, e.g. to log an event.
    """

    backend = "gcp"

    def __init__(
        self,
        project: str,
        *,
        emulator_host: str | None = None,
        call_timeout_s: float = 30,
        retry_deadline_s: float = 120,
        poll_interval_s: float = 5.0,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 30.0,
        clock: Clock | None = None,
        credentials: Any = None,
        on_retry: Callable[[str, BaseException, int], None] | None = None,
        list_page_size: int = LIST_PAGE_SIZE,
    ):
        self.project = project
        self.list_page_size = list_page_size
        self.emulator_host = emulator_address(emulator_host)
        self.call_timeout_s = call_timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.poll_interval_s = poll_interval_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.clock = clock or RealClock()
        self.on_retry = on_retry  # told (call, error, attempt) before each retry
        if self.emulator_host:
            from podmanager.cloud.gcp.emulator_identity import insecure_channel

            transport = TpuGrpcTransport(channel=insecure_channel(self.emulator_host))
            from podmanager.cloud.gcp.emulator_identity import principal

            self.caller: str | None = principal()  # named in a refusal
            self._client = TpuClient(transport=transport)
        else:
            self.caller = None
            self._client = TpuClient(credentials=credentials or check_credentials(project))

    def close(self) -> None:
        self._client.transport.close()

    def __enter__(self) -> GcpCloud:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _call(self, what: str, method: Callable[..., T], **request: Any) -> T:
        """One API call with a timeout; transient errors retried with jittered backoff until the deadline.
        An error that is not retried names the call, as `Cloud TPU API GetNode(NAME) failed: ...`."""
        def mapped(error: google_exceptions.GoogleAPICallError) -> cloud_errors.CloudError:
            return named_call_error(map_call_error(error, self.caller), method, request)

        return call_google(what, method, request, service="the Cloud TPU API", clock=self.clock,
                           call_timeout_s=self.call_timeout_s, retry_deadline_s=self.retry_deadline_s,
                           retry_initial_s=self.retry_initial_s, retry_max_s=self.retry_max_s,
                           map_error=mapped, on_retry=self.on_retry)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _all_pages(method: Callable[..., Any]) -> Callable[..., list[Any]]:
        """A list call that fetches every page inside one attempt (a pager fetches lazily otherwise)."""
        @functools.wraps(method)  # its name is the call's, in errors
        def every_page(**call: Any) -> list[Any]:
            return list(method(**call))

        return every_page

    # ------------------------------------------------------------------ nodes

    def create_node(self, zone: str, node_id: str, request: NodeRequest) -> Operation:
        future = self._call(
            f"create node {node_id} in {zone}",
            self._client.create_node,
            parent=self._parent(zone),
            node_id=node_id,
            node=node_message(request),
        )
        return operation_record(future.operation)

    def get_node(self, zone: str, node_id: str) -> Node:
        message = self._call(f"get node {node_id} in {zone}", self._client.get_node, name=f"{self._parent(zone)}/nodes/{node_id}")
        return node_record(message)

    def list_nodes(self, zone: str) -> list[Node]:
        messages = self._call(f"list nodes in {zone}", self._all_pages(self._client.list_nodes), parent=self._parent(zone),
                              page_size=self.list_page_size)
        return [node_record(message) for message in messages]

    def delete_node(self, zone: str, node_id: str) -> Operation:
        future = self._call(
            f"delete node {node_id} in {zone}", self._client.delete_node, name=f"{self._parent(zone)}/nodes/{node_id}"
        )
        return operation_record(future.operation)

    def update_node_metadata(self, zone: str, node_id: str, metadata: dict[str, str]) -> Operation:
        """Replace the node's whole metadata map (a field mask on a map field replaces all of it)."""
        future = self._call(
            f"update the metadata of node {node_id} in {zone}",
            self._client.update_node,
            node=cloud_tpu.Node(name=f"{self._parent(zone)}/nodes/{node_id}", metadata=metadata),
            update_mask=field_mask_pb2.FieldMask(paths=["metadata"]),
        )
        return operation_record(future.operation)

    def guest_attributes(self, zone: str, node_id: str, query_path: str = "",
                         worker: int | None = None) -> list[GuestAttribute]:
        """The guest attributes the node's workers wrote under `query_path` ("" all, "NS/", "NS/KEY"), by worker."""
        asked = [str(worker)] if worker is not None else []
        response = self._call(
            f"get guest attributes of node {node_id} in {zone}",
            self._client.get_guest_attributes,
            name=f"{self._parent(zone)}/nodes/{node_id}",
            query_path=query_path,
            worker_ids=asked,
        )
        # One entry per worker asked for, in order (every worker when none was named).
        workers = [worker] if worker is not None else list(range(len(response.guest_attributes)))
        return [
            GuestAttribute(worker=number, namespace=item.namespace, key=item.key, value=item.value)
            for number, per_worker in zip(workers, response.guest_attributes)
            for item in per_worker.query_value.items
        ]

    # ------------------------------------------------------------------ queued resources

    def create_queued_resource(self, zone: str, qr_id: str, node_id: str, request: NodeRequest) -> Operation:
        queued = cloud_tpu.QueuedResource(
            tpu=cloud_tpu.QueuedResource.Tpu(
                node_spec=[
                    cloud_tpu.QueuedResource.Tpu.NodeSpec(
                        parent=self._parent(zone), node_id=node_id, node=node_message(request)
                    )
                ]
            )
        )
        if request.valid_for_s is not None:
            # Not granted by then, the API fails it: a forgotten request is never filled hours later.
            queued.queueing_policy = cloud_tpu.QueuedResource.QueueingPolicy(
                valid_until_duration=timedelta(seconds=math.ceil(request.valid_for_s)))
        if request.capacity is Capacity.SPOT:
            queued.spot = cloud_tpu.QueuedResource.Spot()
        elif request.capacity is Capacity.RESERVED:
            queued.guaranteed = cloud_tpu.QueuedResource.Guaranteed()
            if request.reservation:
                queued.reservation_name = (
                    request.reservation
                    if "/" in request.reservation
                    else f"{self._parent(zone)}/reservations/{request.reservation}"
                )
        future = self._call(
            f"create queued resource {qr_id} in {zone}",
            self._client.create_queued_resource,
            parent=self._parent(zone),
            queued_resource_id=qr_id,
            queued_resource=queued,
            request_id=str(uuid.uuid4()),  # the same on every retry: a retried create is not a second create
        )
        return operation_record(future.operation)

    def get_queued_resource(self, zone: str, qr_id: str) -> QueuedResource:
        message = self._call(
            f"get queued resource {qr_id} in {zone}",
            self._client.get_queued_resource,
            name=f"{self._parent(zone)}/queuedResources/{qr_id}",
        )
        return queued_record(message)

    def list_queued_resources(self, zone: str) -> list[QueuedResource]:
        messages = self._call(
            f"list queued resources in {zone}", self._all_pages(self._client.list_queued_resources),
            parent=self._parent(zone), page_size=self.list_page_size,
        )
        return [queued_record(message) for message in messages]

    def delete_queued_resource(self, zone: str, qr_id: str) -> Operation:
        future = self._call(
            f"delete queued resource {qr_id} in {zone}",
            self._client.delete_queued_resource,
            name=f"{self._parent(zone)}/queuedResources/{qr_id}",
            force=True,
            request_id=str(uuid.uuid4()),
        )
        return operation_record(future.operation)

    # ------------------------------------------------------------------ operations

    def get_operation(self, name: str) -> Operation:
        message = self._call(f"get operation {name}", self._get_operation, name=name)
        return operation_record(message)

    def _get_operation(self, *, request: dict[str, Any], retry: Any, timeout: float) -> operations_pb2.Operation:
        return self._client.get_operation(request=operations_pb2.GetOperationRequest(**request), retry=retry, timeout=timeout)

    def wait(self, operation: Operation | str, *, timeout_s: float) -> Operation:
        """Poll an operation every `poll_interval_s` until done; the finished Operation (check `.error`)."""
        name = operation if isinstance(operation, str) else operation.name
        if isinstance(operation, Operation) and operation.done:
            return operation

        def finished() -> Operation | None:
            current = self.get_operation(name)
            return current if current.done else None

        return poll_until(finished, timeout_s=timeout_s, interval_s=self.poll_interval_s, clock=self.clock,
                          on_timeout=lambda: TimeoutExceededError(f"operation {name} still running after {timeout_s:g}s"))
