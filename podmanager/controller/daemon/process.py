"""The controller VM's one long-running podmanager process: the channel's server over this
machine's API, under the startup script's restart loop (a systemd unit on Google Cloud).

    python -m podmanager.controller.daemon.process --cluster NAME --port PORT --token-file FILE

At start it makes (or, after a reboot, reuses) the channel's key and certificate for the
address clients reach (`--address`, else the VM's external address from its metadata server),
serves the channel, and publishes the certificate and its boot stage as guest attributes
(`podmanager/channel-cert`, `podmanager/boot` = serving), which the client reads through the
Compute Engine API before it pins the certificate. A cluster this controller already holds (a
reboot, a crash) is brought back as `up` would: the Ray head started again with its address and
token, the hosts rejoin, every unfinished run's supervisor resumes from its record.
SIGTERM or SIGINT stops it, closing the server first."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading
from pathlib import Path

from podmanager.channel import identity as channel_identity
from podmanager.channel.server import ChannelServer
from podmanager.controller.daemon.channel_service import ControllerChannelApi
from podmanager.core.errors import PodmanagerError
from podmanager.vm import boot_status

log = logging.getLogger("podmanager.controller")
CERT_KEY = "channel-cert"
ADDRESS_KEY = "channel-address"  # host:port, as clients reach it
SERVING = "serving"
EXTERNAL_IP = "instance/network-interfaces/0/access-configs/0/external-ip"


def reachable_address(given: str | None) -> str:
    """The address clients connect to: `given`, else the VM's external address."""
    address = given or (boot_status.read_metadata(EXTERNAL_IP) or "").strip()
    if not address:
        raise PodmanagerError("the controller VM has no external address in its metadata, and none was given",
                              hint="Create it with an external IP (podmanager does), or pass --address.")
    return address


def bind_address(address: str) -> str:
    """Where to listen: loopback stays loopback (a dry run: nothing beyond it); a VM's external
    address is its NAT's, reached on every interface (the firewall rule admits only the caller)."""
    return address if ipaddress.ip_address(address).is_loopback else "0.0.0.0"


def serve(cluster: str, port: int, token_file: Path, address: str | None = None) -> None:
    token = token_file.read_text().strip()
    where = reachable_address(address)
    identity = channel_identity.load_or_create(cluster, where, token=token)
    api = ControllerChannelApi()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with ChannelServer(api, identity, port=port, bind=bind_address(where)) as server:
            log.info("serving the channel of %s on %s:%d (certificate for %s)", cluster, server.host, server.port, where)
            if not api.resume(cluster):  # a reboot: the cluster as it was, if this controller holds one
                # The first boot: the client's `up` comes next; Ray and the cluster's code load now.
                threading.Thread(target=warm_imports, name="podmanager-warm-imports", daemon=True).start()
            boot_status.put_attribute(CERT_KEY, identity.cert_pem())
            boot_status.put_attribute(ADDRESS_KEY, f"{where}:{server.port}")
            boot_status.report(SERVING)
            stop.wait()
    finally:
        api.close()


def warm_imports() -> None:
    """Import what the client's first `up` runs (Ray, the cluster's code: a few seconds on a
    small VM) while the client is still reading the boot stage, not after it asked."""
    import ray  # noqa: F401

    import podmanager.cluster.cluster_runtime  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podmanager-controller", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--address", default=None, help="the address clients connect to (default: the VM's external one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        serve(args.cluster, args.port, args.token_file, args.address)
    except PodmanagerError as error:
        log.error("%s%s", error.message, f" ({error.hint})" if error.hint else "")
        boot_status.report(boot_status.ERROR, error.message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
