"""The simulator served over real gRPC as the Cloud TPU v2 API: the `podmanager emulator`.

`TpuEmulator(sim).serve()` answers `google.cloud.tpu.v2.Tpu` and
`google.longrunning.Operations` exactly as the real endpoint does on the wire, so the
real `google-cloud-tpu` client (and `GcpCloud`) talk to it through an insecure channel:

    TPU_EMULATOR_HOST=127.0.0.1:8470

The same port serves Secret Manager (`sim/secret_manager.py`), so `TokenSecrets` keeps the
cluster's Ray token there as it does in Google Cloud. Of the Tpu service it answers the node
and queued-resource calls, UpdateNode of `metadata` (the only field mask it takes) and
GetGuestAttributes (one `GuestAttributes` per worker asked for, all workers by default, in
worker order; what the simulated VMs wrote, see `SimCloud.set_guest_attribute`).

How it maps the simulator onto the API:
- long-running operations are `operations_pb2.Operation`s named as the simulator names
  them; when done they carry the resulting Node / QueuedResource / Empty in `response`,
  or a `google.rpc.Status` in `error` (8 no capacity, 9 reservation shortfall,
  3 preempted while creating or an invalid request, told apart by the message);
- synchronous errors are gRPC status codes; quota errors are RESOURCE_EXHAUSTED with a
  `google.rpc.QuotaFailure` in the status details, as Google sends them;
- any project is accepted (resources are keyed by zone), so a spec written for a real
  project runs unchanged against the emulator.

A third service, `podmanager.emulator.Control/Call` (JSON in, JSON out), lets another
process inject the simulator's faults and read the request log: its verbs are `control_verbs.py`'s table
(`EmulatorControl`, `python -m podmanager.emulator.control inject ADDRESS FAULT...`).
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.base import (
    Node,
    NodeRequest,
    Operation,
    QueuedResource,
)
from podmanager.cloud.gcp.client import network_record
from podmanager.core.errors import SpecError
from podmanager.core.peer import OwnerOnlyInterceptor, listening_address
from podmanager.core.spec import Capacity
from podmanager.emulator.control import (
    FAULT_HELP,
    EmulatorControl,
    apply_fault,
)
from podmanager.emulator.control_verbs import (
    CONTROL_SERVICE,
    CONTROL_VERSION,
    MethodsAsked,
    verb_named,
)
from podmanager.emulator.grpc_validation import SchemaInterceptor
from podmanager.emulator.secret_manager import SecretManagerEmulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.sim.refusal import Refused

TPU_SERVICE = "google.cloud.tpu.v2.Tpu"
OPERATIONS_SERVICE = "google.longrunning.Operations"

_PATH = re.compile(r"^projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)(?:/(?P<kind>nodes|queuedResources)/(?P<id>[^/]+))?$")

# One table: simulator error type -> (gRPC code of a failed call, code of a failed operation).
_ERROR_CODES: dict[type[cloud_errors.CloudError], tuple[grpc.StatusCode, int]] = {
    cloud_errors.CapacityError: (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),  # 8
    cloud_errors.ReservationShortfallError: (grpc.StatusCode.FAILED_PRECONDITION, code_pb2.FAILED_PRECONDITION),  # 9
    cloud_errors.PreemptedWhileCreatingError: (grpc.StatusCode.ABORTED, code_pb2.INVALID_ARGUMENT),  # op code 3
    cloud_errors.QuotaError: (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),
    cloud_errors.TransientError: (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
    cloud_errors.NotFoundError: (grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND),
    cloud_errors.AlreadyExistsError: (grpc.StatusCode.ALREADY_EXISTS, code_pb2.ALREADY_EXISTS),
    cloud_errors.PermissionDeniedError: (grpc.StatusCode.PERMISSION_DENIED, code_pb2.PERMISSION_DENIED),
    cloud_errors.InvalidRequestError: (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
    cloud_errors.AuthenticationError: (grpc.StatusCode.UNAUTHENTICATED, code_pb2.UNAUTHENTICATED),
}


def error_status(error: cloud_errors.CloudError, *, in_operation: bool) -> status_pb2.Status:
    """The `google.rpc.Status` Google would send for this error (quota: with QuotaFailure)."""
    call_code, op_code = _ERROR_CODES.get(type(error), (grpc.StatusCode.INTERNAL, code_pb2.INTERNAL))
    status = status_pb2.Status(code=op_code if in_operation else call_code.value[0], message=error.message)
    if isinstance(error, cloud_errors.QuotaError):
        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.QuotaFailure(
                violations=[
                    error_details_pb2.QuotaFailure.Violation(
                        subject=error.quota, description=error.message, quota_id=error.quota,
                        api_service="tpu.googleapis.com",
                    )
                ]
            )
        )
        status.details.append(detail)
    return status


# The most resources one page of a list holds, also when more (or no page size) is asked for, as
# Google's APIs coerce a page size: ListNodes of 1,000 slices in one reply is about 10 MB, over
# gRPC's 4 MB limit of a received message.
MAX_PAGE_SIZE = 100

_Named = TypeVar("_Named", Node, QueuedResource)


def _page(found: list[_Named], page_size: int, page_token: str) -> tuple[list[_Named], str]:
    """One page of `found` in name order: those after the token's name (the last name of the
    page before; names, not offsets, so a resource deleted between pages moves nothing), and
    the next page's token ("" on the last page)."""
    if page_size < 0:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"page_size must be 0 or more, not {page_size}")
    size = min(page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
    after = sorted((item for item in found if item.name > page_token), key=lambda item: item.name)
    page = after[:size]
    return page, (page[-1].name if len(after) > size else "")


@dataclass(frozen=True)
class _Path:
    project: str
    zone: str
    kind: str | None
    id: str | None


def _parse(path: str, kind: str | None = None) -> _Path:
    match = _PATH.match(path or "")
    if not match or (kind is not None and match["kind"] != kind) or (kind is None and match["kind"]):
        expected = f"projects/P/locations/Z/{kind}/ID" if kind else "projects/P/locations/Z"
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"malformed resource name {path!r}; expected {expected}")
    return _Path(match["project"], match["zone"], match["kind"], match["id"])


def node_message(project: str, node: Node) -> cloud_tpu.Node:
    """A simulator node as the API returns it."""
    return cloud_tpu.Node.wrap(_node_pb(project, node))


# Built as the raw protobuf message: a list of 1,024 nodes is answered at every look the client
# takes, and proto-plus's wrapper converts each field it is given (a fifth of the emulator's time
# in a 1,024-slice `up`).
_RAW_NODE = cloud_tpu.Node.pb()


def _node_pb(project: str, node: Node) -> Any:
    raw = _RAW_NODE(
        name=f"projects/{project}/locations/{node.zone}/nodes/{node.name}",
        accelerator_type=node.accelerator_type,
        state=cloud_tpu.Node.State[node.state.value],
        health=cloud_tpu.Node.Health[node.health] if node.health else cloud_tpu.Node.Health.HEALTH_UNSPECIFIED,
        runtime_version=node.runtime_version,
        labels=node.labels,
        metadata=node.metadata,
        api_version=cloud_tpu.Node.ApiVersion.V2,
    )
    for ip in node.endpoints:
        raw.network_endpoints.add(ip_address=ip, port=8470)
    raw.scheduling_config.spot = node.capacity is Capacity.SPOT
    raw.scheduling_config.reserved = node.capacity is Capacity.RESERVED
    if node.create_time is not None:
        raw.create_time.FromNanoseconds(int(node.create_time * 1e9))
    network = node.network
    if network is not None:  # the node's network_config, service_account and tags, as asked for
        raw.network_config.network = network.network
        raw.network_config.subnetwork = network.subnetwork
        raw.network_config.enable_external_ips = network.enable_external_ips
        raw.service_account.email = network.service_account
        raw.service_account.scope.extend(network.scopes)
        raw.tags.extend(network.tags)
    return raw


def node_request(node: cloud_tpu.Node, *, reservation: str = "", spot_tier: bool = False,
                 valid_for_s: float | None = None) -> NodeRequest:
    """What the client asked for, as the simulator's request record."""
    if not node.runtime_version:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "node.runtime_version is required")
    scheduling = node.scheduling_config
    if spot_tier or scheduling.spot or scheduling.preemptible:
        capacity = Capacity.SPOT
    elif scheduling.reserved or reservation:
        capacity = Capacity.RESERVED
    else:
        capacity = Capacity.ON_DEMAND
    return NodeRequest(
        accelerator_type=node.accelerator_type,
        runtime_version=node.runtime_version,
        capacity=capacity,
        labels=dict(node.labels),
        metadata=dict(node.metadata),
        reservation=reservation.rsplit("/", 1)[-1] or None,
        valid_for_s=valid_for_s,
        network=network_record(node),  # read as the real client reads a node the API returns
    )


def _valid_for(asked: cloud_tpu.QueuedResource, now: float) -> float | None:
    """Seconds until the queued resource's queueing_policy.valid_until_* runs out (None: never)."""
    if "queueing_policy" not in asked:
        return None
    policy = asked.queueing_policy
    if "valid_until_duration" in policy:
        return policy.valid_until_duration.total_seconds()
    if "valid_until_time" in policy:
        return policy.valid_until_time.timestamp() - now
    return None


class TpuEmulator:
    """Serves one `SimCloud` as the Cloud TPU API, and `secrets` (default: a new, empty one) as
    Secret Manager; keeps a log of every Cloud TPU request received."""

    def __init__(self, sim: SimCloud, secrets: SecretManagerEmulator | None = None, *,
                 controls: dict[str, Callable[[Any], Any]] | None = None):
        """`controls`: handlers of control verbs served beside the simulator's own, by the
        verb's name (`control_verbs.py`; the emulator's VMs and project: `server.py`)."""
        self.sim = sim
        self.controls: dict[str, Callable[[Any], Any]] = {**self._sim_controls(), **(controls or {})}
        self.interceptors: list[grpc.ServerInterceptor] = []  # after the owner's check: the project's IAM
        # Always served: the real path creates the token secret wherever it creates nodes.
        self.secrets = secrets if secrets is not None else SecretManagerEmulator()
        self.secrets.refuses_vm_read = sim.take_secret_denial  # the simulator holds the fault, with the others
        # (method, request message), in arrival order; the newest 10,000 (a long-running emulator is polled).
        self.requests: deque[tuple[str, Any]] = deque(maxlen=10_000)
        self._operations: dict[str, tuple[str, str]] = {}  # operation name -> (verb, resource path)
        self._queued_specs: dict[str, cloud_tpu.QueuedResource] = {}  # path -> what was asked for
        self._request_ids: dict[str, str] = {}  # request_id -> the operation it started (idempotent retries)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ serving

    def serve(self, host: str = "127.0.0.1", port: int = 0, *, max_workers: int = 8) -> tuple[grpc.Server, int]:
        """Start serving on host:port (0 picks a free port); returns the started server and its port."""
        interceptor = OwnerOnlyInterceptor()  # only the owner's processes: Secret Manager holds the Ray token
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tpu-emulator"),
                             interceptors=[interceptor, *self.interceptors, SchemaInterceptor()])  # IAM, then Google's definitions
        server.add_generic_rpc_handlers(self.handlers())
        try:
            bound = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # grpc raises this when the port is taken
            bound = 0
        if bound == 0:
            raise OSError(f"cannot listen on {host}:{port}: the address is in use or not local")
        interceptor.server = listening_address(host, bound)
        server.start()
        return server, bound

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        tpu = {
            "CreateNode": (self.create_node, cloud_tpu.CreateNodeRequest, None),
            "GetNode": (self.get_node, cloud_tpu.GetNodeRequest, cloud_tpu.Node),
            "ListNodes": (self.list_nodes, cloud_tpu.ListNodesRequest, cloud_tpu.ListNodesResponse),
            "DeleteNode": (self.delete_node, cloud_tpu.DeleteNodeRequest, None),
            "UpdateNode": (self.update_node, cloud_tpu.UpdateNodeRequest, None),
            "GetGuestAttributes": (
                self.get_guest_attributes, cloud_tpu.GetGuestAttributesRequest, cloud_tpu.GetGuestAttributesResponse,
            ),
            "CreateQueuedResource": (self.create_queued_resource, cloud_tpu.CreateQueuedResourceRequest, None),
            "GetQueuedResource": (self.get_queued_resource, cloud_tpu.GetQueuedResourceRequest, cloud_tpu.QueuedResource),
            "ListQueuedResources": (
                self.list_queued_resources, cloud_tpu.ListQueuedResourcesRequest, cloud_tpu.ListQueuedResourcesResponse,
            ),
            "DeleteQueuedResource": (self.delete_queued_resource, cloud_tpu.DeleteQueuedResourceRequest, None),
        }
        tpu_handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self._wrap(name, fn),
                request_deserializer=request_type.deserialize,
                response_serializer=response_type.serialize if response_type else operations_pb2.Operation.SerializeToString,
            )
            for name, (fn, request_type, response_type) in tpu.items()
        }
        operations_handlers = {
            "GetOperation": grpc.unary_unary_rpc_method_handler(
                self._wrap("GetOperation", self.get_operation),
                request_deserializer=operations_pb2.GetOperationRequest.FromString,
                response_serializer=operations_pb2.Operation.SerializeToString,
            )
        }
        control_handlers = {"Call": grpc.unary_unary_rpc_method_handler(self._control)}  # raw bytes both ways
        return (
            grpc.method_handlers_generic_handler(TPU_SERVICE, tpu_handlers),
            grpc.method_handlers_generic_handler(OPERATIONS_SERVICE, operations_handlers),
            grpc.method_handlers_generic_handler(CONTROL_SERVICE, control_handlers),
            *self.secrets.handlers(),
        )

    def _wrap(self, method: str, fn: Callable[[Any], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            with self._lock:
                self.requests.append((method, request))
            try:
                return fn(request)
            except cloud_errors.CloudError as error:
                context.abort_with_status(rpc_status.to_status(error_status(error, in_operation=False)))
            except Refused as rejected:
                context.abort(rejected.code, rejected.message)

        return handler

    def requests_of(self, method: str) -> list[Any]:
        with self._lock:
            return [request for name, request in self.requests if name == method]

    # ------------------------------------------------------------------ operations

    def _operation(self, name: str, state: Operation | None = None) -> operations_pb2.Operation:
        """The API's view of an operation; `state` when the simulator just returned it (one sim call per API call)."""
        state = state or self.sim.get_operation(name)
        verb, path = self._operations.get(name, ("", ""))
        message = operations_pb2.Operation(name=name, done=state.done)
        message.metadata.Pack(
            cloud_tpu.OperationMetadata.pb(cloud_tpu.OperationMetadata(target=path, verb=verb, api_version="v2"))
        )
        if not state.done:
            return message
        if state.error is not None:
            message.error.CopyFrom(error_status(state.error, in_operation=True))
            return message
        message.response.Pack(self._result(verb, path))
        return message

    def _result(self, verb: str, path: str) -> Any:
        """What a finished operation carries: the node, the queued resource as asked for, or Empty.

        Read without a second simulated API call, so an injected fault hits one call only."""
        if verb == "delete" or not path:
            return empty_pb2.Empty()
        where = _parse(path, path.split("/")[4])
        if where.kind == "queuedResources":
            with self._lock:
                asked = self._queued_specs.get(path)
            queued = cloud_tpu.QueuedResource(asked) if asked is not None else cloud_tpu.QueuedResource()
            queued.name = path
            return cloud_tpu.QueuedResource.pb(queued)
        record = self.sim.node_record(where.zone, where.id or "")
        if record is not None:
            return _node_pb(where.project, record.to_node())
        return cloud_tpu.Node.pb(cloud_tpu.Node(name=path))  # gone since; the operation still succeeded

    def _started(self, operation: Operation, verb: str, path: str) -> operations_pb2.Operation:
        self._operations[operation.name] = (verb, path)
        return self._operation(operation.name, operation)

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        return self._operation(request.name)

    # ------------------------------------------------------------------ nodes

    def create_node(self, request: cloud_tpu.CreateNodeRequest) -> operations_pb2.Operation:
        where = _parse(request.parent)
        if not request.node_id:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "node_id is required")
        operation = self.sim.create_node(where.zone, request.node_id, node_request(request.node))
        return self._started(operation, "create", f"{request.parent}/nodes/{request.node_id}")

    def get_node(self, request: cloud_tpu.GetNodeRequest) -> cloud_tpu.Node:
        where = _parse(request.name, "nodes")
        return node_message(where.project, self.sim.get_node(where.zone, where.id))

    def list_nodes(self, request: cloud_tpu.ListNodesRequest) -> cloud_tpu.ListNodesResponse:
        where = _parse(request.parent)
        nodes, next_token = _page(self.sim.list_nodes(where.zone), request.page_size, request.page_token)
        return cloud_tpu.ListNodesResponse.wrap(cloud_tpu.ListNodesResponse.pb()(
            nodes=[_node_pb(where.project, n) for n in nodes], next_page_token=next_token))

    def delete_node(self, request: cloud_tpu.DeleteNodeRequest) -> operations_pb2.Operation:
        where = _parse(request.name, "nodes")
        operation = self.sim.delete_node(where.zone, where.id)
        return self._started(operation, "delete", request.name)

    def update_node(self, request: cloud_tpu.UpdateNodeRequest) -> operations_pb2.Operation:
        where = _parse(request.node.name, "nodes")
        paths = list(request.update_mask.paths)
        if not paths:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "update_mask is required")
        unsupported = [path for path in paths if path != "metadata"]
        if unsupported:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                         f"update_mask: field {', '.join(unsupported)} cannot be updated in the emulator "
                         "(only metadata)")
        operation = self.sim.update_node_metadata(where.zone, where.id, dict(request.node.metadata))
        return self._started(operation, "update", request.node.name)

    def get_guest_attributes(self, request: cloud_tpu.GetGuestAttributesRequest
                             ) -> cloud_tpu.GetGuestAttributesResponse:
        where = _parse(request.name, "nodes")
        asked = list(request.worker_ids)
        if not all(worker.isdigit() for worker in asked):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"worker_ids must be 0-based worker numbers: {asked}")
        found = self.sim.guest_attributes(where.zone, where.id, request.query_path)  # the one API call
        # How many workers, read without a second simulated API call (as `_result` does).
        hosts = next((len(n.endpoints) for n in self.sim.all_nodes() if (n.zone, n.name) == (where.zone, where.id)), 0)
        workers = [int(worker) for worker in asked] or list(range(hosts))
        if any(worker >= hosts for worker in workers):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                         f"worker_ids {workers}: node {where.id} has workers 0 to {hosts - 1}")
        # One GuestAttributes per worker asked for, in that order; each says what was queried.
        return cloud_tpu.GetGuestAttributesResponse(guest_attributes=[
            cloud_tpu.GuestAttributes(
                query_path=request.query_path,
                query_value=cloud_tpu.GuestAttributesValue(items=[
                    cloud_tpu.GuestAttributesEntry(namespace=a.namespace, key=a.key, value=a.value)
                    for a in found if a.worker == worker
                ]),
            )
            for worker in workers
        ])

    # ------------------------------------------------------------------ queued resources

    def _find_queued(self, where: _Path) -> QueuedResource:
        for queued in self.sim.list_queued_resources(where.zone):
            if queued.name == where.id:
                return queued
        raise cloud_errors.NotFoundError(f"queued resource {where.id} not found in {where.zone}")

    def _queued_message(self, where: _Path, queued: QueuedResource) -> cloud_tpu.QueuedResource:
        path = f"projects/{where.project}/locations/{where.zone}/queuedResources/{queued.name}"
        message = cloud_tpu.QueuedResource()
        asked = self._queued_specs.get(path)
        if asked is not None:
            cloud_tpu.QueuedResource.copy_from(message, asked)
        else:
            message.tpu = cloud_tpu.QueuedResource.Tpu(
                node_spec=[
                    cloud_tpu.QueuedResource.Tpu.NodeSpec(
                        parent=f"projects/{where.project}/locations/{where.zone}",
                        node_id=queued.node_name,
                        node=cloud_tpu.Node(labels=queued.labels),
                    )
                ]
            )
        message.name = path
        message.state = cloud_tpu.QueuedResourceState(state=cloud_tpu.QueuedResourceState.State[queued.state.value])
        return message

    def _replayed(self, request_id: str) -> operations_pb2.Operation | None:
        """The operation an earlier request with this request_id started, as the API answers a retry."""
        name = self._request_ids.get(request_id) if request_id else None
        return self._operation(name) if name else None

    def _remember(self, request_id: str, operation: operations_pb2.Operation) -> operations_pb2.Operation:
        if request_id:
            with self._lock:
                self._request_ids[request_id] = operation.name
        return operation

    def create_queued_resource(self, request: cloud_tpu.CreateQueuedResourceRequest) -> operations_pb2.Operation:
        where = _parse(request.parent)
        replayed = self._replayed(request.request_id)
        if replayed is not None:
            return replayed
        asked = request.queued_resource
        specs = list(asked.tpu.node_spec)
        if not request.queued_resource_id or len(specs) != 1 or not specs[0].node_id:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "queued_resource_id and exactly one tpu.node_spec with a node_id are required (the emulator "
                "does not simulate multislice_params)",
            )
        spec = specs[0]
        node_where = _parse(spec.parent)
        if node_where.zone != where.zone:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "node_spec.parent must be in the queued resource's zone")
        request_record = node_request(spec.node, reservation=asked.reservation_name, spot_tier="spot" in asked,
                                      valid_for_s=_valid_for(asked, self.sim.clock.now()))
        operation = self.sim.create_queued_resource(where.zone, request.queued_resource_id, spec.node_id, request_record)
        path = f"{request.parent}/queuedResources/{request.queued_resource_id}"
        with self._lock:
            self._queued_specs[path] = asked
        return self._remember(request.request_id, self._started(operation, "create", path))

    def get_queued_resource(self, request: cloud_tpu.GetQueuedResourceRequest) -> cloud_tpu.QueuedResource:
        where = _parse(request.name, "queuedResources")
        return self._queued_message(where, self._find_queued(where))

    def list_queued_resources(self, request: cloud_tpu.ListQueuedResourcesRequest) -> cloud_tpu.ListQueuedResourcesResponse:
        where = _parse(request.parent)
        queued, next_token = _page(self.sim.list_queued_resources(where.zone), request.page_size, request.page_token)
        return cloud_tpu.ListQueuedResourcesResponse(
            queued_resources=[self._queued_message(where, q) for q in queued], next_page_token=next_token)

    def delete_queued_resource(self, request: cloud_tpu.DeleteQueuedResourceRequest) -> operations_pb2.Operation:
        where = _parse(request.name, "queuedResources")
        replayed = self._replayed(request.request_id)
        if replayed is not None:
            return replayed
        if not request.force:
            queued = self._find_queued(where)
            if any((n.zone, n.name) == (where.zone, queued.node_name) for n in self.sim.all_nodes()):
                raise Refused(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"queued resource {where.id} still has node {queued.node_name}; delete it first or use force",
                )
        operation = self.sim.delete_queued_resource(where.zone, where.id)
        return self._remember(request.request_id, self._started(operation, "delete", request.name))

    # ------------------------------------------------------------------ control

    def _control(self, payload: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            call = json.loads(payload)
            if call.get("version", CONTROL_VERSION) != CONTROL_VERSION:
                raise ValueError(f"control version {call['version']}; this emulator speaks version {CONTROL_VERSION}")
            result = self.control(call["method"], **call.get("args", {}))
        except (KeyError, TypeError, ValueError, SpecError, cloud_errors.CloudError) as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(error).__name__}: {error}")
        return json.dumps({"result": result}).encode()

    def control(self, method: str, **args: Any) -> Any:
        """Run one control verb (a fault injection on the simulator, or a read of its state): its
        request checked and its reply written as JSON by the verb's entry (`control_verbs.py`)."""
        verb = verb_named(method)
        handler = self.controls.get(verb.name)
        if handler is None:  # an emulator's own verb, asked of a bare TpuEmulator (a test's)
            raise ValueError(f"control method {method!r} is not served here; served: {', '.join(sorted(self.controls))}")
        return verb.reply_json(handler(verb.request.model_validate(args)))

    # The control verbs that are the simulator's method of the same name, called with the
    # request's fields (a verb without fields: its request is empty).
    _SIM_METHODS = (
        "inject_create_fault", "inject_quota", "inject_transient", "deny_secret_reads", "deny_firewall_changes",
        "create_bucket", "delete_bucket", "deny_bucket_iam_changes", "clear_faults", "preempt_slice_later",
        "degrade_slice_later", "maintain_slice_later", "preempt", "repair", "schedule_maintenance", "terminate",
        "degrade", "configure_cluster", "all_nodes", "all_queued_resources", "all_instances", "known_zones",
        "version", "pending_faults",
    )

    def _sim_controls(self) -> dict[str, Callable[[Any], Any]]:
        """The handler of each verb the simulator answers."""
        def forwarded(method: Callable[..., Any]) -> Callable[[Any], Any]:
            return lambda request: method(**dict(request))

        sim = self.sim
        return {
            **{name: forwarded(getattr(sim, name)) for name in self._SIM_METHODS},
            "fault": lambda r: apply_fault(sim, r.spec, cluster=r.cluster),
            "requests": self._logged_requests,
        }

    def _logged_requests(self, asked: MethodsAsked) -> list[dict[str, Any]]:
        with self._lock:
            log = list(self.requests)
        return [{"method": name, "request": _to_json(request)} for name, request in log
                if asked.methods is None or name in asked.methods]


def _to_json(request: Any) -> dict[str, Any]:
    """A logged request as JSON: a gRPC call's message, or a REST call's parameters and body (already JSON)."""
    if isinstance(request, dict):
        return request
    from google.protobuf import json_format

    message = type(request).pb(request) if hasattr(type(request), "pb") else request
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _node_json(node: Node) -> dict[str, Any]:
    return {
        "name": node.name, "zone": node.zone, "accelerator_type": node.accelerator_type, "state": node.state.value,
        "capacity": node.capacity.value, "labels": node.labels, "metadata_keys": sorted(node.metadata),
    }


def serve(sim: SimCloud, host: str = "127.0.0.1", port: int = 0) -> tuple[grpc.Server, int]:
    """Serve `sim` as the Cloud TPU API on host:port (0: any free port); returns (server, port)."""
    return TpuEmulator(sim).serve(host, port)


__all__ = ["FAULT_HELP", "EmulatorControl", "TpuEmulator", "apply_fault", "error_status", "serve"]
