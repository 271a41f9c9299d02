"""The startup script every TPU VM runs at boot, rendered for one cluster.

The template lives in the package (`podmanager/controller/templates/startup-script.sh.tmpl`,
also reachable as `infra/startup-script.sh.tmpl` in the repository) so an installed
podmanager can render it. Placeholders are `{{name}}`; every value is shell-quoted.

The Ray token never travels in metadata: the script carries only the name of the Secret
Manager secret that holds it, and the VM reads the secret with its own service account.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources
from typing import TYPE_CHECKING

from podmanager.core.errors import SpecError
from podmanager.vm.uv_settings import pip_conf

if TYPE_CHECKING:
    from podmanager.controller.software import Software

TEMPLATE_NAME = "startup-script.sh.tmpl"
STARTUP_SCRIPT_KEY = "startup-script"  # the metadata key Cloud TPU VMs run at boot
TOKEN_SECRET_KEY = "podmanager-token-secret"  # the secret's name, for people and tools reading metadata

# A VM that cannot reach Google's APIs (the bucket, Secret Manager) gives up after TRIES tries
# of CONNECT_TIMEOUT_S each, one second apart; the package index (uv, pip) after two tries of
# INDEX_TIMEOUT_S. Either way its boot reports `error` naming the address well within 90 s.
CONNECT_TIMEOUT_S = 10
TRIES = 3
INDEX_TIMEOUT_S = 20
UNREACHABLE_WITHIN_S = max(TRIES * CONNECT_TIMEOUT_S + (TRIES - 1), 2 * INDEX_TIMEOUT_S + 5)

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_INDEX = re.compile(r"^https?://[^\s@]+$")  # core/spec.py checked it; no credentials, nothing a line could end
# A Secret Manager secret id, or its resource name with an optional version.
_SECRET = re.compile(r"^(projects/[a-z0-9-]+/secrets/)?[A-Za-z0-9_-]{1,255}(/versions/(latest|\d+))?$")


def template_text() -> str:
    """The template, as installed with the package."""
    return resources.files("podmanager.controller").joinpath("templates", TEMPLATE_NAME).read_text()


def guest_attributes_code() -> str:
    """The source of `vm/guest_attributes.py`, the VM's one writer of guest attributes, which the
    script runs with the image's `python3` (before podmanager is installed)."""
    return resources.files("podmanager.vm").joinpath("guest_attributes.py").read_text()


def uv_settings_code() -> str:
    """The source of `vm/uv_settings.py`, which the script runs to set uv up as a run's
    installs are (before podmanager is installed on the VM)."""
    return resources.files("podmanager.vm").joinpath("uv_settings.py").read_text()


def uv_bootstrap_code() -> str:
    """The source of `vm/uv_bootstrap.py`, which the script runs with the image's `python3` to
    install uv from the package index without pip (Debian 12's Python has none)."""
    return resources.files("podmanager.vm").joinpath("uv_bootstrap.py").read_text()


def _check(name: str, value: str, pattern: re.Pattern[str] | None, what: str) -> None:
    if not value or any(ch in value for ch in "\n\r\0") or (pattern is not None and not pattern.match(value)):
        raise SpecError(f"startup script: {name}={value!r} is not {what}")


TPU_ROLE = "tpu"
CONTROLLER_ROLE = "controller"


def render_startup_script(cluster: str, software: Software, token_secret: str, *, role: str = TPU_ROLE,
                          channel_port: int = 0) -> str:
    """The boot script for the TPU VMs of `cluster`.

    software: what every VM must run, pinned to the controller (`hosts.software`): the exact
    Python, Ray and JAX, the podmanager to install and from where, extra packages.
    token_secret: the Secret Manager secret (id, or projects/P/secrets/S[/versions/V]) that
    holds the Ray token; the token itself is never put in the script.
    The head's address is not in the script: the VM reads it from metadata on every try.
    role: `tpu` (join the head) or `controller` (the cluster's controller VM: `token_secret` is
    the channel token's secret, and the daemon serves the channel on `channel_port`).
    """
    if role not in (TPU_ROLE, CONTROLLER_ROLE) or (role == CONTROLLER_ROLE and not 0 < channel_port < 65536):
        raise ValueError(f"startup script: role {role!r} with channel port {channel_port}")
    _check("cluster", cluster, re.compile(r"^[a-z][-a-z0-9]*$"), "a cluster name")
    _check("token_secret", token_secret, _SECRET, "a Secret Manager secret name")
    _check("boot.podmanager", software.podmanager_source, None, "a version or requirement")
    for index, package in enumerate(software.packages):
        _check(f"boot.packages[{index}]", package, None, "a requirement")
    for index, url in enumerate(software.extra_index_urls):
        _check(f"boot.extra_index_urls[{index}]", url, _INDEX, "an index URL")
    if software.index_url:
        _check("boot.index_url", software.index_url, _INDEX, "an index URL")
    values = {
        "cluster": shlex.quote(cluster),
        "role": role,
        "channel_port": str(channel_port),
        "token_secret": shlex.quote(token_secret),
        "podmanager_source": shlex.quote(software.podmanager_source),
        "python": shlex.quote(software.python),
        "uv": shlex.quote(software.uv),
        "versions": shlex.quote(software.versions().line()),
        "install_key": shlex.quote(software.install_key()),
        "requirements": " ".join(shlex.quote(r) for r in software.pinned_requirements()),
        "packages": " ".join(shlex.quote(p) for p in software.packages),
        "lock": shlex.quote(software.lock),
        "pip_conf": shlex.quote(pip_conf(software.index_url, list(software.extra_index_urls))),
        "uv_settings": shlex.quote(uv_settings_code()),
        "uv_bootstrap": shlex.quote(uv_bootstrap_code()),
        "guest_attributes": shlex.quote(guest_attributes_code()),
        "connect_timeout_s": str(CONNECT_TIMEOUT_S),
        "tries": str(TRIES),
        "index_timeout_s": str(INDEX_TIMEOUT_S),
    }
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template_text())


def startup_metadata(cluster: str, software: Software, token_secret: str) -> dict[str, str]:
    """The node metadata that makes a TPU VM join `cluster` at boot."""
    return {
        STARTUP_SCRIPT_KEY: render_startup_script(cluster, software, token_secret),
        TOKEN_SECRET_KEY: token_secret,
        # GCE serves guest attributes (the boot stage) only when this is set; harmless if not needed.
        "enable-guest-attributes": "TRUE",
    }
