"""The package index stand-in (emulator/package_index.py): the simulated VMs' PyPI answers their
uv with the index's own pages and files, fetched from it once and kept, with PyPI's cache
headers; a VM's image names it as its default index, which the spec's index overrides."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fake_index import serve_index
from uv import find_uv_bin

from podmanager.emulator import vms
from podmanager.emulator.package_index import (
    CACHE_CONTROL,
    FILE_CACHE_CONTROL,
    IndexStandIn,
    address,
)
from podmanager.vm.uv_settings import pip_settings

HELLO = "def hello():\n    return 'hello from the index'\n"


@pytest.fixture
def upstream(tmp_path):
    with serve_index(tmp_path / "index") as index:
        index.add("hellopkg", "1.0", HELLO)
        yield index


def stand_in(cache: Path, upstream_url: str) -> IndexStandIn:
    served = IndexStandIn(cache, upstream_url)
    served.start("127.0.0.1", 0)  # not the shared address: this one reads a test's index
    return served


def uv_install(index_url: str, uv_cache: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """What a VM's boot does with its index: uv installs from it, with a cache of its own."""
    env = {"PATH": os.environ["PATH"], "HOME": str(target.parent), "UV_CACHE_DIR": str(uv_cache), "UV_NO_CONFIG": "1"}
    return subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--target", str(target), "--python",
                           sys.executable, "--index-url", index_url, "hellopkg==1.0"],
                          env=env, text=True, capture_output=True, timeout=120)


WHEEL = "hellopkg-1.0-py3-none-any.whl"


def page_requests(index) -> list[str]:
    """The index's page of hellopkg asked for (its wheel is not a page)."""
    return [path for path in index.requests if path.rstrip("/") == "/simple/hellopkg"]


def wheel_requests(index) -> list[str]:
    return [path for path in index.requests if path.endswith(WHEEL)]


def test_a_vms_uv_installs_what_the_index_has_through_the_stand_in(tmp_path, upstream):
    served = stand_in(tmp_path / "cache", upstream.url)
    try:
        done = uv_install(served.url, tmp_path / "uv-1", tmp_path / "vm-1")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "vm-1" / "hellopkg" / "__init__.py").read_text() == HELLO
        with urllib.request.urlopen(served.url + "hellopkg/") as answer:
            page = answer.read().decode()
            assert answer.headers["Cache-Control"] == CACHE_CONTROL  # PyPI's: uv asks again after ten minutes
        # The file's link is the index's, as the stand-in serves it: the wheel is the index's own.
        upstream_wheel = f"{upstream.url}hellopkg/{WHEEL}".replace("http://", "")
        link = f"{served.url.replace('/simple/', '/files/')}http/{upstream_wheel}"
        assert f'href="{link}"' in page
        with urllib.request.urlopen(link) as answer:
            assert answer.read() == (upstream.root / "simple" / "hellopkg" / WHEEL).read_bytes()
            assert answer.headers["Cache-Control"] == FILE_CACHE_CONTROL  # files.pythonhosted.org's: never asked again
        with pytest.raises(urllib.error.HTTPError) as missing:  # the index's 404 is the stand-in's
            urllib.request.urlopen(served.url + "no-such-package/")
        assert missing.value.code == 404
    finally:
        served.stop()


def test_a_second_vms_install_asks_the_index_for_no_page_the_stand_in_holds(tmp_path, upstream):
    """Two VMs with empty uv caches, and a second emulator's stand-in over the same cache
    folder: the index is asked for the page and the wheel once."""
    served = stand_in(tmp_path / "cache", upstream.url)
    try:
        assert uv_install(served.url, tmp_path / "uv-1", tmp_path / "vm-1").returncode == 0
        assert len(page_requests(upstream)) == len(wheel_requests(upstream)) == 1
        done = uv_install(served.url, tmp_path / "uv-2", tmp_path / "vm-2")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "vm-2" / "hellopkg" / "__init__.py").exists()
    finally:
        served.stop()
    again = stand_in(tmp_path / "cache", upstream.url)  # another emulator, the same shared cache
    try:
        assert uv_install(again.url, tmp_path / "uv-3", tmp_path / "vm-3").returncode == 0
        assert again.upstream_requests == 0
    finally:
        again.stop()
    assert len(page_requests(upstream)) == len(wheel_requests(upstream)) == 1


def test_every_emulator_of_a_user_serves_one_index_at_one_address(tmp_path, upstream):
    """uv keys its cache by the index's URL: two emulators' stand-ins share the address (the
    second binds it too), and the one left answers when the other stops."""
    first, second = IndexStandIn(tmp_path / "cache", upstream.url), IndexStandIn(tmp_path / "cache", upstream.url)
    try:
        assert first.start() == second.start() == "http://%s:%d/simple/" % address(first.upstream)
        first.stop()
        with urllib.request.urlopen(second.url + "hellopkg/") as answer:
            assert answer.status == 200
    finally:
        first.stop()
        second.stop()
    assert address("https://pypi.org/simple/") != address(upstream.url)  # another index, another port


def test_the_image_names_the_stand_in_as_its_default_index_and_the_specs_index_overrides_it(tmp_path):
    root = tmp_path / "vm"
    vms.make_disk(root, "bare", index_url="http://127.0.80.1:20001/simple/")
    env = vms.guest_env(root, 1234, "http://127.0.0.1:1")
    env["HOME"] = str(root / "root")  # the startup script's HOME
    assert pip_settings(env)["index-url"] == "http://127.0.80.1:20001/simple/"
    spec_conf = root / "root" / ".config" / "pip" / "pip.conf"  # where the script writes boot.index_url
    spec_conf.parent.mkdir(parents=True)
    spec_conf.write_text("[global]\nindex-url = http://127.0.0.1:9/simple/\n")
    assert pip_settings(env)["index-url"] == "http://127.0.0.1:9/simple/"
