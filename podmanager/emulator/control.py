"""Controlling a running emulator from another process: fault specs and the Control client.

The emulator (`tpu_api.TpuEmulator`) answers a third gRPC service,
`podmanager.emulator.Control/Call`, whose request and reply are JSON:
`{"method": "fault", "args": {"spec": "capacity:us-central2-b"}}` -> `{"result": null}`.
A fault's text is the one every form of a fault shares (`core/faults.py`, with its defaults:
TIMES 1, -1 until cleared); a `preempt:SLICE` also names its cluster (`"cluster": "demo"`).

    python -m podmanager.emulator.control inject 127.0.0.1:8470 capacity:us-central2-b quota
    python -m podmanager.emulator.control inject 127.0.0.1:8470 --cluster demo preempt:0:30s
    python -m podmanager.emulator.control nodes 127.0.0.1:8470
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import TypeAdapter

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
from podmanager.emulator.rulebook import INSTANCE_CREATE_S, INSTANCE_DELETE_S
from podmanager.emulator.sim.records import Faults

CONTROL_SERVICE = "podmanager.emulator.Control"
# What the reads return, on the wire as JSON: the same records the Cloud TPU client returns.
_NODES = TypeAdapter(list[Node])
_QUEUED = TypeAdapter(list[QueuedResource])
_INSTANCES = TypeAdapter(list[Instance])


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

    def call(self, method: str, **args: Any) -> Any:
        reply = self._call(json.dumps({"method": method, "args": args}).encode(), timeout=self._timeout_s)
        return json.loads(reply)["result"]

    def fault(self, spec: str | FaultKind, *, cluster: str | None = None) -> None:
        """One fault, as text or a `core/faults.py` fault (sent as its text; the emulator parses it)."""
        self.call("fault", spec=spec if isinstance(spec, str) else spec.text(),
                  **({"cluster": cluster} if cluster is not None else {}))

    def inject_create_fault(self, zone: str, kind: str, times: int = DEFAULT_TIMES) -> None:
        self.call("inject_create_fault", zone=zone, kind=kind, times=times)

    def inject_quota(self, quota: str = DEFAULT_QUOTA, times: int = DEFAULT_TIMES) -> None:
        self.call("inject_quota", quota=quota, times=times)

    def inject_transient(self, calls: int) -> None:
        self.call("inject_transient", calls=calls)

    def deny_secret_reads(self, reads: int) -> None:
        self.call("deny_secret_reads", reads=reads)

    def deny_firewall_changes(self, denied: bool = True) -> None:
        self.call("deny_firewall_changes", denied=denied)

    def create_bucket(self, name: str) -> None:
        self.call("create_bucket", name=name)

    def delete_bucket(self, name: str) -> None:
        self.call("delete_bucket", name=name)

    def deny_bucket_iam_changes(self, denied: bool = True) -> None:
        self.call("deny_bucket_iam_changes", denied=denied)

    def clear_faults(self) -> None:
        self.call("clear_faults")

    def preempt_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0) -> None:
        self.call("preempt_slice_later", cluster=cluster, slice_index=slice_index, after_s=after_s, notice_s=notice_s)

    def degrade_slice_later(self, cluster: str, slice_index: int, after_s: float, health: str,
                            for_s: float | None = None) -> None:
        self.call("degrade_slice_later", cluster=cluster, slice_index=slice_index, after_s=after_s, health=health,
                  for_s=for_s)

    def maintain_slice_later(self, cluster: str, slice_index: int, after_s: float, notice_s: float = 0.0,
                             duration_s: float = DEFAULT_MAINTENANCE_S) -> None:
        self.call("maintain_slice_later", cluster=cluster, slice_index=slice_index, after_s=after_s,
                  notice_s=notice_s, duration_s=duration_s)

    def preempt(self, zone: str, node_id: str, notice_s: float = 0.0) -> None:
        self.call("preempt", zone=zone, node_id=node_id, notice_s=notice_s)

    def repair(self, zone: str, node_id: str, duration_s: float) -> None:
        self.call("repair", zone=zone, node_id=node_id, duration_s=duration_s)

    def schedule_maintenance(self, zone: str, node_id: str, after_s: float, duration_s: float) -> None:
        """Announce maintenance (the VM's `upcoming-maintenance`); `after_s` on, REPAIRING for `duration_s`."""
        self.call("schedule_maintenance", zone=zone, node_id=node_id, after_s=after_s, duration_s=duration_s)

    def terminate(self, zone: str, node_id: str) -> None:
        self.call("terminate", zone=zone, node_id=node_id)

    def degrade(self, zone: str, node_id: str, *, state: NodeState | None = None, health: str | None = None,
                for_s: float | None = None) -> None:
        self.call("degrade", zone=zone, node_id=node_id, state=state.value if state else None, health=health,
                  for_s=for_s)

    def configure_cluster(self, cluster: str, create_latency_s: float, delete_latency_s: float,
                          vm_image: str = "controller", boot_delay_s: float = 0.0,
                          instance_create_latency_s: float = INSTANCE_CREATE_S,
                          instance_delete_latency_s: float = INSTANCE_DELETE_S) -> None:
        """A cluster's simulated latencies, VM image and boot delay (its spec's `simulation`): `up`
        hands them over (the laptop's before it makes the controller VM, the controller's at its own)."""
        self.call("configure_cluster", cluster=cluster, create_latency_s=create_latency_s,
                  delete_latency_s=delete_latency_s, vm_image=vm_image, boot_delay_s=boot_delay_s,
                  instance_create_latency_s=instance_create_latency_s,
                  instance_delete_latency_s=instance_delete_latency_s)

    def crash_controller_vm(self, cluster: str) -> str | None:
        """Kill every process of `cluster`'s controller VM and boot it again on the same disk; its
        instance name, None when the cluster has no running controller VM."""
        return self.call("crash_controller_vm", cluster=cluster)

    def halt_controller_vm(self, cluster: str, state: str) -> str | None:
        """Stop (TERMINATED) or suspend (SUSPENDED) `cluster`'s controller VM, as Compute Engine may;
        its instance name, None when the cluster has no running controller VM."""
        return self.call("halt_controller_vm", cluster=cluster, state=state)

    def all_nodes(self) -> list[Node]:
        """Every node in every zone, read without a Cloud TPU API call (no injected fault hits it)."""
        return _NODES.validate_python(self.call("all_nodes"))

    def all_queued_resources(self) -> list[QueuedResource]:
        return _QUEUED.validate_python(self.call("all_queued_resources"))

    def all_instances(self) -> list[Instance]:
        """Every Compute Engine instance (a controller VM), read without an API call."""
        return _INSTANCES.validate_python(self.call("all_instances"))

    def known_zones(self) -> list[str]:
        return list(self.call("known_zones"))

    def pending_faults(self) -> Faults:
        """The faults still waiting to happen, as the simulator records them."""
        return Faults.model_validate(self.call("pending_faults"))

    def version(self) -> int:
        """How many changes the simulated cloud has had: the same number means nothing changed."""
        return int(self.call("version"))

    def requests(self, *methods: str) -> list[dict[str, Any]]:
        """The API requests the emulator received, oldest first, as JSON (only `methods`' if given)."""
        return self.call("requests", **({"methods": list(methods)} if methods else {}))

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
            print(json.dumps(_NODES.dump_python(control.all_nodes(), mode="json"), indent=2))


if __name__ == "__main__":
    main()
