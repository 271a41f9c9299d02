"""The startup script every TPU VM runs at boot, rendered for one cluster.

The template lives in the package (`podmanager/cloud/gcp/templates/startup-script.sh.tmpl`,
also reachable as `infra/startup-script.sh.tmpl` in the repository) so an installed
podmanager can render it. Placeholders are `{{name}}`; every value is shell-quoted.

The Ray token never travels in metadata: the script carries only the name of the Secret
Manager secret that holds it, and the VM reads the secret with its own service account.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources
from pathlib import Path

from podmanager.core.errors import SpecError

TEMPLATE_NAME = "startup-script.sh.tmpl"
STARTUP_SCRIPT_KEY = "startup-script"  # the metadata key Cloud TPU VMs run at boot
TOKEN_SECRET_KEY = "podmanager-token-secret"  # the secret's name, for people and tools reading metadata

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
# A Secret Manager secret id, or its resource name with an optional version.
_SECRET = re.compile(r"^(projects/[a-z0-9-]+/secrets/)?[A-Za-z0-9_-]{1,255}(/versions/(latest|\d+))?$")
_ADDRESS = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


def token_secret_id(cluster: str) -> str:
    """The Secret Manager secret that holds a cluster's Ray token (README: one per cluster)."""
    return f"podmanager-{cluster}-ray-token"


def template_text() -> str:
    """The template, from the installed package or, failing that, the repository's infra/."""
    packaged = resources.files("podmanager.cloud.gcp").joinpath("templates", TEMPLATE_NAME)
    if packaged.is_file():
        return packaged.read_text()
    in_repo = Path(__file__).resolve().parents[3] / "infra" / TEMPLATE_NAME
    return in_repo.read_text()


def _check(name: str, value: str, pattern: re.Pattern[str] | None, what: str) -> None:
    if not value or any(ch in value for ch in "\n\r\0") or (pattern is not None and not pattern.match(value)):
        raise SpecError(f"startup script: {name}={value!r} is not {what}")


def render_startup_script(cluster: str, head_address: str, version: str, token_secret: str) -> str:
    """The boot script for the TPU VMs of `cluster`.

    head_address: the Ray head as host:port, reachable from the VMs.
    version: a podmanager version to pin ("0.1.0"), a gs:// wheel, or any pip requirement URL.
    token_secret: the Secret Manager secret (id, or projects/P/secrets/S[/versions/V]) that
    holds the Ray token; the token itself is never put in the script.
    """
    _check("cluster", cluster, re.compile(r"^[a-z][-a-z0-9]*$"), "a cluster name")
    _check("head_address", head_address, _ADDRESS, "host:port")
    _check("version", version, None, "a version or requirement")
    _check("token_secret", token_secret, _SECRET, "a Secret Manager secret name")
    values = {"cluster": cluster, "head_address": head_address, "version": version, "token_secret": token_secret}

    def substitute(match: re.Match[str]) -> str:
        return shlex.quote(values[match.group(1)])

    return _PLACEHOLDER.sub(substitute, template_text())


def startup_metadata(cluster: str, head_address: str, version: str, token_secret: str) -> dict[str, str]:
    """The node metadata that makes a TPU VM join `cluster` at boot."""
    return {
        STARTUP_SCRIPT_KEY: render_startup_script(cluster, head_address, version, token_secret),
        TOKEN_SECRET_KEY: token_secret,
    }
