"""The cluster's Ray token: created once, kept in a 0600 file, passed by path only.

Ray 2.60 reads the token from `RAY_AUTH_TOKEN` (the value) or `RAY_AUTH_TOKEN_PATH`
(a file) and enables the check with `RAY_AUTH_MODE=token`. Podmanager only ever
passes the *path*, so the token never appears in a command line, an environment
dump of a process listing, a log line or node metadata.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from podmanager.core import paths

TOKEN_FILE = "ray_token"
MODE_ENV = "RAY_AUTH_MODE"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_ENV = "RAY_AUTH_TOKEN"


def token_path(cluster: str) -> Path:
    return paths.cluster_dir(cluster) / TOKEN_FILE


def ensure_token(cluster: str) -> Path:
    """The cluster's token file, created (0600, 256 random bits) if missing."""
    path = token_path(cluster)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return path
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return path


def token_env(path: Path | str) -> dict[str, str]:
    """Environment for a child process (ray start, join) that must authenticate."""
    return {MODE_ENV: "token", TOKEN_PATH_ENV: str(path)}


def child_env(path: Path | str, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's env) without a stray token value, plus `token_env`."""
    env = dict(os.environ if base is None else base)
    env.pop(TOKEN_ENV, None)  # a token value inherited from elsewhere would win over the file
    env.update(token_env(path))
    return env


def use_token_in_process(path: Path | str) -> None:
    """Make this process (a Ray driver about to call ray.init) authenticate with `path`.

    Ray caches its config and the loaded token; both are refreshed so that a process
    can connect to one cluster after another (tests do).
    """
    os.environ.pop(TOKEN_ENV, None)
    os.environ.update(token_env(path))
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
