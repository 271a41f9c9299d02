"""The one way podmanager calls uv: the settings that make uv reach the package index where
pip and curl do. Used by a run's requirements install (`environments.py`) and, as its own
source run by the image's `python3`, by the startup script's install at boot (`startup.py`).

uv reads neither pip's configuration nor, by default, the machine's certificate store, so
behind a proxy with its own CA, or with a private index set up for pip, uv alone fails
(`invalid peer certificate: UnknownIssuer`) where pip works. So uv is given:
- the system certificate store (`UV_SYSTEM_CERTS`; `UV_NATIVE_TLS`, its older name);
- pip's `index-url` as `UV_DEFAULT_INDEX`, its `extra-index-url`s as `UV_INDEX` (with
  `UV_INDEX_STRATEGY=unsafe-best-match`: pip, unlike uv, picks from every index alike), its
  `find-links` as `UV_FIND_LINKS`, its `cert` as `SSL_CERT_FILE`, from `PIP_*` variables or
  pip's configuration files, as pip reads them.
A setting already made for uv itself is left as it is. The spec's `boot.index_url` and
`boot.extra_index_urls` reach a TPU VM as its pip settings (`pip_conf`, written by the startup
script), so pip, uv at boot and a run's installs all use them alike.

An Artifact Registry Python repository (a host ending in `-python.pkg.dev`) is read with a
Google access token as the password of the user `oauth2accesstoken`: on a VM its service
account's, from the metadata server. The token goes in a netrc file (0600) that `NETRC`
names, which uv and pip (requests) both read: never in a URL, a command line or a log.

Standard library only, and Python 3.8's: the startup script runs this file before anything
is installed.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import sys
import urllib.request
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional

SYSTEM_CERTS = {"UV_SYSTEM_CERTS": "1", "UV_NATIVE_TLS": "1"}
# pip's setting -> (uv's variable, the variables with which the user already told uv).
_FROM_PIP = {
    "index-url": ("UV_DEFAULT_INDEX", ("UV_DEFAULT_INDEX", "UV_INDEX_URL")),
    "extra-index-url": ("UV_INDEX", ("UV_INDEX", "UV_EXTRA_INDEX_URL")),
    "find-links": ("UV_FIND_LINKS", ("UV_FIND_LINKS",)),
    "cert": ("SSL_CERT_FILE", ("SSL_CERT_FILE",)),
}

# pip separates a list's entries by white space; uv wants these separators.
_LIST_SEPARATOR = {"extra-index-url": " ", "find-links": ","}


def pip_config_files(environ: Mapping[str, str]) -> List[Path]:
    """pip's configuration files on Linux, the later overriding the earlier (pip's order):
    global, user, site, then `PIP_CONFIG_FILE`. With `PIP_CONFIG_FILE=/dev/null`, none."""
    explicit = environ.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    home = Path(environ.get("HOME") or Path.home())
    xdg_dirs = (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs) if d]
    files.append(Path("/etc/pip.conf"))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if explicit:
        files.append(Path(explicit))
    return files


def pip_settings(environ: Mapping[str, str], files: Optional[List[Path]] = None) -> Dict[str, str]:
    """pip's `index-url`, `extra-index-url`, `find-links` and `cert`, where set: a `PIP_*` variable over the
    files' `[install]` over their `[global]`, a later file over an earlier one."""
    found: Dict[str, str] = {}
    for path in pip_config_files(environ) if files is None else files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue  # pip would refuse it too; uv then gets only the certificate store
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    key = key.replace("_", "-")
                    if key in _FROM_PIP and value.strip():
                        found[key] = value.strip()
    for key in _FROM_PIP:
        value = environ.get("PIP_" + key.upper().replace("-", "_"), "").strip()
        if value:
            found[key] = value
    return found


def uv_settings(environ: Mapping[str, str], files: Optional[List[Path]] = None) -> Dict[str, str]:
    """The variables to add to `environ` for uv (only those it does not set already)."""
    out: Dict[str, str] = {}
    if not any(name in environ for name in SYSTEM_CERTS):
        out.update(SYSTEM_CERTS)
    for key, value in pip_settings(environ, files).items():
        target, already = _FROM_PIP[key]
        if not any(environ.get(name) for name in already):
            separator = _LIST_SEPARATOR.get(key)
            out[target] = separator.join(value.split()) if separator else value
    if "UV_INDEX" in out and not environ.get("UV_INDEX_STRATEGY"):
        # pip takes the best version from all its indexes; uv, only from the first one that has
        # the package (ray found on an extra index without the pinned version: unresolvable).
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out


def uv_env(environ: Mapping[str, str], files: Optional[List[Path]] = None) -> Dict[str, str]:
    """`environ` with uv's settings added: the environment to run uv in."""
    return {**environ, **uv_settings(environ, files)}


def pip_conf(index_url: str, extra_index_urls: List[str]) -> str:
    """The spec's index as a pip configuration file ("" when it names none)."""
    lines = ["index-url = " + index_url] if index_url else []
    if extra_index_urls:
        lines.append("extra-index-url = " + " ".join(extra_index_urls))
    return "".join(line + "\n" for line in ["[global]", *lines]) if lines else ""


# uv's variables naming an index or a place to find packages (what an index of the spec replaces).
_INDEX_VARIABLES = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
                    "UV_NO_INDEX")


def with_index(environ: Mapping[str, str], index_url: str, extra_index_urls: List[str]) -> Dict[str, str]:
    """`environ` (uv's settings made) with the spec's index in place of any other, as on the
    VMs; unchanged when the spec names none."""
    if not index_url and not extra_index_urls:
        return dict(environ)
    out = {name: value for name, value in environ.items() if name not in _INDEX_VARIABLES}
    if index_url:
        out["UV_DEFAULT_INDEX"] = index_url
    if extra_index_urls:
        out["UV_INDEX"] = " ".join(extra_index_urls)
        out.setdefault("UV_INDEX_STRATEGY", "unsafe-best-match")
    return out


ARTIFACT_REGISTRY_SUFFIX = "-python.pkg.dev"
ARTIFACT_REGISTRY_USER = "oauth2accesstoken"


def artifact_registry_hosts(env: Mapping[str, str]) -> List[str]:
    """The Artifact Registry hosts among the indexes uv is given in `env`."""
    hosts = set()
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL"):
        for entry in env.get(name, "").split():
            url = entry.split("=", 1)[1] if "=" in entry.split("://", 1)[0] else entry  # uv's NAME=URL form
            host = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0].lower()
            if host.endswith(ARTIFACT_REGISTRY_SUFFIX):
                hosts.add(host)
    return sorted(hosts)


def metadata_token(environ: Mapping[str, str], timeout_s: float = 10.0) -> str:
    """This VM's service-account access token, from its metadata server (a simulated VM names
    its own in PODMANAGER_METADATA_URL or GCE_METADATA_IP). OSError or ValueError if none."""
    root = environ.get("PODMANAGER_METADATA_URL") or (
        "http://" + (environ.get("GCE_METADATA_IP") or "metadata.google.internal") + "/computeMetadata/v1")
    request = urllib.request.Request(root + "/instance/service-accounts/default/token",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        token = json.loads(response.read().decode()).get("access_token")
    if not isinstance(token, str) or not token:
        raise ValueError("the metadata server's reply holds no access_token")
    return token


def write_netrc(path: Path, hosts: List[str], token: str) -> None:
    """A netrc file readable by its owner only, signing in to each host with `token`."""
    descriptor = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)  # an older file of another mode, too
        handle.write("".join("machine %s login %s password %s\n" % (host, ARTIFACT_REGISTRY_USER, token)
                             for host in hosts))


def with_index_credentials(env: Mapping[str, str], netrc: Path, token: Callable[[], str]) -> Dict[str, str]:
    """`env` with NETRC naming a netrc file written at `netrc` when uv's indexes in it include an
    Artifact Registry repository (`token()` asked only then); else `env` as it is."""
    hosts = artifact_registry_hosts(env)
    if not hosts:
        return dict(env)
    write_netrc(netrc, hosts, token())
    return {**env, "NETRC": str(netrc)}


def uv_argv(args: List[str]) -> List[str]:
    """The command line of uv (the binary podmanager depends on) with `args`."""
    from uv import find_uv_bin

    return [find_uv_bin(), *args]


def shell_exports(environ: Mapping[str, str]) -> str:
    """uv's settings as `export` lines for bash (what the startup script evaluates)."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in uv_settings(environ).items())


def main(argv: List[str]) -> int:
    """The startup script's call: uv's settings as exports; with `--netrc PATH`, an Artifact
    Registry index among them gets this VM's token in the netrc file PATH (and NETRC names it)."""
    exports = shell_exports(os.environ)
    if argv[:1] == ["--netrc"] and len(argv) == 2:
        env = uv_env(os.environ)
        try:
            if with_index_credentials(env, Path(argv[1]), lambda: metadata_token(os.environ)) != env:
                exports += "export NETRC=%s\n" % shlex.quote(argv[1])
        except (OSError, ValueError) as error:
            sys.stderr.write("cannot read this VM's service-account token from the metadata server for the Artifact "
                             "Registry index %s: %s\n" % (" ".join(artifact_registry_hosts(env)), error))
            return 1
    sys.stdout.write(exports)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
