"""Controlling a running emulator from another process: fault specs and the Control client.

The emulator (`tpu_api.TpuEmulator`) answers a third gRPC service,
`podmanager.emulator.Control/Call`; its verbs, each with a typed request and reply, are
declared once in `control_verbs.py`, which this client and the server's dispatch both read.
A fault's text is the one every form of a fault shares (`core/faults.py`, with its defaults:
TIMES 1, -1 until cleared); a `preempt:SLICE` also names its cluster (`"cluster": "demo"`).

    python -m podmanager.emulator.control inject 127.0.0.1:8470 capacity:us-central2-b quota
    python -m podmanager.emulator.control inject 127.0.0.1:8470 --cluster demo preempt:0:30s
    python -m podmanager.emulator.control nodes 127.0.0.1:8470
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TypeVar

from podmanager.cloud.base import Node, NodeState, QueuedResource
from podmanager.cloud.instances import Instance
from podmanager.core.errors import SpecError
from podmanager.core.fault_text import (
    DEFAULT_MAINTENANCE_S,
    DEFAULT_QUOTA,
    DEFAULT_TIMES,
    FAULT_HELP,
)
from podmanager.core.faults import FaultKind, FaultTarget, parse
from podmanager.core.spec import DEFAULT_VM_IMAGE
from podmanager.emulator import control_verbs as verbs
from podmanager.emulator.control_verbs import (
    CONTROL_SERVICE,
    CONTROL_VERSION,
    ControlRequest,
    ControlVerb,
    IamCall,
    LoggedRequest,
)
from podmanager.emulator.iam.project import ProjectPolicy
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.records import Faults

__all__ = ["CONTROL_SERVICE", "EmulatorControl", "apply_fault", "main"]

Request = TypeVar("Request", bound=ControlRequest)
Reply = TypeVar("Reply")


def apply_fault(sim: FaultTarget, spec: str | FaultKind, *, cluster: str | None = None, flag: str = "fault") -> None:
    """Apply one fault given as text ('capacity:us-central2-b', 'quota:TPUV4PodPerProjectPerZone:2';
    see `core/faults.py`) or as a fault; `cluster` names the cluster a `preempt:SLICE` is of.
    A SpecError names `flag`, the text and the form to write."""
    fault = parse(spec, flag=flag) if isinstance(spec, str) else spec
    fault.apply(sim, cluster=cluster)


class EmulatorControl:
    """Set faults on a running emulator and read its state from any process:
    `EmulatorControl("127.0.0.1:8470").fault("capacity:z")`. Implements `core.faults.FaultTarget`,
    so `fault.apply(control)` works too."""

    def __init__(self, address: str, *, timeout_s: float = 10.0):
        import grpc

        self.address = address
        self._channel = grpc.insecure_channel(address)
        self._call = self._channel.unary_unary(f"/{CONTROL_SERVICE}/Call")
        self._timeout_s = timeout_s

    def ask(self, verb: ControlVerb[Request, Reply], request: Request) -> Reply:
        """One verb's request sent; its reply, typed by the verb."""
        return verb.read_reply(self._send(verb.name, request.model_dump(mode="json")))

    def call(self, method: str, **args: Any) -> Any:
        """A verb by its name, its reply as the wire's JSON (for a script or test that reads it as such)."""
        verb = verbs.verb_named(method)
        return self._send(verb.name, verb.request.model_validate(args).model_dump(mode="json"))

    def _send(self, method: str, args: dict[str, Any]) -> Any:
        payload = {"version": CONTROL_VERSION, "method": method, "args": args}
        reply = self._call(json.dumps(payload).encode(), timeout=self._timeout_s)
        return json.loads(reply)["result"]

    def fault(self, spec: str | FaultKind, *, cluster: str | None = None) -> None:
        """One fault, as text or a `core/faults.py` fault (sent as its text; the emulator parses it)."""
        self.ask(verbs.FAULT, verbs.FaultText(spec=spec if isinstance(spec, str) else spec.text(), cluster=cluster))

    def inject_create_fault(self, zone: str, kind: str, times: int = DEFAULT_TIMES) -> None:
        self.ask(verbs.INJECT_CREATE_FAULT, verbs.CreateFault(zone=zone, kind=kind, times=times))

    def inject_quota(self, quota: str = DEFAULT_QUOTA, times: int = DEFAULT_TIMES) -> None:
        self.ask(verbs.INJECT_QUOTA, verbs.QuotaFault(quota=quota, times=times))

    def inject_transient(self, calls: int) -> None:
        self.ask(verbs.INJECT_TRANSIENT, verbs.TransientFault(calls=calls))

    def deny_secret_reads(self, reads: int) -> None:
        self.ask(verbs.DENY_SECRET_READS, verbs.SecretReadsDenied(reads=reads))

    def deny_firewall_changes(self, denied: bool = True) -> None:
        self.ask(verbs.DENY_FIREWALL_CHANGES, verbs.Denial(denied=denied))

    def create_bucket(self, name: str) -> None:
        self.ask(verbs.CREATE_BUCKET, verbs.BucketName(name=name))

    def delete_bucket(self, name: str) -> None:
        self.ask(verbs.DELETE_BUCKET, verbs.BucketName(name=name))

    def deny_bucket_iam_changes(self, denied: bool = True) -> None:
        self.ask(verbs.DENY_BUCKET_IAM_CHANGES, verbs.Denial(denied=denied))

    def clear_faults(self) -> None:
        self.ask(verbs.CLEAR_FAULTS, verbs.NoArgs())

    def preempt_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0) -> None:
        self.ask(verbs.PREEMPT_SLICE_LATER, verbs.SlicePreemptLater(cluster=cluster, slice_index=slice_index,
                                                                    after_s=after_s, notice_s=notice_s))

    def degrade_slice_later(self, cluster: str, slice_index: int, after_s: float, health: str,
                            for_s: float | None = None) -> None:
        self.ask(verbs.DEGRADE_SLICE_LATER, verbs.SliceDegradeLater(cluster=cluster, slice_index=slice_index,
                                                                    after_s=after_s, health=health, for_s=for_s))

    def maintain_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0,
                             duration_s: float = DEFAULT_MAINTENANCE_S) -> None:
        self.ask(verbs.MAINTAIN_SLICE_LATER, verbs.SliceMaintainLater(
            cluster=cluster, slice_index=slice_index, after_s=after_s, notice_s=notice_s, duration_s=duration_s))

    def preempt(self, zone: str, node_id: str, notice_s: float = 0.0) -> None:
        self.ask(verbs.PREEMPT, verbs.NodePreempt(zone=zone, node_id=node_id, notice_s=notice_s))

    def repair(self, zone: str, node_id: str, duration_s: float) -> None:
        self.ask(verbs.REPAIR, verbs.NodeRepair(zone=zone, node_id=node_id, duration_s=duration_s))

    def schedule_maintenance(self, zone: str, node_id: str, after_s: float, duration_s: float) -> None:
        """Announce maintenance (the VM's `upcoming-maintenance`); `after_s` on, REPAIRING for `duration_s`."""
        self.ask(verbs.SCHEDULE_MAINTENANCE, verbs.NodeMaintenance(zone=zone, node_id=node_id, after_s=after_s,
                                                                   duration_s=duration_s))

    def terminate(self, zone: str, node_id: str) -> None:
        self.ask(verbs.TERMINATE, verbs.NodeName(zone=zone, node_id=node_id))

    def degrade(self, zone: str, node_id: str, *, state: NodeState | None = None, health: str | None = None,
                for_s: float | None = None) -> None:
        self.ask(verbs.DEGRADE, verbs.NodeDegrade(zone=zone, node_id=node_id, state=state, health=health, for_s=for_s))

    def configure_cluster(self, cluster: str, create_latency_s: float, delete_latency_s: float,
                          vm_image: str = DEFAULT_VM_IMAGE, boot_delay_s: float = 0.0,
                          instance_create_latency_s: float = INSTANCE_CREATE_S,
                          instance_delete_latency_s: float = INSTANCE_DELETE_S) -> None:
        """A cluster's simulated latencies, VM image and boot delay (its spec's `simulation`): `up`
        hands them over (the laptop's before it makes the controller VM, the controller's at its own)."""
        self.ask(verbs.CONFIGURE_CLUSTER, verbs.ClusterSimulation(
            cluster=cluster, create_latency_s=create_latency_s, delete_latency_s=delete_latency_s,
            vm_image=vm_image, boot_delay_s=boot_delay_s, instance_create_latency_s=instance_create_latency_s,
            instance_delete_latency_s=instance_delete_latency_s))

    def crash_controller_vm(self, cluster: str) -> str | None:
        """Kill every process of `cluster`'s controller VM and boot it again on the same disk; its
        instance name, None when the cluster has no running controller VM."""
        return self.ask(verbs.CRASH_CONTROLLER_VM, verbs.ClusterName(cluster=cluster))

    def halt_controller_vm(self, cluster: str, state: str) -> str | None:
        """Stop (TERMINATED) or suspend (SUSPENDED) `cluster`'s controller VM, as Compute Engine may;
        its instance name, None when the cluster has no running controller VM."""
        return self.ask(verbs.HALT_CONTROLLER_VM, verbs.ControllerHalt(cluster=cluster, state=state))

    def move_laptop(self) -> str:
        """The namespace mode: this machine's public address on the simulated internet (its home
        router's) changes to another; the new one."""
        return self.ask(verbs.MOVE_LAPTOP, verbs.NoArgs())

    def project(self, *, kind: str | None = None, grant: str | None = None, revoke: str | None = None,
                member: str | None = None, enable: list[str] | None = None) -> ProjectPolicy:
        """What the console would do to the project: start it again as `kind`, grant or revoke a
        role of `member`, enable APIs; the project's policy and enabled APIs as they are then."""
        return self.ask(verbs.PROJECT, verbs.ProjectChange(kind=kind, grant=grant, revoke=revoke, member=member,
                                                           enable=enable))

    def iam_calls(self, *methods: str) -> list[IamCall]:
        """The calls the project's IAM checked, oldest first (only `methods`' if given)."""
        return self.ask(verbs.IAM_CALLS, verbs.MethodsAsked(methods=list(methods) if methods else None))

    def all_nodes(self) -> list[Node]:
        """Every node in every zone, read without a Cloud TPU API call (no injected fault hits it)."""
        return self.ask(verbs.ALL_NODES, verbs.NoArgs())

    def all_queued_resources(self) -> list[QueuedResource]:
        return self.ask(verbs.ALL_QUEUED_RESOURCES, verbs.NoArgs())

    def all_instances(self) -> list[Instance]:
        """Every Compute Engine instance (a controller VM), read without an API call."""
        return self.ask(verbs.ALL_INSTANCES, verbs.NoArgs())

    def known_zones(self) -> list[str]:
        return self.ask(verbs.KNOWN_ZONES, verbs.NoArgs())

    def pending_faults(self) -> Faults:
        """The faults still waiting to happen, as the simulator records them."""
        return self.ask(verbs.PENDING_FAULTS, verbs.NoArgs())

    def version(self) -> int:
        """How many changes the simulated cloud has had: the same number means nothing changed."""
        return self.ask(verbs.VERSION, verbs.NoArgs())

    def requests(self, *methods: str) -> list[LoggedRequest]:
        """The API requests the emulator received, oldest first (only `methods`' if given)."""
        return self.ask(verbs.REQUESTS, verbs.MethodsAsked(methods=list(methods) if methods else None))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> EmulatorControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m podmanager.emulator.control inject 127.0.0.1:8470 capacity:us-central2-b ...`"""
    parser = argparse.ArgumentParser(prog="python -m podmanager.emulator.control")
    sub = parser.add_subparsers(dest="command", required=True)
    inject = sub.add_parser("inject", help="set faults on a running emulator")
    inject.add_argument("address")
    inject.add_argument("faults", nargs="+", help=FAULT_HELP)
    inject.add_argument("--cluster", help="the cluster a preempt:SLICE fault is of")
    show = sub.add_parser("nodes", help="list the emulator's nodes as JSON")
    show.add_argument("address")
    args = parser.parse_args(argv)
    try:  # every fault checked before any is set
        faults = [parse(text, flag="FAULT") for text in args.faults] if args.command == "inject" else []
    except SpecError as bad:
        parser.error(str(bad))  # exit 2
    with EmulatorControl(args.address) as control:
        if args.command == "inject":
            for fault in faults:
                control.fault(fault, cluster=args.cluster)
        else:
            print(json.dumps(verbs.ALL_NODES.reply_json(control.all_nodes()), indent=2))


if __name__ == "__main__":
    main()
