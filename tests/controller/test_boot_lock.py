"""The TPU VMs' environment is resolved once (`controller/boot_lock.py`) and every boot installs
with it, so two VMs booted a week apart, the index having gained new releases in between, have
byte-identical environments. Against a package index built here (a find-links folder of
test-built wheels: no network), with the uv command the startup script runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from wheels import build_wheel

from podmanager.controller import boot_lock
from podmanager.controller.software import Software
from podmanager.controller.startup import render_startup_script
from podmanager.vm.uv_settings import uv_argv

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"


@pytest.fixture
def index(tmp_path: Path) -> Path:
    """Week one's index: pmlockapp 1.0, which needs pmlockdep (1.0 there)."""
    folder = tmp_path / "index"
    folder.mkdir()
    build_wheel(folder, "pmlockapp", "1.0", "", requires=("pmlockdep",))
    build_wheel(folder, "pmlockdep", "1.0", "")
    return folder


def offline(index: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(index.parent), "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(index),
            "UV_CACHE_DIR": str(index.parent / "uv-cache"), "PIP_CONFIG_FILE": "/dev/null"}


def boot(tmp_path: Path, name: str, index: Path, lock: str) -> str:
    """One VM's install as the startup script makes it (constraints: the lock), then its `uv pip freeze`."""
    venv = tmp_path / name
    env = offline(index)
    subprocess.run(uv_argv(["venv", "--quiet", "--python", sys.executable, str(venv)]), env=env, check=True)
    constraints = []
    if lock:
        (tmp_path / "lock.txt").write_text(lock)
        constraints = ["--constraint", str(tmp_path / "lock.txt")]
    subprocess.run(uv_argv(["pip", "install", "--quiet", "--no-index", "--find-links", str(index),
                            "--python", str(venv / "bin" / "python"), *constraints, "pmlockapp"]), env=env, check=True)
    return subprocess.run(uv_argv(["pip", "freeze", "--python", str(venv / "bin" / "python")]), env=env, check=True,
                          capture_output=True, text=True).stdout


def next_week(index: Path) -> None:
    build_wheel(index, "pmlockapp", "1.1", "", requires=("pmlockdep>=1.1",))
    build_wheel(index, "pmlockdep", "1.1", "")


def test_two_vms_booted_a_week_apart_from_one_lock_have_the_same_environment(tmp_path, index, monkeypatch):
    monkeypatch.setenv("PODMANAGER_HOME", str(tmp_path / "home"))
    lock = boot_lock.cached_lock("k1", ["pmlockapp"], python=PYTHON, platform=None, environ=offline(index))
    assert lock == "pmlockapp==1.0\npmlockdep==1.0\n"  # the whole environment, pinned

    first = boot(tmp_path, "vm-week-1", index, lock)
    next_week(index)
    # `up` a week later asks for the same software: the lock is read, not resolved again.
    assert boot_lock.cached_lock("k1", ["pmlockapp"], python=PYTHON, platform=None, environ=offline(index)) == lock
    second = boot(tmp_path, "vm-week-2", index, lock)

    assert first == second == "pmlockapp==1.0\npmlockdep==1.0\n"
    # Without the lock the second VM would have drifted: what the lock prevents.
    assert boot(tmp_path, "vm-unlocked", index, "") == "pmlockapp==1.1\npmlockdep==1.1\n"


def test_podmanagers_own_line_is_left_out_and_an_unresolvable_package_is_named(tmp_path, index):
    own = build_wheel(tmp_path, "podmanager", "0.1.0", "", requires=("pmlockdep",))
    lock = boot_lock.compile_lock([str(own)], python=PYTHON, platform=None, environ=offline(index))
    assert lock == "pmlockdep==1.0\n"  # the VMs install the wheel itself; its dependencies are locked

    with pytest.raises(boot_lock.SpecError) as refused:
        boot_lock.compile_lock(["pmlockapp", "no-such-package-here"], python=PYTHON, platform=None,
                               environ=offline(index))
    assert refused.value.exit_code == 2 and "no-such-package-here" in str(refused.value)


def test_the_startup_script_installs_with_the_lock_as_constraints():
    software = Software(python="3.11.7", ray="2.60.0", jax="0.10.2", uv="0.13.9", podmanager="0.1.0",
                        podmanager_source="podmanager==0.1.0", lock="pmlockapp==1.0\npmlockdep==1.0\n")
    script = render_startup_script("demo", software, "demo-ray-token")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "LOCK='pmlockapp==1.0\npmlockdep==1.0\n'\n" in script
    assert '"${constraints[@]}" "$requirement"' in script and 'constraints=(--constraint "$BASE/lock.txt")' in script
    assert software.install_key() != Software(**{**software.__dict__, "lock": ""}).install_key()


def test_the_default_environment_resolves_for_a_real_tpu_vm_from_the_package_index():
    """The pins every real VM gets (Ray and jax[tpu] at this environment's versions) resolve for
    the TPU VMs' platform against the package index itself, libtpu included: with uv's generic
    Linux target (manylinux_2_28) libtpu has no wheel, and every real `up` stopped here."""
    software = Software.pinned_to_controller(podmanager="0.1.0", podmanager_source="podmanager==0.1.0")
    lock = boot_lock.compile_lock(software.pinned_requirements(), python=software.python,
                                  platform=boot_lock.TPU_VM_PLATFORM)
    pinned = dict(line.split("==", 1) for line in lock.splitlines() if "==" in line)
    assert pinned["jax"] == software.jax and pinned["ray"] == software.ray
    assert "libtpu" in pinned, lock
