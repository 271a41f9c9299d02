"""What a TPU VM runs at boot: join the cluster's Ray head as a worker node.

    python -m podmanager.hosts.join --address HEAD [--token-file F] [--deadline S] [--resources JSON]

Waits (logging why) until the head answers, then runs `ray start --address=HEAD`.
On a real TPU VM Ray reads the slice name, worker id, type and topology from the
metadata server; a simulated host gets the same facts from TPU_* variables set by
`vms`. The token is read from a file (RAY_AUTH_TOKEN_PATH), never printed.
`ray start` daemonizes the raylet and agents; this process exits once they run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from podmanager.core.clock import poll_until
from podmanager.core.errors import TimeoutExceededError
from podmanager.hosts import auth, loopback
from podmanager.hosts.head import OBJECT_STORE_BYTES, reachable

log = logging.getLogger("podmanager.hosts.join")

EXIT_HEAD_UNREACHABLE = 3


def ray_start_args(
    address: str,
    *,
    resources: dict[str, float] | None = None,
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
    temp_dir: str | None = None,
    light: bool = False,
    agent_port: int | None = None,
) -> list[str]:
    args = ["start", f"--address={address}", "--disable-usage-stats"]
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


def wait_for_head(address: str, deadline_s: float, *, interval_s: float = 1.0) -> bool:
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


def run_ray_start(args: list[str], address: str) -> int:
    """`ray start ...` in this process (so a loopback head address is used as given)."""
    from ray.scripts.scripts import cli

    with loopback.as_given(address):
        try:
            cli.main(args=args, prog_name="ray", standalone_mode=True)
        except SystemExit as done:
            return int(done.code or 0) if not isinstance(done.code, str) else 1
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m podmanager.hosts.join", description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True, help="the Ray head, ip:port")
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
    opts = parse_args(argv)
    if opts.token_file:
        os.environ.pop(auth.TOKEN_ENV, None)
        os.environ.update(auth.token_env(opts.token_file))
    elif not (os.environ.get(auth.TOKEN_PATH_ENV) or os.environ.get(auth.TOKEN_ENV)):
        log.warning("no --token-file and no RAY_AUTH_TOKEN_PATH: the head will refuse this host")
    else:
        os.environ.setdefault(auth.MODE_ENV, "token")
    if not wait_for_head(opts.address, opts.deadline):
        log.error("the Ray head at %s did not answer within %.0fs; giving up", opts.address, opts.deadline)
        return EXIT_HEAD_UNREACHABLE
    identity = {k: os.environ[k] for k in ("TPU_NAME", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE") if k in os.environ}
    log.info("joining the Ray head at %s as %s", opts.address, identity or "this TPU VM")
    args = ray_start_args(
        opts.address,
        resources=opts.resources,
        num_cpus=opts.num_cpus,
        object_store_memory=opts.object_store_memory,
        temp_dir=opts.temp_dir,
        light=opts.light,
        agent_port=opts.agent_port,
    )
    return run_ray_start(args, opts.address)


if __name__ == "__main__":
    sys.exit(main())
