"""A simulated TPU VM's boot to `joining`, as the startup script runs it from a new root folder:
with the controller's environment linked (`simulation.vm_image: controller`, the shortcut) and
installing everything at boot (`bare`: uv without pip, the Python, the staged wheel of this
podmanager, Ray, JAX and the lock, from the package index). The install boots share this
machine's VM cache (`vms.shared_uv_cache`: uv's cache and the uv wheel), as every simulated VM
does: the first install boot finds it as it is, the next ones warm. Each boot is timed from the
script's start to the host reporting `joining` (installed, token written), with the time to each
boot stage and each install step the script logs (`step`: "... done in Ns").

    python benchmarks/vm_boot.py [--repeats N]

Needs the package index (PyPI); runs an in-process emulator, no Ray head.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from podmanager.cloud.base import NodeRequest
from podmanager.cloud.gcp.secrets import TokenSecrets, token_secret_id
from podmanager.core.clock import poll_until
from podmanager.core.spec import parse_spec

CLUSTER, ZONE = "bootbench", "sim-zone-a"
STEP = re.compile(r"podmanager-startup\[\w+\]: (.*): done in ([\d.]+)s$")


def boot(emulator, rest_api: str, node_name: str, worker: int, root: Path, image: str) -> dict[str, float]:
    """Run the node's startup script as VM `worker` on a new disk of `image` in `root`: seconds
    to each boot stage (the last `joining`) and each install step."""
    from podmanager.emulator.vms import GUEST_BOOT, make_disk, vm_env

    make_disk(root, image, index_url=emulator.booter.index_url)  # the index stand-in, as the emulator's VMs get it
    node = emulator.sim.get_node(ZONE, node_name)
    port = emulator.metadata.start(zone=ZONE, node=node_name, worker=worker, accelerator="v4-16",
                                   endpoints=["127.0.0.1", "127.0.0.1"], megascale_file=root / "megascale")
    env = vm_env(node, worker, root, port, root / "record.json", rest_api)
    started = time.perf_counter()
    seen: dict[str, float] = {}
    with open(root / "console.log", "w") as console:
        vm = subprocess.Popen(["bash", "-c", GUEST_BOOT], env=env, cwd=root, stdout=console, stderr=subprocess.STDOUT,
                              process_group=0)
    try:
        def stage() -> str | None:
            found = [a.value for a in emulator.sim.guest_attributes(ZONE, node_name, "podmanager/boot", worker=worker)]
            if found and found[0] not in seen:
                seen[found[0]] = time.perf_counter() - started
            if found and found[0] == "error":
                raise SystemExit(f"boot failed: {(root / 'console.log').read_text()[-3000:]}")
            return "joining" if found == ["joining"] else None

        poll_until(stage, timeout_s=900, interval_s=0.05, what="the VM's install")
        for line in (root / "console.log").read_text().splitlines():
            match = STEP.search(line)
            if match:
                seen["step: " + match.group(1).split(" from ")[0][:40]] = float(match.group(2))
        return seen
    finally:
        os.killpg(vm.pid, 9)
        vm.wait()


def node_for(emulator, spec_body: dict, name: str) -> None:
    from podmanager.controller.staging import resolve_software
    from podmanager.controller.startup import startup_metadata

    spec = parse_spec(spec_body, dry_run=True)
    metadata = startup_metadata(CLUSTER, resolve_software(spec), token_secret_id(CLUSTER))
    metadata["podmanager-head"] = "127.0.0.1:1"  # no head: the boot is timed up to joining
    # No cluster label: the emulator boots no VM of its own for it; this script does.
    emulator.sim.create_node(ZONE, name, NodeRequest("v4-16", "tpu-ubuntu2204-base", metadata=metadata))


def show(label: str, found: dict[str, float]) -> None:
    print(f"{label}: joining after {found['joining']:.2f}s")
    for key, value in found.items():
        if key != "joining":
            print(f"    {key}: {value:.2f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="warm install boots (and link boots) to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pm-bootbench-") as scratch:
        os.environ["PODMANAGER_HOME"] = str(Path(scratch) / "home")
        from podmanager.emulator.server import Emulator

        body = {"name": CLUSTER, "backend": "simulated", "slices": [{"accelerator": "v4-16"}]}
        emulator = Emulator(parse_spec(body, dry_run=True).project or "", persist=False, create_latency_s=0.0)
        rest_api = f"http://127.0.0.1:{emulator.serve_rest()}"
        port = emulator.start()
        try:
            with TokenSecrets(emulator.sim.project, emulator_host=f"127.0.0.1:{port}") as secrets:
                secrets.ensure(CLUSTER, "bench-token")
                secrets.grant_access(CLUSTER)
            count = iter(range(1000))

            def one(image: str) -> dict[str, float]:
                """A boot of a new node's first host (one metadata server per host)."""
                name = f"{CLUSTER}-{next(count)}"
                node_for(emulator, {**body, "simulation": {"create_latency_s": 0.0, "vm_image": image}}, name)
                root = Path(scratch) / name
                root.mkdir()
                return boot(emulator, rest_api, name, 0, root, image)

            first = one("bare")
            results = [(one("controller"), one("bare")) for _ in range(args.repeats)]
        finally:
            emulator.stop()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}; {sys.executable}")
    show("install, the shared cache as found", first)
    for index, (link, install) in enumerate(results):
        show(f"link #{index + 1}", link)
        show(f"install, warm shared cache #{index + 1}", install)
    links = sorted(link["joining"] for link, _ in results)
    installs = sorted(install["joining"] for _, install in results)
    print(f"median: link {links[len(links) // 2]:.2f}s, install (warm) {installs[len(installs) // 2]:.2f}s")


if __name__ == "__main__":
    main()
