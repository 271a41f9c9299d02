"""What a TPU VM runs to join the cluster's Ray head as a worker node, one try.

    python -m podmanager.vm.join --head-from-metadata --token-file F [--report-boot]
    python -m podmanager.vm.join --address HEAD [--token-file F] [--deadline S] [--resources JSON]

The startup script runs it under a restart loop (a systemd unit with Restart=always): each
try reads the head's address from the VM's metadata (`podmanager-head`, which `up` updates
when it starts a new head), waits (logging why) until that head answers, and runs
`ray start --address=HEAD --block`, which stays until the node's Ray processes end (the
raylet exits about a minute after losing its head) or the head's address in metadata
changes: then this try ends and the loop starts the next with the new address.
On a real TPU VM Ray reads the slice name, worker id, type and topology from the
metadata server; a simulated host gets the same facts from TPU_* variables (Ray asks
metadata.google.internal, which a simulated VM cannot answer). Options a simulated VM needs
(its TPU chips as a resource, a port and temp dir of its own on a shared machine) come in
PODMANAGER_JOIN_ARGS. The token is read from a file (RAY_AUTH_TOKEN_PATH), never printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time

from podmanager.core.clock import poll_until
from podmanager.core.errors import TimeoutExceededError
from podmanager.vm import auth, boot_status, loopback, tpu_identity
from podmanager.vm.ray_node import HEAD_METADATA_KEY, OBJECT_STORE_BYTES, reachable

log = logging.getLogger("podmanager.vm.join")

EXIT_HEAD_UNREACHABLE = 3
EXIT_VERSION_MISMATCH = 4  # the head refused this host's Ray or Python (check_version_info)
JOIN_ARGS_ENV = "PODMANAGER_JOIN_ARGS"  # a simulated VM's extra options (see the docstring)
HEAD_PATH = f"instance/attributes/{HEAD_METADATA_KEY}"


def ray_start_args(
    address: str,
    *,
    resources: dict[str, float] | None = None,
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
    temp_dir: str | None = None,
    light: bool = False,
    agent_port: int | None = None,
    block: bool = False,
) -> list[str]:
    args = ["start", f"--address={address}", "--disable-usage-stats"]
    if block:
        args.append("--block")
    if agent_port:
        args.append(f"--dashboard-agent-listen-port={agent_port}")
    if light:
        args.append("--include-log-monitor=False")
    if temp_dir:
        args.append(f"--temp-dir={temp_dir}")
    if resources:
        args.append(f"--resources={json.dumps(resources)}")
    if num_cpus is not None:
        args.append(f"--num-cpus={num_cpus}")
    if object_store_memory:
        args.append(f"--object-store-memory={object_store_memory}")
    return args


def wait_for_head(address: str, deadline_s: float, *, interval_s: float = 0.25) -> bool:
    """Poll the head's GCS port until it accepts connections or `deadline_s` passes."""
    start = time.monotonic()
    last_said = [-1e9]

    def head_answers() -> bool:
        if reachable(address):
            return True
        waited = time.monotonic() - start
        if waited - last_said[0] >= 10:
            log.info("waiting for the Ray head at %s: not accepting connections yet (%.0fs of %.0fs)",
                     address, waited, deadline_s)
            last_said[0] = waited
        return False

    try:
        return poll_until(head_answers, timeout_s=deadline_s, interval_s=interval_s)
    except TimeoutExceededError:
        return False


def run_ray_start(args: list[str], address: str, *, report_boot: bool = False) -> int:
    """`ray start ...` in this process (so a loopback head address is used as given). A host
    the head refuses for its Ray or Python version says so as its boot error, with Ray's own
    words: retrying cannot help, and without it the host would sit in `joining` for ever."""
    from ray.scripts.scripts import cli

    with loopback.as_given(address):
        try:
            cli.main(args=args, prog_name="ray", standalone_mode=True)
        except SystemExit as done:
            return int(done.code or 0) if not isinstance(done.code, str) else 1
        except RuntimeError as refused:
            if "Version mismatch" not in str(refused):
                raise
            reason = "; ".join(line.strip() for line in str(refused).splitlines() if line.strip())
            log.error("the Ray head at %s refused this host: %s", address, reason)
            if report_boot:
                boot_status.report("error", f"the Ray head refused this host: {reason}")
            return EXIT_VERSION_MISMATCH
    return 0


def head_from_metadata(deadline_s: float) -> str | None:
    """The head's address as the VM's metadata names it now; None if it names none in time."""
    try:
        return poll_until(lambda: (boot_status.read_metadata(HEAD_PATH) or "").strip() or None,
                          timeout_s=deadline_s, interval_s=1.0)
    except TimeoutExceededError:
        return None


def end_when_head_moves(address: str) -> None:
    """End this try (SIGTERM: Ray stops the node's processes) when metadata names another head,
    so the loop joins the new one at once rather than after the raylet gives up on the old."""

    def watch() -> None:
        while True:
            current = boot_status.read_metadata(HEAD_PATH, timeout_s=70.0, wait_for_change=True)
            if current is not None and current.strip() and current.strip() != address:
                log.info("metadata names a new head (%s); leaving %s", current.strip(), address)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            if current is None:
                time.sleep(1.0)  # the metadata server did not answer: ask again, not in a tight loop

    threading.Thread(target=watch, name="head-watch", daemon=True).start()


def report_when_joined(temp_dir: str | None) -> None:
    """Say `joined` once `ray start` has its node running (it then writes the cluster's address
    into the node's temp dir, which this try cleared first)."""
    from ray._common.utils import get_ray_address_file, reset_ray_address

    reset_ray_address(temp_dir)
    address_file = get_ray_address_file(temp_dir)

    def watch() -> None:
        poll_until(lambda: os.path.exists(address_file), timeout_s=float("inf"), interval_s=0.2)
        boot_status.report(boot_status.JOINED)

    threading.Thread(target=watch, name="joined-watch", daemon=True).start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m podmanager.vm.join", description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", help="the Ray head, ip:port")
    where.add_argument("--head-from-metadata", action="store_true",
                       help=f"read the head's address from this VM's metadata ({HEAD_METADATA_KEY}), stay joined "
                            "until the node ends or the address changes")
    parser.add_argument("--report-boot", action="store_true",
                        help="report the boot stage as guest attributes (joining, joined)")
    parser.add_argument("--token-file", help="file holding the cluster's Ray token (default: RAY_AUTH_TOKEN_PATH)")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds to wait for the head")
    parser.add_argument("--resources", type=json.loads, default=None, help='extra Ray resources, e.g. {"TPU": 4}')
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument(
        "--object-store-memory", type=int, default=None,
        help=f"bytes; default: Ray's (a simulated host uses {OBJECT_STORE_BYTES})",
    )
    parser.add_argument("--temp-dir", help="Ray's temp dir; several hosts on one machine need one each")
    parser.add_argument(
        "--agent-port", type=int, default=None,
        help="the node's dashboard agent HTTP port (default 52365; several hosts on one machine need one each)",
    )
    parser.add_argument(
        "--light", action="store_true",
        help="simulated host sharing a machine: no log monitor of its own (saves ~40 MiB)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s join %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv) + shlex.split(os.environ.get(JOIN_ARGS_ENV, ""))
    opts = parse_args(argv)
    # A node ends its try when its head is gone or moved: Ray's drain on SIGTERM (up to 30 s of
    # asking that head) has no one to ask, and would only delay the rejoin. Read at Ray's import.
    os.environ.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    if opts.token_file:
        os.environ.pop(auth.TOKEN_ENV, None)
        os.environ.update(auth.token_env(opts.token_file))
    elif not (os.environ.get(auth.TOKEN_PATH_ENV) or os.environ.get(auth.TOKEN_ENV)):
        log.warning("no --token-file and no RAY_AUTH_TOKEN_PATH: the head will refuse this host")
    else:
        os.environ.setdefault(auth.MODE_ENV, "token")
    address = opts.address or head_from_metadata(opts.deadline)
    if address is None:
        log.error("the VM's metadata names no Ray head (%s) within %.0fs", HEAD_METADATA_KEY, opts.deadline)
        return EXIT_HEAD_UNREACHABLE
    if opts.head_from_metadata:
        end_when_head_moves(address)
    if opts.report_boot:
        boot_status.report("joining", f"head {address}")
    if not wait_for_head(address, opts.deadline):
        log.error("the Ray head at %s did not answer within %.0fs; giving up", address, opts.deadline)
        return EXIT_HEAD_UNREACHABLE
    if opts.head_from_metadata:
        os.environ.update(tpu_identity.from_metadata())  # Ray reads it at `ray start` (vm/tpu_identity.py)
    identity = {k: os.environ[k] for k in ("TPU_NAME", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE") if k in os.environ}
    log.info("joining the Ray head at %s as %s", address, identity or "this TPU VM")
    if opts.report_boot:
        report_when_joined(opts.temp_dir)
    args = ray_start_args(
        address,
        resources=opts.resources,
        num_cpus=opts.num_cpus,
        object_store_memory=opts.object_store_memory,
        temp_dir=opts.temp_dir,
        light=opts.light,
        agent_port=opts.agent_port,
        block=opts.head_from_metadata,
    )
    return run_ray_start(args, address, report_boot=opts.report_boot)


if __name__ == "__main__":
    sys.exit(main())
