"""Issue 47's end goal: a whole dry-run cluster with a controller VM in the emulator's namespace
mode (docs/dry-run.md), as a laptop uses it: the controller VM and the slice's TPU VM each in a
network namespace of its own on the simulated VPC, the laptop outside, behind its home router.

One cluster for the module (`up` by the fixture, `down` after the last test). What it proves,
each failing in the loopback mode's terms: the channel's rule admits the laptop at its public
address (the home router's; a rule for 127.0.0.1 would refuse it, and `up` would wait for the
channel in vain), the Ray head binds and advertises the controller VM's internal address
(loopback there is the VM's own: the TPU VM could never join), the TPU VM joins it through the
cluster's internal rule, `status` answers over the channel, a `run` on the TPU VM ends with its
output on the laptop, a service answers through the laptop's forwarded port, a second laptop
gets in by `access add` and `attach`es to a run of the first's until revoked, the first
laptop's address changes mid-run (its `attach` says what to do, and after that, works), and
`down` leaves no namespace or link of the network. Linux as root only (CI is)."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
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
from podmanager.emulator.control import EmulatorControl
from podmanager.emulator.network import names

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900),
              pytest.mark.skipif(names.unavailable() is not None, reason=f"{names.unavailable()}")]
NAME = "nsup"
REPO = Path(__file__).resolve().parents[2]
# A run kept going until the test ends it steps every 20 ms, leaving the cores to the cluster.
PACED = ["--min-step-s", "0.02"]
# A command whose connections go unanswered gives up within this (the channel's 60 s read and
# 10 s connect timeouts, its 20 s of unanswered tries: client/patience.py); a reboot's wait is 300 s.
GIVES_UP_WITHIN_S = 240
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
        inside = ["ip", "netns", "exec", self.namespace] if self.namespace else []
        return subprocess.Popen([*inside, sys.executable, "-m", "podmanager", *args], cwd=self.folder, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run_status(self, run_id: str) -> dict:
        return next(r for r in json.loads(self.ok("runs", "-c", NAME, "--json")) if r["run_id"] == run_id)


@dataclass
class Cluster:
    laptop: Laptop
    up: subprocess.CompletedProcess
    prefix: str  # the network's (emulator/network/names.py)
    root: Path

    def emulator_record(self) -> dict:
        [record] = (self.root / "cloud" / "sim" / "emulators").glob("*.json")
        return json.loads(record.read_text())

    def public(self, offset: int) -> ipaddress.IPv4Address:
        """An address of the simulated internet (network/model.py's `Internet`, a /24): 1 the first
        laptop's (its home router's, until it moves), 2 the second laptop's, 4 Google's APIs."""
        segment = ipaddress.ip_network(f"{self.emulator_record()['laptop_public']}/24", strict=False)
        return segment.network_address + offset

    def move_laptop(self) -> ipaddress.IPv4Address:
        """The first laptop's home router gets another public address (the emulator's fabric)."""
        with EmulatorControl(self.emulator_record()["address"]) as control:
            return ipaddress.ip_address(control.move_laptop())

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


@pytest.fixture(scope="module")
def long_run(cluster) -> Iterator[str]:
    """A run the first laptop started detached, going on until the module's end (cancelled then)."""
    shutil.copytree(REPO / "workloads", cluster.laptop.folder / "workloads", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    submitted = cluster.laptop.ok("run", "-c", NAME, "--detach", "--json", "workloads/train_mlp.py",
                                  "--steps", "1000000", *PACED, timeout=600)
    run_id = json.loads(submitted)["run_id"]
    yield run_id
    cluster.laptop.cmd("cancel", run_id)


def first_output(follower: subprocess.Popen) -> str:
    """The first line of the run's steps a follower prints (its host's label first)."""
    for line in follower.stdout:
        if line.startswith("[slice-0/host-0]") and " loss " in line:
            return line
    raise AssertionError(f"the follower ended ({follower.wait()}) with no output: {follower.stderr.read()}")


def detach(follower: subprocess.Popen) -> str:
    os.killpg(follower.pid, signal.SIGINT)  # Ctrl-C: detach; the run goes on
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 130 and "detached" in out + err, out + err
    return out


def test_a_second_laptop_attaches_to_the_first_laptops_run_until_it_is_revoked(cluster, long_run):
    first, second = cluster.laptop, cluster.second_laptop()
    second.ok("access", "add", "-c", NAME, "--dry-run")
    second.ok("connect", "-c", NAME, "--dry-run")
    follower = second.start("attach", long_run)
    try:
        first_output(follower)  # the run's own lines, on the other laptop
    finally:
        detach(follower)
    assert first.run_status(long_run)["status"] == "running"

    first.ok("access", "revoke", str(cluster.public(2)), "-c", NAME, "--dry-run")
    # Once the network holds the rule's change (seconds), the second laptop's attach is refused,
    # saying what to do; not after a reboot's wait.
    refused = poll_until(lambda: (lambda done: done if done.returncode != 0 else None)(
        second.cmd("runs", "-c", NAME)), timeout_s=120, interval_s=1.0, what="the second laptop to be refused")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    attach = second.cmd("attach", long_run, timeout=GIVES_UP_WITHIN_S)
    said = attach.stdout + attach.stderr
    assert attach.returncode == 1 and "Traceback" not in said, said
    assert f"podmanager access add -c {NAME} --dry-run" in said, said


def test_the_first_laptops_address_changes_mid_run_and_access_add_lets_it_attach_again(cluster, long_run):
    first = cluster.laptop
    old = f"{cluster.public(1)}/32"
    follower = first.start("attach", long_run)
    try:
        first_output(follower)
        moved = cluster.move_laptop()
        # The follower's connections now go unanswered: it says what to do and ends, not waits.
        out, err = follower.communicate(timeout=GIVES_UP_WITHIN_S)
    finally:
        if follower.poll() is None:
            follower.kill()
    said = out + err
    assert follower.returncode == 1 and "Traceback" not in said, said
    assert f"pm-{NAME}-channel admits {old}" in said and f"podmanager access add -c {NAME} --dry-run" in said, said

    again = first.cmd("attach", long_run, timeout=GIVES_UP_WITHIN_S)  # a new attach: the same, at once
    said = again.stdout + again.stderr
    assert again.returncode == 1 and "Traceback" not in said, said
    assert f"pm-{NAME}-channel admits {old}" in said and f"podmanager access add -c {NAME} --dry-run" in said, said

    added = json.loads(first.ok("access", "add", "-c", NAME, "--dry-run", "--json"))
    assert added["added"] == f"{moved}/32" != old  # as the controller sees the laptop now
    step = first.run_status(long_run)["step"]
    follower = first.start("attach", long_run)
    try:
        first_output(follower)
    finally:
        detach(follower)
    now = first.run_status(long_run)
    assert now["status"] == "running" and now["step"] > step  # it went on all along
