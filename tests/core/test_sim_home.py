"""The simulated cloud's folder (`paths.sim_home`): every file of the dry run's cloud lives there,
so a process with a $PODMANAGER_HOME of its own (the dry run's controller VM) but the same
$PODMANAGER_SIM_HOME finds the project's emulator and the simulated hosts; unset, it is the user's
own state folder, not the home, so a dry-run cluster outlives its home as a cluster on Google
Cloud does (issue 43, 2). The suite points every default at temporary folders (tests/conftest.py):
no test writes to the machine's real ~/.local/state."""

from __future__ import annotations

import os
import shutil
import stat

from podmanager.core import paths
from podmanager.emulator import launcher, state_file, vms
from podmanager.emulator import record as emulator_record
from podmanager.vm import procs


def simulated_cloud_files(project: str, cluster: str) -> dict[str, str]:
    """Every simulated-cloud location, and the identities its processes carry."""
    return {
        "emulator record": str(emulator_record.record_path(project)),
        "emulator log": str(emulator_record.log_path(project)),
        "saved state": str(state_file.path(project)),
        "buckets": str(paths.storage_object("b", "o")),
        "hosts": str(vms.record_path(cluster, "c-s0", 0)),
        "emulator owner": launcher.owner(project),
        "VMs' owner": procs.sim_owner(cluster),
        "VMs' disks": vms.temp_dir(cluster, "0123456789abcdef"),
    }


def test_unset_it_is_the_users_own_state_folder_not_the_home(tmp_path, monkeypatch):
    monkeypatch.delenv("PODMANAGER_SIM_HOME")
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cloud = tmp_path / "state" / "podmanager" / "sim"
    assert paths.sim_home() == cloud
    assert stat.S_IMODE(cloud.stat().st_mode) == 0o700
    found = simulated_cloud_files("p", "c")
    for name in ("emulator record", "saved state", "buckets", "hosts"):
        assert found[name].startswith(f"{cloud}/"), name
    assert found["VMs' owner"] != procs.owner("c")  # the cloud's VMs are not the home's processes
    assert not found["VMs' disks"].startswith(procs.owner_temp_dir("c"))


def test_without_xdg_state_home_it_is_under_the_users_home_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("PODMANAGER_SIM_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for unset in (None, "relative/state"):  # the XDG spec: a relative value is ignored
        if unset is None:
            monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_STATE_HOME", unset)
        assert paths.sim_home() == tmp_path / "user" / ".local" / "state" / "podmanager" / "sim"


def test_a_dry_run_cluster_outlives_its_home_and_down_finds_it_in_the_default_cloud(tmp_path, monkeypatch):
    """The README's "lost home" case: `rm -rf $PODMANAGER_HOME` leaves the simulated cloud, its
    emulator and the cluster's slices, which `down -c NAME` then finds by label."""
    from podmanager.api import Cluster
    from podmanager.api.cluster_down import down

    monkeypatch.delenv("PODMANAGER_SIM_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    try:
        cluster = Cluster.from_dict({"name": "outlives", "slices": [{"accelerator": "v4-8"}], "simulation": {
            "boot_hosts": False, "create_latency_s": 0.01, "delete_latency_s": 0.01}}, dry_run=True)
        cluster.up()
        emulator = launcher.running("podmanager-sim")
        assert emulator is not None
        shutil.rmtree(paths.home())

        assert launcher.running("podmanager-sim") == emulator  # its record is not in the home
        report = down("outlives", dry_run=True)
        assert report.by_label is not None and report.by_label.deleted_in == ["podmanager-sim"]
        assert launcher.running("podmanager-sim") is None  # its last cluster went, and so did it
    finally:
        launcher.stop_all()


def test_another_home_with_the_same_sim_home_finds_the_same_cloud(tmp_path, monkeypatch):
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "laptop"))
    laptop = simulated_cloud_files("p", "c")
    emulator_record.record_path("p").write_text(emulator_record.EmulatorRecord(
        project="p", address="127.0.0.1:1", pid=os.getpid(), started=0.0).model_dump_json())

    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "controller-vm"))
    assert simulated_cloud_files("p", "c") == laptop
    for name in ("emulator record", "emulator log", "saved state", "buckets", "hosts"):
        assert laptop[name].startswith(str(tmp_path / "cloud") + "/"), name
    assert emulator_record.read("p").address == "127.0.0.1:1"
    assert procs.sim_owner("c") != procs.owner("c")  # the controller's own processes stay its own
    assert (tmp_path / "cloud").stat().st_mode & 0o777 == 0o700


def test_every_simulated_vm_is_told_the_simulated_clouds_folder(tmp_path, monkeypatch):
    from podmanager.cloud.base import CLUSTER_LABEL, Node, NodeState

    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    node = Node(name="c-s0", zone="z", accelerator_type="v4-8", state=NodeState.READY, labels={CLUSTER_LABEL: "c"})
    root = tmp_path / "vm"
    tpu_vm = vms.vm_env(node, 0, root, 1234, tmp_path / "c-s0-w0.json", "http://127.0.0.1:1")
    instance_vm = vms.guest_env(root, 1234, "http://127.0.0.1:1")
    for env in (tpu_vm, instance_vm):
        assert env[paths.SIM_HOME_ENV] == str(tmp_path / "cloud")
        assert "PODMANAGER_HOME" not in env  # a fresh environment: the VM's own home, if any
        assert env[procs.ROOT_ENV] == str(root) and env["GCE_METADATA_IP"] == "127.0.0.1:1234"
