"""Issue 47's end goal: a whole dry-run `up` with a controller VM in the emulator's namespace mode
(docs/dry-run.md), as a laptop runs it: the controller VM and the slice's TPU VM each in a network
namespace of its own on the simulated VPC, the laptop outside, behind its home router.

What it proves, each failing in the loopback mode's terms: the channel's rule admits the laptop
at its public address (the home router's; a rule for 127.0.0.1 would refuse it, and `up` would
wait for the channel in vain), the Ray head binds and advertises the controller VM's internal
address (loopback there is the VM's own: the TPU VM could never join), the TPU VM joins it through
the cluster's internal rule, `status` answers over the channel, and `down` leaves no namespace
or link of the network. Linux as root only (CI is)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import textwrap

import pytest

from podmanager.emulator.network import names

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900),
              pytest.mark.skipif(names.unavailable() is not None, reason=f"{names.unavailable()}")]
NAME = "nsup"
SPEC = textwrap.dedent(f"""
    name: {NAME}
    controller: {{local: false}}
    simulation: {{create_latency_s: 0.0, delete_latency_s: 0.0, instance_create_latency_s: 1.0,
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


def test_up_status_down_with_a_controller_vm_in_the_namespace_mode(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "spec.yaml").write_text(SPEC)
    env = {k: v for k, v in os.environ.items() if k not in ("PODMANAGER_HOME", "PODMANAGER_SIM_HOME")}
    # The emulator `up` starts takes its network mode from the environment.
    env.update(PODMANAGER_HOME=str(tmp_path / "home"), PODMANAGER_SIM_HOME=str(tmp_path / "cloud"),
               PODMANAGER_SIM_NETWORK="namespaces")

    def podmanager(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "podmanager", *args], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=timeout)

    before = namespaces()
    up = podmanager("up", "-f", "spec.yaml", "--dry-run", timeout=600)
    try:
        ours = {n for n in namespaces() - before if f"-{NAME}-controller-" in n or f"-{NAME}-s0-" in n}
        assert ours, f"no namespace of the cluster's VMs: {namespaces() - before}"
        prefix = next(iter(ours)).split("-", 1)[0]  # the network's prefix (emulator/network/names.py)
        assert up.returncode == 0, up.stdout + up.stderr
        # The rule names the laptop at its public address on the simulated internet, not loopback.
        assert "reachable from 198.18." in up.stdout, up.stdout
        status = podmanager("status", "-c", NAME, "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        found = json.loads(status.stdout)
        assert [s["state"] for s in found["slices"]] == ["READY"]
        host = found["hosts"][0]
        assert host["healthy"] and ipaddress.ip_address(host["ip"]).is_private
        assert not ipaddress.ip_address(host["ip"]).is_loopback  # the TPU VM's internal address
    finally:
        down = podmanager("down", "-c", NAME, timeout=600)
        # A failed `up` or `down` may leave the emulator, and with it its network: stop it anyway.
        subprocess.run([sys.executable, "-c", "from podmanager.emulator import launcher; launcher.stop_all()"],
                       env=env, timeout=120, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not {n for n in namespaces() if n.startswith(prefix)}
    assert not {link for link in links() if link.startswith(prefix)}
