"""uv onto a VM whose Python has no pip, with the image's own `python3` and nothing else.

Debian 12's `python3` (the controller VM's image) comes without pip or venv
(https://wiki.debian.org/Python: pip is the separate `python3-pip` package), so the startup
script cannot `pip install uv`. This file, run by that `python3` before anything is installed,
does what that install would: it reads the package index's page for `uv` (the simple repository
API: JSON, https://peps.python.org/pep-0691/, or HTML, https://peps.python.org/pep-0503/), picks
the wheel of the pinned version built for this machine (its architecture, and a manylinux tag
this machine's glibc meets: https://peps.python.org/pep-0600/), downloads it, checks its
SHA-256 when the index gives one, and unpacks the `uv` and `uvx` binaries the wheel carries in
its `.data/scripts` folder into `<into>/bin`. With `--cache DIR`, the binaries of a wheel checked
so are kept there and a later boot links them from there without asking the index (a VM whose
disk kept its cache; the dry run's VMs share one).

The index is uv's as the startup script set it up from pip's settings (`UV_DEFAULT_INDEX`, then
each `UV_INDEX`; PyPI when none is set); an index host named in the netrc file `NETRC` names
(an Artifact Registry repository, signed in with the VM's token) gets its login as HTTP basic
authentication, as pip and uv send it.

Standard library only, and Python 3.8's. Exit 0 with uv in place, else 1 and a line saying what
is missing and where it looked.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html.parser
import io
import json
import netrc
import os
import platform
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from typing import Dict, List, Optional, Tuple

PYPI = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
# manylinux's older names and the glibc each stands for (PEP 600's table).
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_TAG = re.compile(r"^(manylinux_(\d+)_(\d+)|manylinux1|manylinux2010|manylinux2014)_(\w+)$")


class BootstrapError(Exception):
    """What stops uv from being installed, said for the boot's error report."""


def index_urls(environ: Dict[str, str]) -> List[str]:
    """The indexes to look in, in uv's order: the default one, then the extra ones."""
    default = environ.get("UV_DEFAULT_INDEX") or environ.get("UV_INDEX_URL") or PYPI
    extra = (environ.get("UV_INDEX", "") + " " + environ.get("UV_EXTRA_INDEX_URL", "")).split()
    urls = [default] + [entry.split("=", 1)[1] if "=" in entry.split("://", 1)[0] else entry for entry in extra]
    return [url.rstrip("/") for url in urls]


def wheel_tags(filename: str) -> Tuple[str, List[str]]:
    """A wheel's version and its platform tags (`uv-0.9.5-py3-none-a.b.whl` -> 0.9.5, [a, b])."""
    parts = filename[:-len(".whl")].split("-")
    return parts[1], parts[-1].split(".")


def glibc() -> Optional[Tuple[int, int]]:
    """This machine's glibc version (None: not glibc, e.g. musl)."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    match = re.match(r"glibc (\d+)\.(\d+)", found)
    return (int(match.group(1)), int(match.group(2))) if match else None


def fits(tag: str, machine: str, libc: Optional[Tuple[int, int]]) -> bool:
    """Whether a wheel built for platform `tag` runs here."""
    match = _TAG.match(tag)
    if match is None or libc is None or match.group(4) != machine:
        return False
    needs = (int(match.group(2)), int(match.group(3))) if match.group(2) else _LEGACY[match.group(1)]
    return needs <= libc


def choose(files: List[Dict[str, str]], version: str, machine: str,
           libc: Optional[Tuple[int, int]]) -> Optional[Dict[str, str]]:
    """The first of the index's files that is uv `version`'s wheel for this machine."""
    for entry in files:
        name = entry["filename"]
        if not (name.startswith("uv-") and name.endswith(".whl")):
            continue
        found_version, tags = wheel_tags(name)
        if found_version == version and any(fits(tag, machine, libc) for tag in tags):
            return entry
    return None


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 page: (filename, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: List[Tuple[str, str]] = []
        self._href: Optional[str] = None

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            self.links.append((data.strip(), self._href))
            self._href = None


def project_files(page_url: str, body: bytes, content_type: str) -> List[Dict[str, str]]:
    """The files an index page lists, each {filename, url, sha256 (or "")}, URLs made absolute."""
    files = []
    if "json" in content_type:
        for entry in json.loads(body.decode("utf-8")).get("files", []):
            files.append({"filename": entry["filename"], "url": urllib.parse.urljoin(page_url, entry["url"]),
                          "sha256": entry.get("hashes", {}).get("sha256", "")})
        return files
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for filename, href in parser.links:
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        digest = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else ""
        files.append({"filename": filename, "url": url, "sha256": digest})
    return files


def _open(url: str, timeout_s: float, logins: Optional[netrc.netrc], accept: str = "") -> Tuple[bytes, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    host = urllib.parse.urlsplit(url).hostname or ""
    login = logins.authenticators(host) if logins is not None else None
    if login is not None:
        user, _, password = login
        secret = base64.b64encode(("%s:%s" % (user, password or "")).encode()).decode()
        request.add_header("Authorization", "Basic " + secret)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read(), response.headers.get("Content-Type", "")


def _why(error: OSError) -> str:
    """An HTTP or network error as a few words ("HTTP 401 Unauthorized", "Connection refused")."""
    if isinstance(error, urllib.error.HTTPError):
        return "HTTP %s %s" % (error.code, error.reason)
    return str(getattr(error, "reason", None) or error)


def _logins(environ: Dict[str, str]) -> Optional[netrc.netrc]:
    path = environ.get("NETRC")
    if not path or not os.path.exists(path):
        return None
    try:
        return netrc.netrc(path)
    except (netrc.NetrcParseError, OSError) as error:
        raise BootstrapError("cannot read the index's login file %s: %s" % (path, error))


def find_wheel(version: str, environ: Dict[str, str], timeout_s: float) -> Tuple[Dict[str, str], bytes]:
    """uv `version`'s wheel for this machine, from the first index that has it, downloaded."""
    machine, libc = platform.machine(), glibc()
    logins = _logins(environ)
    looked = []
    for index in index_urls(environ):
        page = index + "/uv/"
        try:
            body, content_type = _open(page, timeout_s, logins, ACCEPT)
        except OSError as error:
            looked.append("%s (%s)" % (page, _why(error)))
            continue
        chosen = choose(project_files(page, body, content_type), version, machine, libc)
        if chosen is None:
            looked.append("%s (no uv %s wheel for %s, glibc %s)" % (
                page, version, machine, ".".join(map(str, libc)) if libc else "none"))
            continue
        try:
            data, _ = _open(chosen["url"], timeout_s, logins)
        except OSError as error:
            raise BootstrapError("cannot download %s: %s" % (chosen["url"], _why(error)))
        return chosen, data
    raise BootstrapError("uv %s was not found: %s" % (version, "; ".join(looked)))


def unpack(wheel: bytes, filename: str, version: str, into: str) -> str:
    """The wheel's `uv` and `uvx` binaries into `<into>/bin`, whole or not at all; uv's path."""
    scripts = "uv-%s.data/scripts/" % version
    with zipfile.ZipFile(io.BytesIO(wheel)) as archive:
        members = [name for name in archive.namelist() if name.startswith(scripts) and name[len(scripts):]]
        if scripts + "uv" not in members:
            raise BootstrapError("%s holds no %suv" % (filename, scripts))
        os.makedirs(into, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".bin.", dir=into)
        for name in members:
            target = os.path.join(staging, os.path.basename(name))
            with archive.open(name) as source, open(target, "wb") as out:
                out.write(source.read())
            os.chmod(target, 0o755)
    final = os.path.join(into, "bin")
    if os.path.isdir(final):  # an earlier boot's, cut short after it unpacked
        os.rename(final, staging + ".old")
        shutil.rmtree(staging + ".old")
    os.rename(staging, final)
    return os.path.join(final, "uv")


def cached_binaries(cache: str, version: str) -> Optional[str]:
    """The folder of uv `version`'s binaries for this machine that an earlier install kept in
    `cache` (named as the wheel they came from), if any."""
    if not os.path.isdir(cache):
        return None
    machine, libc = platform.machine(), glibc()
    names = sorted(name + ".whl" for name in os.listdir(cache)
                   if name.startswith("uv-") and os.path.isdir(os.path.join(cache, name)))
    chosen = choose([{"filename": name} for name in names], version, machine, libc)
    return os.path.join(cache, chosen["filename"][:-len(".whl")]) if chosen else None


def keep(cache: str, filename: str, binaries: str) -> None:
    """The checked wheel's binaries into `cache`, whole or not at all (VMs sharing it read it meanwhile)."""
    os.makedirs(cache, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".uv.", dir=cache)
    for name in os.listdir(binaries):
        shutil.copy2(os.path.join(binaries, name), os.path.join(staging, name))
    try:
        os.rename(staging, os.path.join(cache, filename[:-len(".whl")]))
    except OSError:  # another VM kept it first
        shutil.rmtree(staging, ignore_errors=True)


def link_binaries(kept: str, into: str) -> str:
    """The kept binaries into `<into>/bin` (hard links, copies across file systems); uv's path."""
    os.makedirs(into, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".bin.", dir=into)
    for name in os.listdir(kept):
        try:
            os.link(os.path.join(kept, name), os.path.join(staging, name))
        except OSError:
            shutil.copy2(os.path.join(kept, name), os.path.join(staging, name))
    final = os.path.join(into, "bin")
    if os.path.isdir(final):
        shutil.rmtree(final)
    os.rename(staging, final)
    return os.path.join(final, "uv")


def install(version: str, into: str, environ: Dict[str, str], timeout_s: float, cache: str = "") -> str:
    kept = cached_binaries(cache, version) if cache else None
    if kept is not None:
        return link_binaries(kept, into)
    chosen, data = find_wheel(version, environ, timeout_s)
    digest = hashlib.sha256(data).hexdigest()
    if chosen["sha256"] and digest != chosen["sha256"]:
        raise BootstrapError("%s: its SHA-256 is %s, the index says %s" % (chosen["filename"], digest, chosen["sha256"]))
    uv = unpack(data, chosen["filename"], version, into)
    if cache:
        try:
            keep(cache, chosen["filename"], os.path.dirname(uv))
        except OSError:
            pass  # a cache that cannot be written only costs the next boot the download
    return uv


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="uv_bootstrap", description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="the uv release to install (pinned by podmanager)")
    parser.add_argument("--into", required=True, help="the folder whose bin/ gets uv and uvx")
    parser.add_argument("--cache", default="", help="a folder to keep the checked wheel's binaries in and take them from")
    args = parser.parse_args(argv)
    timeout_s = float(os.environ.get("UV_HTTP_TIMEOUT") or 30)
    try:
        print(install(args.version, args.into, dict(os.environ), timeout_s, args.cache))
    except BootstrapError as error:
        print("uv %s: %s" % (args.version, error), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
