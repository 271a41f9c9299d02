"""Controlling a running emulator from another process: fault specs and the Control client.

The emulator (`sim_server.TpuEmulator`) answers a third gRPC service,
`podmanager.emulator.Control/Call`, whose request and reply are JSON:
`{"method": "fault", "args": {"spec": "capacity:us-central2-b"}}` -> `{"result": null}`.

    python -m podmanager.cloud.sim.control inject 127.0.0.1:8470 capacity:us-central2-b quota
    python -m podmanager.cloud.sim.control nodes 127.0.0.1:8470
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kept light: the CLI imports FAULT_HELP from here on every start
    from podmanager.cloud.sim.cloud import SimCloud

CONTROL_SERVICE = "podmanager.emulator.Control"

FAULT_HELP = (
    "capacity:ZONE[:TIMES] | reservation:ZONE[:TIMES] | preempt-while-creating:ZONE[:TIMES] "
    "(TIMES default -1 = until cleared) | quota[:QUOTA[:TIMES]] (TIMES default 1) | transient[:CALLS] (default 1) | clear"
)


def apply_fault(sim: SimCloud, spec: str) -> None:
    """Apply one fault given as text, e.g. 'capacity:us-central2-b' or 'quota:TPUV4PodPerProjectPerZone:2'."""
    kind, _, rest = spec.strip().partition(":")
    parts = [p for p in rest.split(":")] if rest else []
    try:
        if kind in ("capacity", "reservation", "preempt-while-creating") and 1 <= len(parts) <= 2 and parts[0]:
            sim.inject_create_fault(parts[0], kind, int(parts[1]) if len(parts) == 2 else -1)
            return
        if kind == "quota" and len(parts) <= 2:
            quota = parts[0] if parts and parts[0] else "TPUV4PodPerProjectPerZoneForTPUAPI"
            sim.inject_quota(quota, int(parts[1]) if len(parts) == 2 else 1)
            return
        if kind == "transient" and len(parts) <= 1:
            sim.inject_transient(int(parts[0]) if parts else 1)
            return
        if kind == "clear" and not parts:
            sim.clear_faults()
            return
    except ValueError:
        pass
    raise ValueError(f"bad fault {spec!r}; expected {FAULT_HELP}")


class EmulatorControl:
    """Set faults on a running emulator from any process: `EmulatorControl("127.0.0.1:8470").fault("capacity:z")`."""

    def __init__(self, address: str, *, timeout_s: float = 10.0):
        import grpc

        self._channel = grpc.insecure_channel(address)
        self._call = self._channel.unary_unary(f"/{CONTROL_SERVICE}/Call")
        self._timeout_s = timeout_s

    def call(self, method: str, **args: Any) -> Any:
        reply = self._call(json.dumps({"method": method, "args": args}).encode(), timeout=self._timeout_s)
        return json.loads(reply)["result"]

    def fault(self, spec: str) -> None:
        self.call("fault", spec=spec)

    def inject_create_fault(self, zone: str, kind: str, times: int = 1) -> None:
        self.call("inject_create_fault", zone=zone, kind=kind, times=times)

    def inject_quota(self, quota: str = "TPUV4PodPerProjectPerZoneForTPUAPI", times: int = 1) -> None:
        self.call("inject_quota", quota=quota, times=times)

    def inject_transient(self, calls: int) -> None:
        self.call("inject_transient", calls=calls)

    def clear_faults(self) -> None:
        self.call("clear_faults")

    def preempt(self, zone: str, node_id: str, notice_s: float = 0.0) -> None:
        self.call("preempt", zone=zone, node_id=node_id, notice_s=notice_s)

    def nodes(self) -> list[dict[str, Any]]:
        return self.call("nodes")

    def requests(self, *methods: str) -> list[dict[str, Any]]:
        return self.call("requests", **({"methods": list(methods)} if methods else {}))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> EmulatorControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m podmanager.cloud.sim.control inject 127.0.0.1:8470 capacity:us-central2-b ...`"""
    parser = argparse.ArgumentParser(prog="python -m podmanager.cloud.sim.control")
    sub = parser.add_subparsers(dest="command", required=True)
    inject = sub.add_parser("inject", help="set faults on a running emulator")
    inject.add_argument("address")
    inject.add_argument("faults", nargs="+", help=FAULT_HELP)
    show = sub.add_parser("nodes", help="list the emulator's nodes as JSON")
    show.add_argument("address")
    args = parser.parse_args(argv)
    with EmulatorControl(args.address) as control:
        if args.command == "inject":
            for spec in args.faults:
                control.fault(spec)
        else:
            print(json.dumps(control.nodes(), indent=2))


if __name__ == "__main__":
    main()
