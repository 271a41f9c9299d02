"""The package's layers, enforced: every import (also those inside functions) goes down the
stack or stays in its own folder, and no two modules import each other, however indirectly.

The order, lowest first, is the one in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "podmanager"

# Lowest first. A module may import its own layer and the layers before it.
LAYERS = ["runtime", "core", "state", "cloud", "provisioning", "vm", "controller", "emulator", "attempts",
          "serving", "cluster", "supervision", "channel", "client", "api", "controller.daemon", "cli"]
# Folders inside a layer that the rest of that layer must not reach into: the cloud contract
# knows no backend.
PRIVATE = {"cloud.gcp": {"cloud.gcp"}}
# The dry run's whole wing is chosen in one place: the backend chooser.
EMULATOR_DOOR = "podmanager.cluster.backends"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The podmanager modules a file imports, anywhere in it (inside functions and
    `if TYPE_CHECKING:` blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("podmanager"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("podmanager"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
    return found


def layer_of(module: str) -> str | None:
    """A module's layer: its folder, or its folder's folder where that is a layer of its own
    (`controller.daemon`: the controller VM's process, above the API it serves)."""
    parts = module.split(".")
    if ".".join(parts[1:3]) in LAYERS:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def private_folder(module: str) -> str | None:
    rest = ".".join(module.split(".")[1:3])
    return rest if rest in PRIVATE else None


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, set(found)) for name, path in found.items()}


def test_every_module_belongs_to_a_layer() -> None:
    stray = [m for m in modules() if m not in ("podmanager", "podmanager.__main__") and layer_of(m) is None]
    assert stray == [], f"modules outside the layer folders: {stray}"


def test_no_import_runs_up_the_layers() -> None:
    upward = []
    for module, targets in graph().items():
        if layer_of(module) is None:
            continue  # the package root and __main__ sit on top
        for target in targets:
            target_layer = layer_of(target)
            if target_layer is None or LAYERS.index(target_layer) > LAYERS.index(layer_of(module)):
                upward.append(f"{module} -> {target}")
    assert upward == [], "imports that run up the layers:\n" + "\n".join(sorted(upward))


def test_backends_and_simulated_hosts_stay_apart() -> None:
    leaks = []
    for module, targets in graph().items():
        own = private_folder(module)
        for target in targets:
            folder = private_folder(target)
            if folder is not None and folder != own and layer_of(module) == layer_of(target):
                leaks.append(f"{module} -> {target}")
    assert leaks == [], "a layer reaches into a backend or the simulation:\n" + "\n".join(sorted(leaks))


def test_only_the_backend_chooser_imports_the_emulator() -> None:
    """A dry run differs from Google Cloud in one choice: which cloud the client talks to. Every
    other module works the same in both, so none but the chooser may import the emulator's wing
    (tests may, where driving it in-process is the point)."""
    reach = sorted(f"{module} -> {target}" for module, targets in graph().items() for target in targets
                   if layer_of(target) == "emulator" and layer_of(module) != "emulator" and module != EMULATOR_DOOR)
    assert reach == [], "the emulator imported outside the backend chooser:\n" + "\n".join(reach)


def test_the_vm_side_imports_nothing_of_the_controller_side() -> None:
    """What a TPU VM runs is installed there alone: it must load without the head's modules."""
    reach = sorted(f"{module} -> {target}" for module, targets in graph().items() for target in targets
                   if layer_of(module) == "vm" and layer_of(target) not in (None, "runtime", "core", "vm"))
    assert reach == [], "the VM side reaching past core:\n" + "\n".join(reach)


def test_no_import_cycles() -> None:
    """Imports for annotations only (`if TYPE_CHECKING:`) count too: a circle hidden there
    is still two modules that cannot be read without each other."""
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", ["Cluster", "ClusterStatus", "Workload", "runtime"])
def test_documented_names_still_import(name: str) -> None:
    import podmanager

    assert getattr(podmanager, name) is not None


def test_every_api_name_loads_on_first_use() -> None:
    import podmanager.api as api

    assert sorted(api.__all__) == sorted(api._WHERE)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        api.Nope  # noqa: B018 - the attribute access is the test


def test_the_cli_imports_neither_ray_nor_jax_until_a_command_needs_them() -> None:
    code = "import sys, podmanager.cli; print(sorted(m for m in ('ray', 'jax', 'pydantic') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded  # `podmanager --help` stays fast


def test_the_read_only_verbs_load_neither_ray_nor_the_clouds_client() -> None:
    """`status`, `runs` and `logs` read the files the cluster's monitor keeps: importing the
    Python API and the CLI's commands must not pull in Ray (a module-level import of the
    monitor in `cluster_runtime.py` once did)."""
    code = ("import sys, podmanager.api, podmanager.__main__\n"
            "from podmanager.api import Cluster, cluster\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'google.cloud.tpu'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded


def test_api_uses_the_ray_side_through_its_methods_only() -> None:
    """`api/` calls methods of the cluster's one Ray-side object (`runtime.hosts`), never
    reaches through it to what it holds (`runtime.hosts.controller.connect()` was one)."""
    reach = []
    for path in sorted((PACKAGE / "api").rglob("*.py")):
        tree = ast.parse(path.read_text())
        called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "hosts" and id(node) not in called):
                reach.append(f"{path.name}:{node.lineno}: .hosts.{node.attr}")
    assert reach == [], "api/ reaching through the Ray side:\n" + "\n".join(reach)


def test_the_head_actors_options_and_state_folder_are_set_in_one_place() -> None:
    """Every named Ray actor gets its namespace, lifetime and restarts from
    `controller/head_actors.py`, and only there does an actor enter its client's state folder."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "controller" / "head_actors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "options":
                found += [f"{path.name}:{node.lineno}: options({k.arg}=...)" for k in node.keywords
                          if k.arg in ("name", "namespace", "lifetime", "max_restarts")]
            if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.slice, ast.Constant) and node.slice.value == "PODMANAGER_HOME"):
                found.append(f"{path.name}:{node.lineno}: sets PODMANAGER_HOME")
    assert found == [], "the head's actors' options or environment set outside head_actors.py:\n" + "\n".join(found)


def test_no_api_name_is_also_a_module_of_the_api_package():
    """Importing `podmanager.api.X` sets the package attribute `X` to that module, so a lazily
    exported function named like a module turns into the module once anything imports it (CI saw
    `api.down(...)`: "'module' object is not callable")."""
    import podmanager.api as api

    submodules = {p.stem for p in (PACKAGE / "api").glob("*.py")}
    assert not submodules & set(api.__all__)
