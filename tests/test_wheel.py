"""`controller/wheel.build_wheel`: a wheel of the running podmanager that uv installs into a fresh
virtualenv, the same bytes for the same tree, a new version for a changed one. No network:
the install takes no dependencies and uv runs offline."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from podmanager.controller.wheel import RUNNING_PACKAGE, build_wheel, wheel_version
from podmanager.core.version import __version__

TEMPLATE = "podmanager/controller/templates/startup-script.sh.tmpl"


def uv() -> str:
    from uv import find_uv_bin  # the binary podmanager depends on (the hosts install with it too)

    return find_uv_bin()


def run_uv(*args: str, cache: Path) -> None:
    env = {**os.environ, "UV_CACHE_DIR": str(cache), "UV_NO_PROGRESS": "1"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([uv(), *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheels"))


def test_the_wheel_is_named_by_the_code_version_and_a_hash_of_the_tree(wheel: Path) -> None:
    version = wheel_version(wheel)
    name, _, build, *tag = wheel.name.removesuffix(".whl").split("-")
    assert (name, tag) == ("podmanager", ["py3", "none", "any"])
    assert build[0].isdigit() and len(build) == 9  # the build tag: a hash of the installed metadata
    base, label = version.split("+")
    assert base == __version__
    assert label.startswith("h") and len(label) == 11 and int(label[1:], 16) >= 0


def test_the_wheel_holds_the_package_its_metadata_and_a_record_that_matches(wheel: Path) -> None:
    info = f"podmanager-{wheel_version(wheel)}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "podmanager/core/version.py" in names and TEMPLATE in names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        assert names[-1] == f"{info}/RECORD"
        metadata = archive.read(f"{info}/METADATA").decode()
        assert f"Version: {wheel_version(wheel)}" in metadata and "Name: podmanager" in metadata
        assert "Requires-Dist: ray[default]" in metadata
        assert 'extra == "test"' in metadata and "Provides-Extra: test" in metadata  # markers kept
        # The command as the running podmanager was installed with it (pyproject's, when last installed).
        installed = [e for e in importlib.metadata.distribution("podmanager").entry_points if e.name == "podmanager"]
        assert f"podmanager = {installed[0].value}" in archive.read(f"{info}/entry_points.txt").decode()
        assert "Tag: py3-none-any" in archive.read(f"{info}/WHEEL").decode()
        record = archive.read(f"{info}/RECORD").decode().splitlines()
        for line in record[:-1]:
            path, digest, size = line.rsplit(",", 2)
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data)), path
        assert sorted(line.split(",")[0] for line in record) == sorted(names)


def test_uv_installs_it_into_a_fresh_virtualenv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run_uv("venv", "--quiet", "--offline", "--python", os.path.realpath(sys.executable), str(venv),
           cache=tmp_path / "cache")
    python = venv / "bin" / "python"
    run_uv("pip", "install", "--quiet", "--offline", "--no-deps", "--python", str(python), str(wheel),
           cache=tmp_path / "cache")

    # -I: the venv's own site-packages, not this test's PYTHONPATH or working folder.
    check = ("import importlib.metadata as m, pathlib, podmanager, podmanager.core.version as v; "
             "root = pathlib.Path(podmanager.__file__).parent; "
             "print(v.__version__, m.version('podmanager'), root, "
             "(root / 'controller/templates/startup-script.sh.tmpl').is_file())")
    done = subprocess.run([str(python), "-I", "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    code_version, installed, root, template = done.stdout.split()
    assert (code_version, installed, template) == (__version__, wheel_version(wheel), "True")
    assert Path(root).is_relative_to(venv)
    assert (venv / "bin" / "podmanager").is_file()  # the console script


def test_the_same_tree_gives_the_same_bytes_and_an_existing_wheel_is_reused(wheel: Path, tmp_path: Path) -> None:
    again = build_wheel(tmp_path)
    assert again.name == wheel.name and again.read_bytes() == wheel.read_bytes()
    stamp = again.stat().st_mtime_ns
    assert build_wheel(tmp_path) == again and again.stat().st_mtime_ns == stamp  # not written again


def test_a_changed_tree_is_a_new_version(wheel: Path, tmp_path: Path) -> None:
    tree = tmp_path / "podmanager"
    shutil.copytree(RUNNING_PACKAGE, tree, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__" / "junk.cpython-311.pyc").write_bytes(b"not part of the wheel")
    assert build_wheel(tmp_path / "same", tree).name == wheel.name  # caches are no part of the tree

    (tree / "core" / "catalog.py").write_text((tree / "core" / "catalog.py").read_text() + "\n# changed\n")
    changed = build_wheel(tmp_path / "changed", tree)
    assert changed.name != wheel.name and wheel_version(changed).startswith(f"{__version__}+h")
