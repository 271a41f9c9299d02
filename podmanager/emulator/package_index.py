"""The package index stand-in: the simulated VMs' PyPI, served on loopback by the emulator.

A real VM's uv reads each package's page of PyPI's simple API (PEP 503 and 691), which PyPI
sends with `Cache-Control: max-age=600`, and the files it links, which files.pythonhosted.org
sends as immutable: a second install within ten minutes asks nothing again. This machine reaches
its index through a proxy that drops those headers, so a simulated VM's uv asked again for each
of the lock's ~100 pages and files at every boot (4-6 s a boot: benchmarks/RESULTS.md, "A
simulated VM starts from its image"). The stand-in answers the VMs' uv as the configured index
answers (`upstream_index`: this machine's pip and uv settings, else PyPI), with PyPI's headers:
- a page fetched from the index once and kept for PyPI's ten minutes (requests-cache, in the
  VMs' shared cache folder), its files' links pointed at the stand-in;
- a file fetched from where the page links it once and kept: files are immutable by name (an
  index never replaces a file, PEP 503), and uv checks each against the page's SHA-256.

Why it cannot change what a VM installs: the pages and files are the index's own (a 404 is the
index's 404); the versions are the lock's, which `up` resolved against the index itself; a page
is at most ten minutes older than the index's, as uv's own cache allows on a real VM. It stands
where a real VM's PyPI is: the default index of the VM's image (`vms.make_disk`), which the
spec's `boot.index_url` overrides as it overrides PyPI.

One address for every emulator of this user reading this index (`address`): uv keys its cache
of pages and wheels by the index's URL, so a URL that changed with each emulator would make
every new emulator's VMs download Ray and JAX again. Each emulator binds it with SO_REUSEPORT
(the kernel lets only the same user share a port), serving the same cache: whichever answers,
the answer is the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Mapping
from urllib.parse import urljoin

import requests
import requests_cache

from podmanager.core.peer import OwnerOnlyRequests
from podmanager.vm.uv_settings import uv_env

log = logging.getLogger(__name__)

PYPI = "https://pypi.org/simple/"
HOST = "127.0.80.1"  # a loopback address of its own: no ephemeral port of 127.0.0.1 takes its port
PAGE_MAX_AGE_S = 600  # PyPI's own Cache-Control on a simple page (Warehouse's simple views: 10 minutes)
CACHE_CONTROL = f"max-age={PAGE_MAX_AGE_S}, public"
FILE_CACHE_CONTROL = "max-age=365000000, immutable, public"  # files.pythonhosted.org's on every file
JSON_PAGE = "application/vnd.pypi.simple.v1+json"
# Asked of the index for a client that sends no Accept (uv's own preference): PEP 691's JSON, else HTML.
DEFAULT_ACCEPT = f"{JSON_PAGE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
UPSTREAM_TIMEOUT_S = (10, 120)  # connect, read
_PAGE = re.compile(r"^/simple/([A-Za-z0-9._-]+)/?$")
_FILE = re.compile(r"^/files/(https?)/([^/]+)/(.+)$")  # /files/SCHEME/HOST/PATH: the file at SCHEME://HOST/PATH
_HREF = re.compile(r'href="([^"]*)"')


def address(upstream: str) -> tuple[str, int]:
    """The stand-in's address for this user and index: the same for every emulator of theirs;
    another user's, or another index's, another port (below Linux's ephemeral range, 32768 up),
    so no emulator shares its port with a stand-in that reads another index."""
    digest = hashlib.sha256(f"{os.geteuid()} {upstream}".encode()).digest()
    return HOST, 20000 + int.from_bytes(digest[:4], "big") % 10000


def upstream_index(environ: Mapping[str, str]) -> str:
    """The index the stand-in reads: the one uv would use here (`UV_DEFAULT_INDEX`, or pip's
    `index-url` as `uv_settings` reads it), else PyPI; with a trailing slash."""
    env = uv_env(environ)
    found = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL") or PYPI
    return found.rstrip("/") + "/"


def file_link(link: str, page_url: str, files_root: str) -> str:
    """A page's link to a file, pointed at the stand-in's `files_root`: the file's absolute URL
    (against the page's own) as /files/SCHEME/HOST/PATH, its #fragment (the hash) kept."""
    url, _, fragment = urljoin(page_url, link).partition("#")
    scheme, rest = url.split("://", 1)
    return f"{files_root}{scheme}/{rest}" + (f"#{fragment}" if fragment else "")


def served_links(body: bytes, content_type: str, page_url: str, files_root: str) -> bytes:
    """A page with each file's link pointed at the stand-in (`file_link`)."""
    if content_type.split(";")[0].strip() == JSON_PAGE:
        page = json.loads(body)
        for file in page.get("files", []):
            file["url"] = file_link(file["url"], page_url, files_root)
        return json.dumps(page).encode()
    text = body.decode("utf-8", "replace")
    return _HREF.sub(lambda link: f'href="{file_link(link.group(1), page_url, files_root)}"', text).encode()


class _ReusedPortServer(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # every emulator of this user
        super().server_bind()


class IndexStandIn:
    """The stand-in, served from a background thread: `start()`, `url`, `stop()`."""

    def __init__(self, cache_dir: Path, upstream: str, verify: str | bool = True) -> None:
        """`cache_dir`: where the pages are kept (shared by every emulator of this user);
        `upstream`: the index read; `verify`: its certificate bundle (True: requests' own)."""
        self.upstream = upstream.rstrip("/") + "/"
        cache_dir.mkdir(parents=True, exist_ok=True)
        # Kept whatever the index's headers say (its proxy sends none), for PyPI's max-age; a page
        # asked for as JSON and one asked for as HTML are two entries.
        self.session = requests_cache.CachedSession(
            str(cache_dir / "pages"), backend="sqlite", expire_after=PAGE_MAX_AGE_S, cache_control=False,
            allowable_codes=(200, 404), match_headers=["Accept"])
        self.session.verify = verify
        self.files_dir = cache_dir / "files"
        self.upstream_requests = 0  # pages and files fetched from the index (not from the cache)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.url = self.files_root = ""

    @classmethod
    def for_this_machine(cls, cache_dir: Path, environ: Mapping[str, str] | None = None) -> IndexStandIn:
        """The stand-in of the index this machine's uv uses, with the certificates pip is told of."""
        env = uv_env(os.environ if environ is None else environ)
        return cls(cache_dir, upstream_index(env), env.get("SSL_CERT_FILE") or True)

    def start(self, host: str = "", port: int = -1) -> str:
        """Serve (by default on `address(upstream)`; where that cannot be bound, on any free
        port of 127.0.0.1, which only costs the VMs' cache); returns the index URL to give uv."""
        handler = self._handler()
        wanted = address(self.upstream) if port < 0 else (host or HOST, port)
        try:
            self._server = _ReusedPortServer(wanted, handler)
        except OSError as error:
            log.warning("package index stand-in: cannot serve on %s:%d (%s); serving on another port, so the "
                        "VMs' uv cache starts afresh for it", *wanted, error)
            self._server = _ReusedPortServer(("127.0.0.1", 0), handler)
        bound_host, bound_port = self._server.server_address[:2]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="package-index",
                         daemon=True).start()
        self.url = f"http://{bound_host}:{bound_port}/simple/"
        self.files_root = f"http://{bound_host}:{bound_port}/files/"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.session.close()

    def page(self, name: str, accept: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of project `name`'s page as the index has it."""
        with self._lock_of(name):  # VMs booting at once ask the index once
            try:
                response = self.session.get(self.upstream + name + "/", headers={"Accept": accept},
                                            timeout=UPSTREAM_TIMEOUT_S)
            except requests.RequestException as error:
                return 502, "text/plain", f"the package index {self.upstream} did not answer: {error}\n".encode()
            if not getattr(response, "from_cache", False):
                self.upstream_requests += 1
        content_type = response.headers.get("Content-Type", "text/html")
        if response.status_code != 200:
            return response.status_code, content_type, response.content
        return 200, content_type, served_links(response.content, content_type, response.url, self.files_root)

    def file(self, scheme: str, host: str, path: str) -> tuple[int, Path | bytes]:
        """(status, the kept file or an error's text) of the file at SCHEME://HOST/PATH, fetched
        once (as a real index's file never changes)."""
        if ".." in path.split("/") or host in (".", ".."):  # nothing outside the kept files' folder
            return 404, b"no such file\n"
        kept = self.files_dir / scheme / host / path
        with self._lock_of(str(kept)):  # one download of a file, however many VMs ask
            if kept.is_file():
                return 200, kept
            try:
                with requests.get(f"{scheme}://{host}/{path}", stream=True, timeout=UPSTREAM_TIMEOUT_S,
                                  verify=self.session.verify) as response:
                    self.upstream_requests += 1
                    if response.status_code != 200:
                        return response.status_code, response.content
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    partial = kept.with_name(f"{kept.name}.{os.getpid()}.{threading.get_ident()}.part")
                    with open(partial, "wb") as out:
                        for chunk in response.iter_content(1 << 20):
                            out.write(chunk)
                    os.replace(partial, kept)  # whole or absent: another emulator may read it at once
            except (requests.RequestException, OSError) as error:
                return 502, f"{scheme}://{host}/{path} could not be fetched: {error}\n".encode()
        return 200, kept

    def _lock_of(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name.lower(), threading.Lock())

    def _handler(self) -> type[OwnerOnlyRequests]:
        stand_in = self

        class Handler(OwnerOnlyRequests):  # the owner's VMs only, as every server of the dry run
            protocol_version = "HTTP/1.1"  # uv keeps its connection for the next page

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._answer(body=True)

            def do_HEAD(self) -> None:  # noqa: N802 - uv asks a file's size before it downloads it
                self._answer(body=False)

            def _answer(self, body: bool) -> None:
                path = self.path.split("?", 1)[0]
                page, file = _PAGE.match(path), _FILE.match(path)
                if page is not None:
                    status, content_type, text = stand_in.page(page.group(1), self.headers.get("Accept") or DEFAULT_ACCEPT)
                    self._send(status, content_type, text, CACHE_CONTROL if status in (200, 404) else "", body)
                elif file is not None:
                    status, found = stand_in.file(*file.groups())
                    if isinstance(found, Path):
                        self._send_file(found, body)
                    else:
                        self._send(status, "text/plain", found, "", body)
                else:
                    self._send(404, "text/plain", b"the stand-in serves the simple API's pages and their files\n",
                               "", body)

            def _send(self, status: int, content_type: str, text: bytes, cache_control: str, body: bool) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(text)))
                if cache_control:
                    self.send_header("Cache-Control", cache_control)
                self.end_headers()
                if body:
                    self.wfile.write(text)

            def _send_file(self, kept: Path, body: bool) -> None:
                with open(kept, "rb") as source:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(os.fstat(source.fileno()).st_size))
                    self.send_header("Cache-Control", FILE_CACHE_CONTROL)
                    self.end_headers()
                    if body:
                        shutil.copyfileobj(source, self.wfile, 1 << 20)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
                pass

        return Handler
