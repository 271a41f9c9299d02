"""A simulated VM's disk starts as its image has it: the image's `python3` first on its PATH,
without pip or anything installed on this machine (Debian 12's Python has no pip), so a boot
step that needs pip fails in the dry run as on Google Cloud."""

from __future__ import annotations

import subprocess

from podmanager.emulator import vms


def test_a_vms_python3_is_the_images_without_pip_or_this_machines_packages(tmp_path):
    root = tmp_path / "machine" / "root"
    vms.make_disk(root, "bare")
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
