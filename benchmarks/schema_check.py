"""What checking every request (and, in the tests' strict mode, every answer) against Google's
API definitions costs the emulator per request.

    python benchmarks/schema_check.py [--repeats 2000]

Two figures:
- the check alone, in process, for the requests a dry run makes most and its largest bodies
  and answers (a Compute instance insert, a page of 100 nodes): the median microseconds of
  `validation.rest_call` / `grpc_validation.check_message` and of the strict mode's answer check
  (an answer seen for the first time, and one the gate has found good before: a poll's);
- a request served end to end over loopback (REST `networks.get` through Google's Compute
  client, gRPC `ListNodes` through google-cloud-tpu), with the check and with it bypassed:
  the median wall time of one request each way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import grpc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2

from podmanager.core.clock import FakeClock
from podmanager.emulator import discovery, grpc_validation, validation
from podmanager.emulator.schema_gate import Checked, Gate
from podmanager.emulator.server import Emulator
from podmanager.emulator.sim.cloud import SimCloud
from podmanager.emulator.tpu_api import TpuEmulator

PROJECT = "bench"
ZONE = "us-central2-b"
INSTANCE = {
    "name": "pm-bench-controller", "machineType": f"zones/{ZONE}/machineTypes/e2-standard-2",
    "labels": {"podmanager-cluster": "bench", "podmanager-role": "controller"},
    "tags": {"items": ["pm-bench", "pm-bench-controller"]},
    "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
        "sourceImage": "projects/debian-cloud/global/images/family/debian-12", "diskSizeGb": "20"}}],
    "networkInterfaces": [{"network": "global/networks/default", "accessConfigs": [
        {"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}],
    "serviceAccounts": [{"email": "default", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
    "metadata": {"items": [{"key": "startup-script", "value": "#!/bin/bash\n" + "echo boot\n" * 200},
                           {"key": "enable-guest-attributes", "value": "TRUE"}]},
}


def median_us(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(min(50, repeats)):
        fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def node(index: int) -> cloud_tpu.Node:
    return cloud_tpu.Node(
        name=f"projects/{PROJECT}/locations/{ZONE}/nodes/bench-s{index}", accelerator_type="v4-8",
        state=cloud_tpu.Node.State.READY, runtime_version="tpu-ubuntu2204-base",
        labels={"podmanager-cluster": "bench", "podmanager-slice": str(index)},
        metadata={"podmanager-head": "10.0.0.2:6379", "startup-script": "#!/bin/bash\necho boot\n"},
        network_endpoints=[cloud_tpu.NetworkEndpoint(ip_address=f"10.0.{index}.{w}", port=8470) for w in range(2)],
        scheduling_config=cloud_tpu.SchedulingConfig(spot=True), api_version=cloud_tpu.Node.ApiVersion.V2)


def check_alone(repeats: int) -> list[tuple[str, float]]:
    compute = f"/compute/v1/projects/{PROJECT}"
    body = json.dumps(INSTANCE).encode()
    create = cloud_tpu.CreateNodeRequest(parent=f"projects/{PROJECT}/locations/{ZONE}", node_id="bench-s0",
                                         node=node(0))
    pages = [cloud_tpu.ListNodesResponse(nodes=[node(i) for i in range(count)]) for count in (1, 10, 100)]
    gate = Gate(strict=True)
    gate.answer_problem(discovery.method("tpu.projects.locations.nodes.list"),
                        cloud_tpu.ListNodesResponse.pb(pages[-1]).SerializeToString(deterministic=True), lambda: None)
    list_method = discovery.method("tpu.projects.locations.nodes.list")
    instances = {"items": {f"zones/{ZONE}": {"instances": [dict(INSTANCE, name=f"vm-{i}", status="RUNNING")
                                                           for i in range(20)]}}}
    instances_body = json.dumps(instances).encode()
    aggregated = discovery.method("compute.instances.aggregatedList")
    operation = operations_pb2.Operation(name=f"projects/{PROJECT}/locations/{ZONE}/operations/op-1", done=False)
    return [
        ("REST compute.networks.get", median_us(
            lambda: validation.rest_call("GET", f"{compute}/global/networks/default", b""), repeats)),
        ("REST compute.instances.aggregatedList with a filter", median_us(lambda: validation.rest_call(
            "GET", f"{compute}/aggregated/instances?filter=%28labels.podmanager-cluster+%3D+%22bench%22%29", b""),
            repeats)),
        ("REST compute.instances.insert (a 2.5 kB body)", median_us(
            lambda: validation.rest_call("POST", f"{compute}/zones/{ZONE}/instances", body), repeats)),
        ("REST secretmanager versions.access", median_us(lambda: validation.rest_call(
            "GET", f"/v1/projects/{PROJECT}/secrets/pm-bench-ray-token/versions/latest:access", b""), repeats)),
        ("gRPC CreateNode", median_us(
            lambda: grpc_validation.check_message("/google.cloud.tpu.v2.Tpu/CreateNode", create), repeats)),
        ("gRPC GetOperation", median_us(lambda: grpc_validation.check_message(
            "/google.longrunning.Operations/GetOperation", operations_pb2.GetOperationRequest(name=operation.name)),
            repeats)),
        *[(f"strict: a ListNodes answer of {len(p.nodes)} nodes, first seen (to JSON, then checked)", median_us(
            lambda p=p: validation.message_problem(list_method, grpc_validation.message_json(p)),
            max(20, repeats // len(p.nodes)))) for p in pages],
        ("strict: the 100 nodes' answer again (serialized, digest remembered)", median_us(
            lambda: gate.answer_problem(list_method, cloud_tpu.ListNodesResponse.pb(pages[-1]).SerializeToString(
                deterministic=True), lambda: "never"), repeats)),
        ("strict: an aggregatedList answer of 20 instances, first seen (JSON parsed, checked)", median_us(
            lambda: validation.answer_problem(aggregated, 200, instances_body, "application/json"), repeats // 10)),
    ]


def served(repeats: int) -> list[tuple[str, float, float]]:
    """Median ms of one request over loopback with the check and with it bypassed."""
    rows = []
    emulator = Emulator(PROJECT, persist=False)
    port = emulator.serve_rest()
    networks = compute_v1.NetworksClient(credentials=AnonymousCredentials(),
                                         client_options=ClientOptions(api_endpoint=f"http://127.0.0.1:{port}"))
    sim = SimCloud(PROJECT, clock=FakeClock())
    tpu = TpuEmulator(sim)
    server, tpu_port = tpu.serve()
    channel = grpc.insecure_channel(f"127.0.0.1:{tpu_port}")
    client = TpuClient(transport=TpuGrpcTransport(channel=channel))
    calls = {"REST networks.get (google-cloud-compute)": lambda: networks.get(project=PROJECT, network="default"),
             "gRPC ListNodes (google-cloud-tpu)": lambda: client.list_nodes(parent=f"projects/{PROJECT}/locations/{ZONE}")}
    try:
        for name, fn in calls.items():
            checked = median_us(fn, repeats // 4) / 1000
            with bypassed():
                unchecked = median_us(fn, repeats // 4) / 1000
            rows.append((name, checked, unchecked))
    finally:
        channel.close()
        server.stop(grace=None).wait()
        emulator.stop()
    return rows


class bypassed:  # noqa: N801 - used as a statement
    """The gate's checks replaced by nothing, for the figure without them."""

    def __enter__(self) -> None:
        self.saved = (Gate.rest_request, grpc_validation.check_message)
        Gate.rest_request = lambda self, verb, url, body: Checked(discovery.find(verb, url.split("?")[0]), url, None, 0.0)
        grpc_validation.check_message = lambda name, request: (discovery.method(grpc_validation.GRPC_METHODS[name][0]),
                                                               None)

    def __exit__(self, *_: object) -> None:
        Gate.rest_request, grpc_validation.check_message = self.saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    repeats = parser.parse_args().repeats
    started = time.perf_counter()
    discovery.revisions()
    discovery.find("GET", "/")
    print(f"loading the 7 documents and the index: {time.perf_counter() - started:.2f} s (once per emulator)\n")
    print("| the check alone | median (µs) |\n|---|---:|")
    for name, micros in check_alone(repeats):
        print(f"| {name} | {micros:.0f} |")
    print("\n| one request over loopback | checked (ms) | check bypassed (ms) | difference (ms) |\n|---|---:|---:|---:|")
    for name, checked, unchecked in served(repeats):
        print(f"| {name} | {checked:.2f} | {unchecked:.2f} | {checked - unchecked:+.2f} |")


if __name__ == "__main__":
    main()
