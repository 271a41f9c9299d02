"""The full install of a bare TPU VM, as a simulated VM runs it: the startup script from an
empty root installs uv, Python, Ray, JAX and the wheel of this podmanager from the package
index, reads its token, and is ready to join. Two boots:

- first: an empty root and an empty uv cache (everything downloaded);
- second: a new empty root whose HOME is the first's, so uv's cache is warm (a VM whose disk
  kept its cache, or an image with one baked in): only the installs into a new environment.

    python benchmarks/vm_boot.py

Each boot is timed from the script's start to the host reporting `joining` (installed, token
written). Needs the package index (PyPI); runs an in-process emulator, no Ray head.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from podmanager.cloud.base import NodeRequest
from podmanager.cloud.gcp.secrets import TokenSecrets, token_secret_id
from podmanager.core.clock import poll_until
from podmanager.core.spec import parse_spec

CLUSTER, ZONE, NODE = "bootbench", "sim-zone-a", "bootbench-s0"


def boot(emulator, rest_api: str, worker: int, root: Path, home: Path | None) -> float:
    """Run the node's startup script as VM `worker` in `root`; seconds until it says `joining`."""
    from podmanager.emulator.vms import GUEST_BOOT, vm_env

    node = emulator.sim.get_node(ZONE, NODE)
    port = emulator.metadata.start(zone=ZONE, node=NODE, worker=worker, accelerator="v4-16",
                                   endpoints=["127.0.0.1", "127.0.0.1"], megascale_file=root / "megascale")
    env = vm_env(node, worker, root, port, root / "record.json", rest_api)
    if home is not None:
        env["HOME"] = str(home)
    started = time.perf_counter()
    with open(root / "console.log", "w") as console:
        vm = subprocess.Popen(["bash", "-c", GUEST_BOOT], env=env, cwd=root, stdout=console, stderr=subprocess.STDOUT,
                              process_group=0)
    try:
        def stage() -> str | None:
            found = [a.value for a in emulator.sim.guest_attributes(ZONE, NODE, "podmanager/boot", worker=worker)]
            if found and found[0] == "error":
                raise SystemExit(f"boot failed: {(root / 'console.log').read_text()[-3000:]}")
            return "joining" if found == ["joining"] else None

        poll_until(stage, timeout_s=900, interval_s=0.2, what="the VM's install")
        return time.perf_counter() - started
    finally:
        os.killpg(vm.pid, 9)
        vm.wait()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pm-bootbench-") as scratch:
        os.environ["PODMANAGER_HOME"] = str(Path(scratch) / "home")
        from podmanager.controller.staging import resolve_software
        from podmanager.controller.startup import startup_metadata
        from podmanager.emulator.server import Emulator

        spec = parse_spec({"name": CLUSTER, "backend": "simulated", "slices": [{"accelerator": "v4-16"}],
                           "simulation": {"create_latency_s": 0.0, "vm_image": "bare"}}, dry_run=True)
        emulator = Emulator(spec.project or "", persist=False, create_latency_s=0.0)
        rest_api = f"http://127.0.0.1:{emulator.serve_rest()}"
        port = emulator.start()
        try:
            with TokenSecrets(spec.project or "", emulator_host=f"127.0.0.1:{port}") as secrets:
                secrets.ensure(CLUSTER, "bench-token")
                secrets.grant_access(CLUSTER)
            metadata = startup_metadata(CLUSTER, resolve_software(spec), token_secret_id(CLUSTER))
            metadata["podmanager-head"] = "127.0.0.1:1"  # no head: the boot is timed up to joining
            # No cluster label: the emulator boots no VM of its own for it; this script does.
            emulator.sim.create_node(ZONE, NODE, NodeRequest("v4-16", "tpu-ubuntu2204-base", metadata=metadata))
            first = Path(scratch) / "vm0"
            second = Path(scratch) / "vm1"
            first.mkdir(), second.mkdir()
            cold = boot(emulator, rest_api, 0, first, None)
            warm = boot(emulator, rest_api, 1, second, first / "root")
        finally:
            emulator.stop()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{sys.executable}")
    print(f"first boot (empty root, empty uv cache): {cold:.1f}s")
    print(f"second boot (empty root, warm uv cache): {warm:.1f}s")


if __name__ == "__main__":
    main()
