"""The one way podmanager calls uv: the settings that make uv reach the package index where
pip and curl do. Used by a run's requirements install (`environments.py`) and, as its own
source run by the image's `python3`, by the startup script's install at boot (`startup.py`).

uv reads neither pip's configuration nor, by default, the machine's certificate store, so
behind a proxy with its own CA, or with a private index set up for pip, uv alone fails
(`invalid peer certificate: UnknownIssuer`) where pip works. So uv is given:
- the system certificate store (`UV_SYSTEM_CERTS`; `UV_NATIVE_TLS`, its older name);
- pip's `index-url` as `UV_DEFAULT_INDEX`, its `extra-index-url`s as `UV_INDEX`, its
  `find-links` as `UV_FIND_LINKS`, its `cert` as `SSL_CERT_FILE`, from `PIP_*` variables or
  pip's configuration files, as pip reads them.
A setting already made for uv itself is left as it is.

Standard library only, and Python 3.8's: the startup script runs this file before anything
is installed.
"""

from __future__ import annotations

import configparser
import os
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional

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
    return out


def uv_env(environ: Mapping[str, str], files: Optional[List[Path]] = None) -> Dict[str, str]:
    """`environ` with uv's settings added: the environment to run uv in."""
    return {**environ, **uv_settings(environ, files)}


def uv_argv(args: List[str]) -> List[str]:
    """The command line of uv (the binary podmanager depends on) with `args`."""
    from uv import find_uv_bin

    return [find_uv_bin(), *args]


def shell_exports(environ: Mapping[str, str]) -> str:
    """uv's settings as `export` lines for bash (what the startup script evaluates)."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in uv_settings(environ).items())


if __name__ == "__main__":
    sys.stdout.write(shell_exports(os.environ))
