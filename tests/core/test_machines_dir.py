"""The folder of every local machine podmanager starts (`paths.machines_dir`, /tmp/pm-<uid>):
its name is anyone's to compute, so a folder another user made first, one open to others or a
link is refused, and nothing is put in it (issue 43, 1: another user planted a program in a
simulated VM's disk, which the owner then ran). Real folders, a real other owner (the suite runs
as root; that case is skipped otherwise), in a parent of the test's own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from podmanager.controller import head
from podmanager.core import paths
from podmanager.core.errors import UnsafeFolderError
from podmanager.core.spec import parse_spec
from podmanager.emulator import vms
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
