"""A simulated VM's disk starts as its image has it: the image's `python3` first on its PATH,
without pip or anything installed on this machine (Debian 12's Python has no pip), so a boot
step that needs pip fails in the dry run as on Google Cloud. And a VM that installs at boot
starts from nothing of this machine: not its virtual environment, PATH, PYTHONPATH or
VIRTUAL_ENV; the Python the script's uv makes its environment from is in the VM's own root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from podmanager.emulator import vms


def test_a_vms_python3_is_the_images_without_pip_or_this_machines_packages(tmp_path):
    root = tmp_path / "machine" / "root"
    vms.make_disk(root, "bare", vms.DEBIAN_12)
    env = vms.guest_env(root, metadata_port=1, rest_api="http://127.0.0.1:1")

    def python3(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", 'exec python3 "$@"', "python3", *args], env=env, capture_output=True,
                              text=True, timeout=60, cwd=root)

    found = subprocess.run(["bash", "-c", "command -v python3"], env=env, capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(root / "usr" / "bin" / "python3")
    no_pip = python3("-m", "pip", "--version")
    assert no_pip.returncode == 1 and "No module named pip" in no_pip.stderr
    for installed in ("podmanager", "ray", "google.cloud.tpu_v2"):  # nothing of this machine's environment
        assert python3("-c", f"import {installed}").returncode == 1, installed
    assert python3("-c", "import json, urllib.request, zipfile; print('stdlib')").stdout == "stdlib\n"


def test_a_vm_that_installs_at_boot_gets_nothing_of_this_machines_environment(tmp_path, monkeypatch) -> None:
    """The laptop's PATH (its virtual environment's bin first), PYTHONPATH and VIRTUAL_ENV never
    reach the VM; the Python uv finds there for the controller's version is the VM's own
    (where uv's download would be), and an environment made from it sees nothing outside the root."""
    laptop_bin = str(Path(sys.prefix) / "bin")
    monkeypatch.setenv("PATH", os.pathsep.join([laptop_bin, "/opt/laptop-tools/bin", os.environ["PATH"]]))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "laptop-tree"))
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    root = tmp_path / "machine" / "root"
    vms.make_disk(root, "bare")
    env = {**vms.guest_env(root, metadata_port=1, rest_api="http://127.0.0.1:1"), **vms.image_env("bare")}

    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    path = env["PATH"].split(os.pathsep)
    assert laptop_bin not in path and "/opt/laptop-tools/bin" not in path, path  # the image's PATH only
    assert path[0] == str(root / "usr" / "bin")
    assert not (root / "opt" / "podmanager" / "venv").exists()  # nothing linked

    # The script's uv (this machine's uv binary stands in for the one it bootstraps) makes the
    # environment as the startup script does, with the VM's environment only.
    from uv import find_uv_bin

    venv = root / "opt" / "podmanager" / "envs" / "test"
    made = subprocess.run([find_uv_bin(), "venv", "--quiet", "--python", vms.platform.python_version(), str(venv)],
                          env={**env, "HOME": str(root / "root"), "UV_PYTHON_INSTALL_DIR": str(root / "opt/podmanager/python"),
                               "UV_PYTHON_DOWNLOADS": "never"},
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    shown = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import os, sys; print(repr((sys.path, os.environ.get('PYTHONPATH'), "
                            "os.environ.get('VIRTUAL_ENV'))))"],
                           env=env, cwd=root, capture_output=True, text=True, timeout=60)
    sys_path, pythonpath, virtual_env = eval(shown.stdout)  # noqa: S307 - our own repr
    assert pythonpath is None and virtual_env is None
    assert all(entry == "" or Path(entry).is_relative_to(root) for entry in sys_path), sys_path
    assert not any(entry.startswith(sys.prefix) for entry in sys_path)
    imports = subprocess.run([str(venv / "bin" / "python"), "-c", "import podmanager"], env=env, cwd=root,
                             capture_output=True, text=True, timeout=60)
    assert imports.returncode == 1 and "No module named 'podmanager'" in imports.stderr


def test_a_tpu_vms_python3_is_ubuntus_3_10_with_pip(tmp_path) -> None:
    if vms.ubuntu_python() is None:
        pytest.skip("this machine has no CPython 3.10 to stand in for Ubuntu 22.04's")
    root = tmp_path / "machine" / "root"
    vms.make_disk(root, "bare", vms.UBUNTU_2204)
    env = vms.guest_env(root, metadata_port=1, rest_api="http://127.0.0.1:1")
    run = subprocess.run(["bash", "-c", "python3 -c 'import sys; print(sys.version_info[:2])' && python3 -m pip --version"],
                         env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("(3, 10)\n") and "pip " in run.stdout
