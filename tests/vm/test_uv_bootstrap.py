"""uv onto a VM whose Python has no pip: the startup script's `uv_bootstrap` run as the image's
`python3` would run it (no site-packages, so no pip), against a package index of the test's own
on loopback serving the simple API as JSON or HTML, with hashes, logins and wheels for other
machines."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import platform
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmanager.controller.startup import uv_bootstrap_code
from podmanager.vm import uv_bootstrap

VERSION = "0.99.1"
MACHINE = platform.machine()
OTHER_MACHINE = "aarch64" if MACHINE != "aarch64" else "x86_64"


def fake_wheel(version: str = VERSION, *, with_uv: bool = True) -> bytes:
    """A uv wheel as maturin builds it: the package, and the binaries in .data/scripts."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("uv/__init__.py", "")
        if with_uv:
            archive.writestr(f"uv-{version}.data/scripts/uv", f"#!/bin/sh\necho uv {version}\n")
        archive.writestr(f"uv-{version}.data/scripts/uvx", "#!/bin/sh\necho uvx\n")
        archive.writestr(f"uv-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buffer.getvalue()


class FakeIndex:
    """A simple-API index on loopback: `files` (filename -> bytes) listed on /simple/uv/ as JSON
    or as HTML, each with its SHA-256 unless `hashes` maps it to another; `login` required if set."""

    def __init__(self, files: dict[str, bytes], *, html: bool = False, hashes: dict[str, str] | None = None,
                 login: tuple[str, str] | None = None):
        self.files, self.html, self.hashes, self.login = files, html, hashes or {}, login
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if index.login is not None:
                    expected = "Basic " + base64.b64encode(":".join(index.login).encode()).decode()
                    if self.headers.get("Authorization") != expected:
                        return self._answer(401, b"login required", "text/plain")
                if self.path == "/simple/uv/":
                    return self._answer(200, *index.page())
                name = self.path.removeprefix("/files/")
                if name in index.files:
                    return self._answer(200, index.files[name], "application/octet-stream")
                self._answer(404, b"not found", "text/plain")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def digest(self, name: str) -> str:
        return self.hashes.get(name, hashlib.sha256(self.files[name]).hexdigest())

    def page(self) -> tuple[bytes, str]:
        if self.html:  # relative links with the hash in the fragment, as PEP 503 pages give them
            links = "".join(f'<a href="../../files/{n}#sha256={self.digest(n)}">{n}</a><br/>' for n in self.files)
            return f"<html><body>{links}</body></html>".encode(), "text/html"
        files = [{"filename": n, "url": f"/files/{n}", "hashes": {"sha256": self.digest(n)}} for n in self.files]
        return json.dumps({"meta": {"api-version": "1.0"}, "files": files}).encode(), \
            "application/vnd.pypi.simple.v1+json"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wheel_name(machine: str = MACHINE, version: str = VERSION) -> str:
    return f"uv-{version}-py3-none-manylinux_2_17_{machine}.manylinux2014_{machine}.whl"


@pytest.fixture
def serve() -> Iterator:
    started: list[FakeIndex] = []

    def start(files: dict[str, bytes], **options) -> FakeIndex:
        started.append(FakeIndex(files, **options))
        return started[-1]

    yield start
    for index in started:
        index.close()


def bootstrap(tmp_path: Path, index: FakeIndex, *options: str, **env: str) -> subprocess.CompletedProcess:
    """The script as the startup script runs it: `python3 -c SOURCE`, here with no site-packages
    (-S) and no user environment (-I), so pip and everything installed are out of its reach."""
    environ = {"PATH": os.environ["PATH"], "UV_DEFAULT_INDEX": index.url, "UV_HTTP_TIMEOUT": "10", **env}
    return subprocess.run([sys.executable, "-I", "-S", "-c", uv_bootstrap_code(), "--version", VERSION,
                           "--into", str(tmp_path / "uv"), *options], env=environ, capture_output=True, text=True,
                          timeout=60)


def test_a_boot_with_a_cache_takes_the_checked_binaries_from_it_without_the_index(tmp_path, serve):
    """The first boot fetches and checks the wheel and keeps its binaries; the next (another VM
    sharing the cache) links them with the index gone; a cache of another version is not taken."""
    index = serve({wheel_name(): fake_wheel()})
    cache = tmp_path / "cache"
    first = bootstrap(tmp_path / "vm1", index, "--cache", str(cache))
    assert first.returncode == 0, first.stderr
    index.close()
    second = bootstrap(tmp_path / "vm2", index, "--cache", str(cache))
    assert second.returncode == 0, second.stderr
    uv = tmp_path / "vm2" / "uv" / "bin" / "uv"
    assert subprocess.run([str(uv)], capture_output=True, text=True).stdout == f"uv {VERSION}\n"
    other = subprocess.run([sys.executable, "-I", "-S", "-c", uv_bootstrap_code(), "--version", "0.1.0", "--into",
                            str(tmp_path / "vm3" / "uv"), "--cache", str(cache)],
                           env={"PATH": os.environ["PATH"], "UV_DEFAULT_INDEX": index.url, "UV_HTTP_TIMEOUT": "2"},
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "uv 0.1.0 was not found" in other.stderr  # it asked the (closed) index


@pytest.mark.parametrize("html", [False, True], ids=["json-page", "html-page"])
def test_the_image_python_without_pip_installs_the_pinned_uv_for_this_machine(tmp_path, serve, html):
    index = serve({wheel_name(OTHER_MACHINE): fake_wheel(), wheel_name(version="0.1.0"): fake_wheel("0.1.0"),
                   wheel_name(): fake_wheel()}, html=html)
    done = bootstrap(tmp_path, index)
    assert done.returncode == 0, done.stderr
    uv = tmp_path / "uv" / "bin" / "uv"
    assert done.stdout.strip() == str(uv)
    assert subprocess.run([str(uv)], capture_output=True, text=True).stdout == f"uv {VERSION}\n"
    assert os.access(tmp_path / "uv" / "bin" / "uvx", os.X_OK)
    assert sorted(p.name for p in (tmp_path / "uv").iterdir()) == ["bin"]  # no staging folder left


def test_a_wheel_whose_hash_differs_from_the_index_is_refused_and_nothing_is_installed(tmp_path, serve):
    index = serve({wheel_name(): fake_wheel()}, hashes={wheel_name(): "0" * 64})
    done = bootstrap(tmp_path, index)
    assert done.returncode == 1
    assert f"{wheel_name()}: its SHA-256 is" in done.stderr and "the index says " + "0" * 64 in done.stderr
    assert not (tmp_path / "uv" / "bin").exists()


def test_an_index_without_a_wheel_for_this_machine_is_named_with_what_was_looked_for(tmp_path, serve):
    index = serve({wheel_name(OTHER_MACHINE): fake_wheel()})
    done = bootstrap(tmp_path, index)
    assert done.returncode == 1
    assert f"uv {VERSION} was not found: {index.url}/uv/ (no uv {VERSION} wheel for {MACHINE}, glibc" in done.stderr


def test_the_next_index_is_tried_when_the_first_lacks_it(tmp_path, serve):
    empty, full = serve({}), serve({wheel_name(): fake_wheel()})
    done = bootstrap(tmp_path, empty, UV_INDEX=full.url)
    assert done.returncode == 0, done.stderr


def test_an_index_that_wants_a_login_gets_the_one_netrc_names(tmp_path, serve):
    index = serve({wheel_name(): fake_wheel()}, login=("oauth2accesstoken", "vm-token"))
    refused = bootstrap(tmp_path, index)
    assert refused.returncode == 1 and f"{index.url}/uv/ (HTTP 401 Unauthorized)" in refused.stderr
    logins = tmp_path / "netrc"
    logins.write_text("machine 127.0.0.1 login oauth2accesstoken password vm-token\n")
    logins.chmod(0o600)
    done = bootstrap(tmp_path, index, NETRC=str(logins))
    assert done.returncode == 0, done.stderr
    assert "vm-token" not in done.stdout + done.stderr


def test_a_wheel_without_the_binary_is_refused(tmp_path, serve):
    index = serve({wheel_name(): fake_wheel(with_uv=False)})
    done = bootstrap(tmp_path, index)
    assert done.returncode == 1 and f"holds no uv-{VERSION}.data/scripts/uv" in done.stderr


@pytest.mark.parametrize(("tag", "libc", "fits"), [
    ("manylinux_2_17_x86_64", (2, 35), True),  # a TPU VM's Ubuntu 22.04
    ("manylinux_2_17_x86_64", (2, 36), True),  # the controller's Debian 12
    ("manylinux_2_38_x86_64", (2, 36), False),  # built for a newer glibc
    ("manylinux2014_x86_64", (2, 17), True),
    ("manylinux1_x86_64", (2, 5), True),
    ("manylinux_2_17_aarch64", (2, 36), False),  # another architecture
    ("musllinux_1_1_x86_64", (2, 36), False),
    ("manylinux_2_17_x86_64", None, False),  # not glibc
])
def test_which_platform_tags_run_here(tag, libc, fits):
    assert uv_bootstrap.fits(tag, "x86_64", libc) is fits
