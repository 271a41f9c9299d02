"""Issue 47's end goal: a whole dry-run cluster with a controller VM in the emulator's namespace
mode (docs/dry-run.md), as a laptop uses it: the controller VM and the slice's TPU VM each in a
network namespace of its own on the simulated VPC, the laptop outside, behind its home router.

One cluster for the module (`up` by the fixture, `down` after the last test). What it proves,
each failing in the loopback mode's terms: the channel's rule admits the laptop at its public
address (the home router's; a rule for 127.0.0.1 would refuse it, and `up` would wait for the
channel in vain), the Ray head binds and advertises the controller VM's internal address
(loopback there is the VM's own: the TPU VM could never join), the TPU VM joins it through the
cluster's internal rule, `status` answers over the channel, a `run` on the TPU VM ends with its
output on the laptop, a service answers through the laptop's forwarded port, and `down` leaves
no namespace or link of the network. Linux as root only (CI is)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from service_answers import answers_doubled

from podmanager.core.clock import poll_until
from podmanager.emulator.network import names

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900),
              pytest.mark.skipif(names.unavailable() is not None, reason=f"{names.unavailable()}")]
NAME = "nsup"
SPEC = textwrap.dedent(f"""
    name: {NAME}
    simulation: {{network: namespaces, create_latency_s: 0.0, delete_latency_s: 0.0, instance_create_latency_s: 1.0,
                  instance_delete_latency_s: 1.0}}
    slices:
      - {{accelerator: v4-8}}
""")


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def links() -> set[str]:
    listed = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in listed.splitlines() if ":" in line}


@dataclass
class Laptop:
    folder: Path
    env: dict[str, str]
    namespace: str | None = None  # the second laptop's; None: this machine's own (the first laptop)

    def cmd(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        inside = ["ip", "netns", "exec", self.namespace] if self.namespace else []
        return subprocess.run([*inside, sys.executable, "-m", "podmanager", *args], cwd=self.folder, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str, timeout: float = 300) -> str:
        done = self.cmd(*args, timeout=timeout)
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "podmanager", *args], cwd=self.folder, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@dataclass
class Cluster:
    laptop: Laptop
    up: subprocess.CompletedProcess
    prefix: str  # the network's (emulator/network/names.py)
    root: Path

    def public(self, offset: int) -> ipaddress.IPv4Address:
        """An address of the simulated internet (network/model.py's `Internet`): 1 the first
        laptop's (its home router's), 2 the second laptop's, 4 Google's APIs."""
        [record] = (self.root / "cloud" / "sim" / "emulators").glob("*.json")
        return ipaddress.ip_address(json.loads(record.read_text())["laptop_public"]) + (offset - 1)

    def second_laptop(self) -> Laptop:
        """Another machine of the user, straight on the simulated internet at its own public
        address, with a home of its own; it reaches Google's APIs as the VMs do, at their address."""
        (self.root / "laptop2").mkdir(exist_ok=True)
        env = {**self.laptop.env, "PODMANAGER_HOME": str(self.root / "laptop2"),
               "PODMANAGER_SIM_APIS_HOST": str(self.public(4))}
        return Laptop(self.root / "laptop2", env, names.namespace(self.prefix, "laptop2"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("nsup")
    folder = root / "project"
    folder.mkdir()
    (folder / "spec.yaml").write_text(SPEC)
    # The emulator `up` starts takes its network mode from the spec (simulation.network).
    env = {k: v for k, v in os.environ.items()
           if k not in ("PODMANAGER_HOME", "PODMANAGER_SIM_HOME", "PODMANAGER_SIM_NETWORK")}
    env.update(PODMANAGER_HOME=str(root / "home"), PODMANAGER_SIM_HOME=str(root / "cloud"))
    laptop = Laptop(folder, env)
    before = namespaces()
    up = laptop.cmd("up", "-f", "spec.yaml", "--dry-run", timeout=600)
    prefix = None
    try:
        ours = {n for n in namespaces() - before if f"-{NAME}-controller-" in n or f"-{NAME}-s0-" in n}
        assert ours, f"no namespace of the cluster's VMs: {namespaces() - before}\n{up.stdout}\n{up.stderr}"
        prefix = next(iter(ours)).split("-", 1)[0]
        yield Cluster(laptop, up, prefix, root)
    finally:
        down = laptop.cmd("down", "-c", NAME, timeout=600)
        # A failed `up` or `down` may leave the emulator, and with it its network: stop it anyway.
        subprocess.run([sys.executable, "-c", "from podmanager.emulator import launcher; launcher.stop_all()"],
                       env=env, timeout=120, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert prefix and not {n for n in namespaces() if n.startswith(prefix)}
    assert not {link for link in links() if link.startswith(prefix)}


def test_up_and_status_with_a_controller_vm_in_the_namespace_mode(cluster):
    assert cluster.up.returncode == 0, cluster.up.stdout + cluster.up.stderr
    # The rule names the laptop at its public address on the simulated internet, not loopback.
    assert "reachable from 198.18." in cluster.up.stdout, cluster.up.stdout
    found = json.loads(cluster.laptop.ok("status", "-c", NAME, "--json"))
    assert [s["state"] for s in found["slices"]] == ["READY"]
    host = found["hosts"][0]
    assert host["healthy"] and ipaddress.ip_address(host["ip"]).is_private
    assert not ipaddress.ip_address(host["ip"]).is_loopback  # the TPU VM's internal address


def test_this_machine_is_outside_the_vpc_its_controller_a_vm_and_a_local_one_refused_as_google_refuses_it(cluster):
    """The spec leaves `controller` out: in the namespace mode this machine stands outside the
    simulated VPC, as a laptop does on Google Cloud, so `up` made a controller VM (the fixture
    found its namespace); `controller.local: true` is refused before anything is made, exit 2,
    by the same question Google Cloud's `up` asks (this machine has no metadata server)."""
    assert cluster.up.returncode == 0 and "controller VM" in cluster.up.stdout, cluster.up.stdout + cluster.up.stderr
    before = namespaces()
    (cluster.laptop.folder / "local.yaml").write_text(
        SPEC.replace(f"name: {NAME}", "name: nslocal") + "controller: {local: true}\n")
    refused = cluster.laptop.cmd("up", "-f", "local.yaml", "--dry-run")
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said
    assert "controller.local: true: this machine is not a simulated VM of the dry run's namespace mode" in said
    assert "controller: {local: false}" in said  # the fix
    assert not {n for n in namespaces() - before if "-nslocal-" in n}  # nothing was made


def test_a_run_on_the_tpu_vm_ends_with_its_output_on_the_laptop(cluster):
    (cluster.laptop.folder / "hello.py").write_text(
        "for i in range(3):\n    print('hello', i, flush=True)\n")
    done = cluster.laptop.ok("run", "-c", NAME, "hello.py", timeout=600)
    assert "hello 2" in done and "succeeded" in done, done


def test_a_service_answers_through_the_laptops_forwarded_port(cluster):
    laptop = cluster.laptop
    (laptop.folder / "doubler.py").write_text(
        "import sys\nfrom podmanager import runtime\n\n"
        "sys.exit(runtime.serve(lambda inputs: [x * 2 for x in inputs], warmup=[0]))\n")
    serving = laptop.start("serve", "-c", NAME, "doubler.py")
    service_id = None
    try:
        first = serving.stdout.readline()
        assert " at http://127.0.0.1:" in first, first + (serving.stderr.read() if serving.poll() else "")
        service_id, endpoint = first.split()[1], first.split()[3]

        poll_until(lambda: answers_doubled(endpoint), timeout_s=300, interval_s=1.0, what="the service to answer through the laptop's port")
    finally:
        os.killpg(serving.pid, signal.SIGINT)  # Ctrl-C: detach; the service goes on, its forward ends
        out, err = serving.communicate(timeout=60)
        if service_id is not None:
            cancelled = laptop.cmd("cancel", service_id)
    assert serving.returncode == 130, out + err
    assert cancelled.returncode == 0 and "is cancelled" in cancelled.stdout, cancelled.stdout + cancelled.stderr


def test_a_second_laptop_is_refused_then_admitted_by_access_add_then_refused_after_revoke(cluster):
    first, second = cluster.laptop, cluster.second_laptop()
    first_address, second_address = f"{cluster.public(1)}/32", f"{cluster.public(2)}/32"
    refused = second.cmd("connect", "-c", NAME, "--dry-run")  # the firewall drops it: no answer
    assert refused.returncode == 1 and "cannot reach the controller" in refused.stdout + refused.stderr, \
        refused.stdout + refused.stderr

    added = second.cmd("access", "add", "-c", NAME, "--dry-run", "--json")
    assert added.returncode == 0, added.stdout + added.stderr
    assert json.loads(added.stdout)["added"] == second_address  # as the controller saw it
    listed = json.loads(first.ok("access", "-c", NAME, "--dry-run", "--json"))
    assert listed["rule"] == f"pm-{NAME}-channel" and listed["callers"] == [first_address, second_address]
    second.ok("connect", "-c", NAME, "--dry-run")
    assert [s["state"] for s in json.loads(second.ok("status", "-c", NAME, "--json"))["slices"]] == ["READY"]
    first.ok("status", "-c", NAME)  # the first laptop is still admitted

    first.ok("access", "revoke", str(cluster.public(2)), "-c", NAME, "--dry-run")
    # The rule's change holds once the network syncs (seconds): until then the second laptop still gets in.
    gone = poll_until(lambda: (lambda done: done if done.returncode != 0 else None)(second.cmd("status", "-c", NAME)),
                      timeout_s=120, interval_s=1.0, what="the second laptop to be refused")
    # The address-change message: the rule, the addresses it admits, the one command that fixes it.
    said = gone.stdout + gone.stderr
    assert gone.returncode == 1, said
    assert f"pm-{NAME}-channel admits {first_address}" in said, said
    assert f"podmanager access add -c {NAME} --dry-run" in said, said
    first.ok("status", "-c", NAME)

    last = first.cmd("access", "revoke", str(cluster.public(1)), "-c", NAME, "--dry-run")
    assert last.returncode == 2 and "last caller" in last.stdout + last.stderr, last.stdout + last.stderr
    assert json.loads(first.ok("access", "-c", NAME, "--dry-run", "--json"))["callers"] == [first_address]
