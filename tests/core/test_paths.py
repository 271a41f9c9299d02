"""podmanager/core/paths.py: the folders and file names podmanager builds.

The folder of every local machine podmanager starts (`paths.machines_dir`, /tmp/pm-<uid>):
its name is anyone's to compute, so a folder another user made first, one open to others or a
link is refused, and nothing is put in it (issue 43, 1: another user planted a program in a
simulated VM's disk, which the owner then ran). Real folders, a real other owner (the suite runs
as root; that case is skipped otherwise), in a parent of the test's own. Below: names that
become files, and the simulated cloud's folder (`paths.sim_home`)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podmanager.cli import app
from podmanager.controller import head
from podmanager.core import paths
from podmanager.core.errors import SpecError, UnsafeFolderError
from podmanager.core.spec import parse_spec
from podmanager.emulator import launcher, record, state_file, vms
from podmanager.emulator import record as emulator_record
from podmanager.vm import procs

NOBODY = 65534
# Past Ray's temp dir (Ray 2.60, measured): "/session_<date>_<time>_<usec>_<pid>/sockets/<name>"
# with a 7-digit pid; the head's longest socket is dash_MetricsHead, a worker's plasma_store.
HEAD_SOCKETS = len("/session_2026-11-28_06-18-44_774151_1234567/sockets/dash_MetricsHead")
WORKER_SOCKETS = len("/session_2026-11-28_06-18-44_774151_1234567/sockets/plasma_store")
SOCKET_PATH_MAX = 107


@pytest.fixture
def parent(tmp_path, monkeypatch) -> Path:
    """/tmp of the test's own: the folder it computes is `<parent>/pm-<uid>`."""
    monkeypatch.setattr(paths, "MACHINES_PARENT", tmp_path)
    return tmp_path


def planted(parent: Path) -> Path:
    return parent / f"pm-{os.geteuid()}"


def test_a_missing_folder_is_made_the_owners_only(parent):
    made = paths.machines_dir()
    assert made == planted(parent)
    status = os.lstat(made)
    assert stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid() and stat.S_IMODE(status.st_mode) == 0o700
    assert paths.machines_dir() == made  # found again


def plant_other_users(parent: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a folder of another user's needs root")
    folder = planted(parent)
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    os.chmod(folder, 0o777)
    return folder


def plant_open(parent: Path) -> Path:
    folder = planted(parent)
    folder.mkdir()
    os.chmod(folder, 0o777)
    return folder


def plant_link(parent: Path) -> Path:
    target = parent / "elsewhere"
    target.mkdir(mode=0o700)  # the user's own, private: still a link anyone could have made
    planted(parent).symlink_to(target)
    return target


@pytest.mark.parametrize("plant, says", [(plant_other_users, f"belongs to uid {NOBODY}"),
                                         (plant_open, "has mode 777"), (plant_link, "is a link")])
def test_a_folder_made_first_by_another_user_open_or_a_link_is_refused_and_nothing_goes_in(parent, plant, says):
    inside = plant(parent)
    with pytest.raises(UnsafeFolderError) as refused:
        paths.machines_dir()
    assert says in refused.value.message and str(planted(parent)) in refused.value.message
    assert "rm -rf" in refused.value.hint
    # Neither a simulated VM's disk nor a Ray head's temp dir is made in it.
    with pytest.raises(UnsafeFolderError):
        vms.make_disk(Path(vms.temp_dir("c", "0123456789abcdef")), vms.CONTROLLER_IMAGE)
    assert list(inside.iterdir()) == []


def test_a_head_is_not_started_in_a_folder_of_another_users(parent):
    plant_other_users(parent)
    spec = parse_spec({"name": "c", "slices": [{"accelerator": "v4-8"}]}, dry_run=True)
    with pytest.raises(UnsafeFolderError):
        head.start_head(spec)
    assert procs.owned(procs.owner("c")) == [] and head.load_state("c") is None


def test_a_down_leaves_a_folder_of_another_users_alone(parent):
    inside = plant_other_users(parent)
    (inside / "theirs").mkdir()
    assert procs.stop_cluster("c") == 0  # no error: nothing of it is the cluster's
    assert (inside / "theirs").is_dir()


def test_every_ray_socket_path_fits_unix_sockets_limit(monkeypatch):
    """The real folder: a simulated TPU VM's workers, the controller VM's head on its disk, a
    local head."""
    root = vms.temp_dir("c", "0123456789abcdef")
    assert len(f"{root}/tmp/ray") + WORKER_SOCKETS <= SOCKET_PATH_MAX
    assert len(head.head_temp_dir("c")) + HEAD_SOCKETS <= SOCKET_PATH_MAX
    monkeypatch.setenv(procs.ROOT_ENV, root)
    assert head.head_temp_dir("c") == f"{root}/ray"
    assert len(head.head_temp_dir("c")) + HEAD_SOCKETS <= SOCKET_PATH_MAX


# Names that become files under $PODMANAGER_HOME (issue 34, item 4): a spec's project, zones
# and names are checked before anything is written or started, and every path built from a
# cluster's or project's name refuses one that would lead out of its folder.
def test_up_of_a_project_that_climbs_out_is_exit_2_before_anything_is_written(tmp_path, podmanager_home):
    project_folder = tmp_path / "work"
    project_folder.mkdir()
    spec = project_folder / "cluster.yaml"
    spec.write_text("name: escape\nproject: ../../../escape\nslices:\n  - accelerator: v4-8\n")
    result = CliRunner().invoke(app, ["up", "-f", str(spec), "--dry-run"])
    assert result.exit_code == 2
    assert "project: '../../../escape' is not a Google Cloud project id" in result.output
    assert "6-30 lowercase letters, digits or '-', starting with a letter" in result.output
    # Where the simulated cloud and the emulator's record would have gone: three levels up.
    assert [p.name for p in tmp_path.iterdir() if p.name != "pmhome"] == ["work"]
    assert not list(tmp_path.parent.glob("escape.*"))
    assert not (podmanager_home / "sim").exists()  # no emulator, no simulated cloud
    assert not (podmanager_home / "clusters").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "", "a\0b"])
def test_a_path_from_a_name_refuses_one_that_leads_out(name):
    for build in (paths.cluster_dir, paths.cluster_path, paths.sim_state_path, record.record_path, record.log_path):
        with pytest.raises(SpecError, match="cannot name a file"):
            build(name)


def test_a_plain_name_gives_its_folder_and_a_reader_makes_none(podmanager_home):
    assert paths.cluster_path("demo") == podmanager_home / "clusters" / "demo"
    assert not (podmanager_home / "clusters" / "demo").exists()
    assert paths.cluster_dir("demo").is_dir()
    assert paths.sim_state_path("my-project") == podmanager_home / "sim" / "my-project.json"


# The simulated cloud's folder (`paths.sim_home`): every file of the dry run's cloud lives there,
# so a process with a $PODMANAGER_HOME of its own (the dry run's controller VM) but the same
# $PODMANAGER_SIM_HOME finds the project's emulator and the simulated hosts; unset, it is the user's
# own state folder, not the home, so a dry-run cluster outlives its home as a cluster on Google
# Cloud does (issue 43, 2). The suite points every default at temporary folders (tests/conftest.py):
# no test writes to the machine's real ~/.local/state.
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
