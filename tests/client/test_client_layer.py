"""client/: what runs only on the user's machine imports neither Ray nor JAX, and reaches only
down to what a laptop needs: shown by its imports, and by the laptop's verbs run against a
controller's channel in a process where `import ray` and `import jax` fail."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "podmanager"

# The layers client/ may import: the pure core (a run's results, the code packer, the event),
# the clouds' clients, the channel's records and transport, and its own folder; never the store.
LAYERS = {"core", "cloud", "channel", "client"}
# Beyond them, each module by name with why: none of these imports Ray or JAX either.
BEYOND = {
    "podmanager.cluster.backends": "the backend chooser: the controller VM is made in the project's cloud (a dry "
                                   "run's emulator)",
    "podmanager.cluster.teardown": "down by label, when the controller cannot be reached",
    "podmanager.cluster.controller_preflight": "the APIs, permissions and the cluster's accounts, checked and made "
                                               "before the controller VM bills",
    "podmanager.controller.staging": "the wheel staged and the VMs' lock resolved before the VM is made",
    "podmanager.controller.startup": "the controller VM's startup script",
}


def imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{a.name}" for a in node.names)
            found.add(node.module)
    return found


def test_the_client_imports_only_what_a_laptop_needs() -> None:
    reach = []
    for path in sorted((PACKAGE / "client").glob("*.py")):
        for name in sorted(imported(path)):
            parts = name.split(".")
            if parts[0] in ("ray", "jax"):
                reach.append(f"{path.name} -> {name}")
            elif parts[0] == "podmanager" and len(parts) > 1 and parts[1] not in LAYERS:
                if not any(name == allowed or name.startswith(allowed + ".") or allowed.startswith(name + ".")
                           for allowed in BEYOND):
                    reach.append(f"{path.name} -> {name}")
    assert reach == [], "client/ reaching past what a laptop needs:\n" + "\n".join(reach)


# Run in a process of its own: a meta-path finder refuses Ray and JAX, every CLI verb's module and
# every client module is imported, and the laptop's verbs are run against a controller's channel
# (its API a fake served in-process) with this machine holding only its pointer.
LAPTOP = textwrap.dedent("""
    import importlib, pkgutil, sys

    class NoRayNoJax:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("ray", "jax", "jaxlib"):
                raise ImportError(f"{name} is not importable on this laptop")
            return None

    sys.meta_path.insert(0, NoRayNoJax())

    import podmanager.cli, podmanager.client
    for package in (podmanager.cli, podmanager.client):
        for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)

    from typer.testing import CliRunner
    from podmanager.channel import identity, records
    from podmanager.channel.cluster_status import ClusterStatus, SliceStatus
    from podmanager.channel.server import ChannelServer
    from podmanager.cli import app
    from podmanager.client import pinned
    from podmanager.core.spec import parse_spec

    NAME = "lap"
    asked = []

    class Controller:
        def status(self, request):
            return ClusterStatus(name=request.cluster, backend="simulated", project="p", slices=[SliceStatus(
                index=0, name="lap-s0", accelerator="v4-8", zone="z", state="READY", hosts=1, chips=4)])

        def events(self, request):
            return records.EventsReply(events=[records.EventRecord(id=1, time=1.0, kind="slice_ready", slice_index=0,
                                                                   message="lap-s0 is READY")])

        def runs(self, request):
            return records.RunsReply(runs=[])

        def services(self, request):
            return records.ServicesReply(services=[])

        def fault(self, request):
            asked.append(request.fault.text())
            return records.FaultReply(said=f"injected {request.fault.text()} on the controller")

    made = identity.load_or_create(NAME, identity.controller_address(simulated=True))
    with ChannelServer(Controller(), made) as server:
        pinned.install(NAME, pinned.ControllerAddress(host=server.host, port=server.port), made.cert_pem(),
                       made.token())
        spec = {"name": NAME, "backend": "simulated", "slices": [{"accelerator": "v4-8"}],
                "controller": {"local": False}}
        parse_spec(spec)
        pinned.save_spec(NAME, __import__("json").dumps(spec))
        for verb in (["status", "-c", NAME], ["events", "-c", NAME], ["runs", "-c", NAME],
                     ["sim", "preempt", "-c", NAME, "--slice", "0"]):
            result = CliRunner().invoke(app, verb)
            print(verb[0], result.exit_code, result.output.replace("\\n", " | "))
    print("asked", asked)
    print("loaded", sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "jax", "jaxlib")))
""")


def test_the_laptops_verbs_run_with_ray_and_jax_unimportable(tmp_path: Path) -> None:
    env = {**os.environ, "PODMANAGER_HOME": str(tmp_path / "home"), "PODMANAGER_SIM_HOME": str(tmp_path / "sim")}
    done = subprocess.run([sys.executable, "-c", LAPTOP], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert said["status"].startswith("0 ") and "lap-s0" in said["status"] and "READY" in said["status"]
    assert said["events"].startswith("0 ") and "lap-s0 is READY" in said["events"]
    assert said["runs"].startswith("0 "), said["runs"]
    # The fault went to the controller over the channel: this machine built no cluster of its own.
    assert said["sim"] == "0 injected preempt:0:0:0 on the controller | ", said["sim"]
    assert said["asked"] == "['preempt:0:0:0']"
    assert said["loaded"] == "[]"
