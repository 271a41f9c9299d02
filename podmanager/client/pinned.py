"""The client's credentials for one cluster's channel, kept on the client's machine.

`$PODMANAGER_HOME/clusters/<name>/channel/`: `controller.json` (where the controller listens),
`controller.pem` (its certificate, pinned: the one certificate this client accepts from it) and
`token` (the cluster's bearer token), each 0600 in a 0700 folder. No record holds the token.
Stdlib, pydantic and podmanager's core only: the laptop's side loads without Ray or JAX."""

from __future__ import annotations

import hashlib
import json
import ssl
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podmanager.channel.errors import ChannelCredentialError
from podmanager.channel.private_files import read_private, write_private
from podmanager.core import paths

FOLDER = "channel"
ADDRESS_FILE = "controller.json"
CERT_FILE = "controller.pem"
TOKEN_FILE = "token"
SPEC_FILE = "spec.json"  # the spec `up` was given: `down` deletes the controller VM by it


class ControllerAddress(BaseModel):
    """Where a cluster's controller serves the channel."""

    model_config = ConfigDict(frozen=True)

    host: str = Field(min_length=1)  # what the controller's certificate names (its SAN)
    port: int = Field(ge=1, le=65535)


@dataclass(frozen=True)
class ClientCredentials:
    cluster: str
    address: ControllerAddress
    cert_pem: str
    token: str
    folder: Path

    def tls_context(self) -> ssl.SSLContext:
        """A client's TLS that trusts the pinned certificate alone (no CA), checking its name."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the name
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_verify_locations(cadata=self.cert_pem)
        return context

    @property
    def fingerprint(self) -> str:
        """The pinned certificate's SHA-256, hex: the one the controller must present."""
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(self.cert_pem)).hexdigest()


def folder(cluster: str) -> Path:
    return paths.cluster_path(cluster) / FOLDER


def refetch_hint(cluster: str) -> str:
    """How a user gets the cluster's channel credentials again: `podmanager connect`, which finds
    the controller VM in the project, pins its certificate and reads the token from Secret Manager."""
    return (f"'podmanager connect -c {cluster} {_where(cluster)}' fetches them again (the controller's "
            "certificate and the cluster's token).")


def _where(cluster: str) -> str:
    """`connect`'s flags naming where the cluster is, from the spec this machine's `up` kept."""
    try:
        spec = json.loads(load_spec_json(cluster) or "{}")
    except ValueError:
        spec = {}
    if not isinstance(spec, dict):
        spec = {}
    if spec.get("backend") == "simulated":
        return "--dry-run"
    return f"--project {spec['project']}" if isinstance(spec.get("project"), str) else "--project PROJECT (or --dry-run)"


def install(cluster: str, address: ControllerAddress, cert_pem: str, token: str) -> ClientCredentials:
    """Keep the cluster's controller address, its certificate (pinned from now on) and token."""
    ssl.PEM_cert_to_DER_cert(cert_pem)  # ValueError: not one PEM certificate
    if not token.strip():
        raise ValueError("a channel token cannot be empty")
    where = folder(cluster)
    write_private(where / CERT_FILE, cert_pem)
    write_private(where / TOKEN_FILE, token.strip())
    write_private(where / ADDRESS_FILE, address.model_dump_json())
    return ClientCredentials(cluster, address, cert_pem, token.strip(), where)


def load(cluster: str) -> ClientCredentials:
    """The cluster's channel credentials on this machine; ChannelCredentialError (exit 2) naming
    the missing, unsafe or damaged file and how to get it again."""
    where = folder(cluster)
    fix = refetch_hint(cluster)
    if not where.is_dir():
        raise ChannelCredentialError(f"--cluster {cluster}: this machine holds no channel credentials for it "
                                     f"({where} does not exist)", hint=fix)
    address_text = read_private(where / ADDRESS_FILE, what="the controller's address", fix=fix)
    try:
        address = ControllerAddress.model_validate_json(address_text)
    except ValidationError as error:
        raise ChannelCredentialError(f"the controller's address: {where / ADDRESS_FILE} is damaged "
                                     f"({error.errors()[0]['msg']})", hint=fix) from None
    cert_pem = read_private(where / CERT_FILE, what="the controller's pinned certificate", fix=fix)
    try:
        ssl.PEM_cert_to_DER_cert(cert_pem)
    except ValueError:
        raise ChannelCredentialError(f"the controller's pinned certificate: {where / CERT_FILE} holds no "
                                     "PEM certificate", hint=fix) from None
    token = read_private(where / TOKEN_FILE, what="the cluster's channel token", fix=fix).strip()
    if not token:
        raise ChannelCredentialError(f"the cluster's channel token: {where / TOKEN_FILE} is empty", hint=fix)
    return ClientCredentials(cluster, address, cert_pem, token, where)


def has_address(cluster: str) -> bool:
    return (folder(cluster) / ADDRESS_FILE).is_file()


def load_address(cluster: str) -> ControllerAddress:
    return load(cluster).address


def load_token(cluster: str) -> str:
    """The cluster's channel token on this machine (ChannelCredentialError when there is none)."""
    where = folder(cluster)
    token = read_private(where / TOKEN_FILE, what="the cluster's channel token", fix=refetch_hint(cluster)).strip()
    if not token:
        raise ChannelCredentialError(f"the cluster's channel token: {where / TOKEN_FILE} is empty",
                                     hint=refetch_hint(cluster))
    return token


def save_token(cluster: str, token: str) -> None:
    """The cluster's token, kept before anything is made with it: an interrupted `up` run again
    uses the same one (the controller VM may have read it already)."""
    write_private(folder(cluster) / TOKEN_FILE, token)


def save_spec(cluster: str, spec_json: str) -> None:
    write_private(folder(cluster) / SPEC_FILE, spec_json)


def load_spec_json(cluster: str) -> str | None:
    path = folder(cluster) / SPEC_FILE
    return path.read_text() if path.is_file() else None


def remote_clusters() -> list[str]:
    """The clusters this machine holds a pointer to (their controller is a VM)."""
    root = paths.home() / "clusters"
    return sorted(p.parent.parent.name for p in root.glob(f"*/{FOLDER}/{SPEC_FILE}")) if root.is_dir() else []
