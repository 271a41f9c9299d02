"""core/machine_folders.py: who owns a local machine and where its folders are, named without the
process tools (the laptop removes a dry run's VM folder with them)."""

from __future__ import annotations

from pathlib import Path

from podmanager.core import machine_folders, paths


def test_the_vms_folder_is_the_simulated_clouds_not_the_homes_and_goes_only_once_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("PODMANAGER_SIM_HOME", str(tmp_path / "cloud"))
    vms_folder = Path(machine_folders.temp_dir_of(machine_folders.sim_owner("c")))
    assert vms_folder != Path(machine_folders.owner_temp_dir("c"))
    assert vms_folder.parent == Path(paths.machines_dir())
    (vms_folder / "0123abcd").mkdir(parents=True)  # a VM still there (a controller VM running its own `down`)
    machine_folders.remove_vms_folder("c")
    assert (vms_folder / "0123abcd").is_dir()
    (vms_folder / "0123abcd").rmdir()
    machine_folders.remove_vms_folder("c")
    assert not vms_folder.exists()
    machine_folders.remove_vms_folder("c")  # nothing left: nothing to do, no error
