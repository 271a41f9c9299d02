"""The spec's package index (`boot.index_url`) reaches the VMs: a simulated VM's boot asks it for
what it installs, a run's requirements on the host install from it, and the lock `up` compiles
for the VMs resolves against it, not against this machine's index. Against an index served
here (fake_index.py) holding wheels built here: no network, no Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_index import serve_index
from fake_metadata import serve_metadata
from wheels import build_wheel

from podmanager.controller import boot_lock
from podmanager.controller.software import Software
from podmanager.controller.staging import resolve_software
from podmanager.controller.startup import render_startup_script
from podmanager.core.spec import parse_spec
from podmanager.vm import environments

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"


@pytest.fixture
def index(tmp_path: Path):
    with serve_index(tmp_path / "index") as served:
        served.add("pmidxpkg", "1.0", "VALUE = 3\n", requires=("pmidxdep",))
        served.add("pmidxdep", "1.0")
        yield served


@pytest.fixture
def no_pip_settings(monkeypatch):
    """This machine's own index settings out of the way: only what a test gives counts."""
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")) or name in ("XDG_CONFIG_HOME", "XDG_CONFIG_DIRS"):
            monkeypatch.delenv(name)


def test_a_vm_boots_from_the_specs_index_and_its_runs_install_from_it(tmp_path, index, monkeypatch,
                                                                        no_pip_settings):
    spec = parse_spec({"name": "idx", "backend": "simulated", "slices": [{"accelerator": "v4-8"}],
                       "boot": {"podmanager": "0.1.0", "index_url": index.url},
                       # No lock to resolve: the test's index holds no Ray (the script is the same).
                       "simulation": {"vm_image": "controller"}})
    software = resolve_software(spec)
    assert (software.index_url, software.extra_index_urls) == (index.url, ())
    script = render_startup_script("idx", software, "idx-ray-token")

    vm = tmp_path / "vm"
    with serve_metadata("vm-token") as metadata:
        # The boot, as a bare simulated VM runs it: its install of uv asks the spec's index,
        # which has no uv, so the boot fails there and says so.
        done = subprocess.run(["bash", "-c", script], env={
            "PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PODMANAGER_ROOT": str(vm),
            "PODMANAGER_METADATA_URL": metadata.root, "GCE_METADATA_IP": metadata.address},
            capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "/simple/uv/" in index.requests
    assert metadata.attributes["podmanager/boot"] == "error"
    assert "install uv" in metadata.attributes["podmanager/boot-detail"]
    assert (vm / "root" / ".config" / "pip" / "pip.conf").read_text() == f"[global]\nindex-url = {index.url}\n"

    # A run's requirements on that host: the host's settings are the spec's index.
    monkeypatch.setenv("HOME", str(vm / "root"))
    env = environments.prepare(["pmidxpkg==1.0"], root=tmp_path / "host-cache")
    found = subprocess.run([env.python, "-c", "import pmidxpkg; print(pmidxpkg.VALUE)"], capture_output=True,
                           text=True, check=True)
    assert found.stdout == "3\n" and "/simple/pmidxpkg/" in index.requests


def test_the_lock_resolves_against_the_specs_index_not_this_machines(tmp_path, index, no_pip_settings):
    elsewhere = tmp_path / "this-machines-wheels"
    elsewhere.mkdir()
    build_wheel(elsewhere, "pmidxpkg", "2.0", "")  # newer, but the VMs' index does not have it
    here = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull, "UV_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(elsewhere), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    assert boot_lock.compile_lock(["pmidxpkg"], python=PYTHON, platform=None, environ=here) == "pmidxpkg==2.0\n"
    locked = boot_lock.compile_lock(["pmidxpkg"], python=PYTHON, platform=None, environ=here, index_url=index.url)
    assert locked == "pmidxdep==1.0\npmidxpkg==1.0\n"


def test_the_lock_of_a_software_is_compiled_with_its_index(monkeypatch):
    asked: dict[str, object] = {}
    monkeypatch.setattr(boot_lock, "compile_lock", lambda requirements, **options: asked.update(options) or "")
    software = Software(python=PYTHON, ray="2.60.0", jax="0.10.2", uv="0.13.9", podmanager="0.1.0",
                        podmanager_source="podmanager==0.1.0", index_url="https://pypi.example.com/simple/",
                        extra_index_urls=("https://more.example.com/simple/",))
    boot_lock.lock_for(software, None, simulated=False)
    assert (asked["index_url"], asked["extra_index_urls"]) == (software.index_url, software.extra_index_urls)
    # Another index is another lock (and another install): the key says so.
    assert software.install_key() != Software(**{**software.__dict__, "index_url": ""}).install_key()


AR_INDEX = "https://europe-west4-python.pkg.dev/my-proj/wheels/simple/"


class FakeCredentials:
    token = None

    def refresh(self, request) -> None:  # what google-auth's refresh leaves: a fresh access token
        self.token = "ya29.controller-token"


def test_an_artifact_registry_lock_signs_in_with_this_machines_google_credentials(monkeypatch):
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    seen: dict[str, object] = {}

    def uv(argv, env, **options):
        seen.update(argv=argv, env=env, netrc=Path(env["NETRC"]).read_text())
        return subprocess.CompletedProcess(argv, 0, "pmidxpkg==1.0\n", "")

    monkeypatch.setattr(boot_lock.subprocess, "run", uv)
    monkeypatch.setattr(google.auth, "default", lambda scopes: (FakeCredentials(), "my-proj"))
    assert boot_lock.compile_lock(["pmidxpkg"], python=PYTHON, platform=None, environ={}, index_url=AR_INDEX) \
        == "pmidxpkg==1.0\n"
    assert seen["netrc"] == ("machine europe-west4-python.pkg.dev login oauth2accesstoken password "
                             "ya29.controller-token\n")
    assert "ya29" not in " ".join(seen["argv"]) and seen["env"]["UV_DEFAULT_INDEX"] == AR_INDEX

    def no_credentials(scopes):
        raise DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    with pytest.raises(boot_lock.SpecError) as refused:
        boot_lock.compile_lock(["pmidxpkg"], python=PYTHON, platform=None, environ={}, index_url=AR_INDEX)
    assert str(refused.value).startswith("boot.index_url: ") and refused.value.exit_code == 2
    assert "gcloud auth application-default login" in refused.value.hint
