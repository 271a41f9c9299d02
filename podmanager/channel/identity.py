"""The controller's side of the channel's trust: its private key, its self-signed certificate
and the cluster's bearer token, made at the controller's first boot and kept across reboots.

`$PODMANAGER_HOME/clusters/<name>/channel_server/` on the controller: `key.pem`, `cert.pem` and
`token`, each 0600 in a 0700 folder. Clients pin `cert.pem` and present `token`; a reboot reuses
all three, so clients keep working. The certificate names the address clients connect to (its
SubjectAltName): an address it does not name gets a new key and certificate (the token stays),
which clients then must fetch again (their pin refuses the new one until they do)."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from podmanager.channel.private_files import read_private, write_private
from podmanager.core import paths

FOLDER = "channel_server"
KEY_FILE = "key.pem"
CERT_FILE = "cert.pem"
TOKEN_FILE = "token"
LOOPBACK = "127.0.0.1"
# Long: the client trusts this one certificate by its pin, not by a date, and a controller that
# outlived its certificate would lock every client out. Replacing it is deleting the folder.
VALID_DAYS = 3650


@dataclass(frozen=True)
class ControllerIdentity:
    cluster: str
    address: str  # the host clients connect to, which the certificate names
    folder: Path

    @property
    def key_path(self) -> Path:
        return self.folder / KEY_FILE

    @property
    def cert_path(self) -> Path:
        return self.folder / CERT_FILE

    @property
    def token_path(self) -> Path:
        return self.folder / TOKEN_FILE

    def cert_pem(self) -> str:
        return self.cert_path.read_text()

    def token(self) -> str:
        return read_private(self.token_path, what="the cluster's channel token", fix=_REMAKE.format(self.folder))


_REMAKE = "Delete {0} and start the controller again: it makes a new key, certificate and token (clients fetch them again)."


def controller_address(*, simulated: bool, vm_address: str | None = None) -> str:
    """The address the controller serves the channel on: loopback in a dry run (client and
    controller share the machine; nothing listens beyond it), else the controller VM's."""
    if simulated:
        return LOOPBACK
    if not vm_address:
        raise ValueError("the controller VM's address is needed outside a dry run")
    return vm_address


def folder(cluster: str) -> Path:
    return paths.cluster_path(cluster) / FOLDER


def load_or_create(cluster: str, address: str, *, token: str | None = None) -> ControllerIdentity:
    """The controller's identity for the cluster, made on first use; the key and certificate
    made again when the certificate does not name `address` (see the module's docstring).
    `token`: the cluster's token as the client made it (read from Secret Manager at boot)."""
    identity = ControllerIdentity(cluster, address, folder(cluster))
    if token is not None and (not identity.token_path.exists() or identity.token() != token):
        write_private(identity.token_path, token)
    if not identity.token_path.exists():
        write_private(identity.token_path, secrets.token_urlsafe(32))
    if not (identity.key_path.exists() and identity.cert_path.exists() and names(identity.cert_pem(), address)):
        key_pem, cert_pem = self_signed(cluster, address)
        write_private(identity.key_path, key_pem)  # the key first: a certificate never lacks its key
        write_private(identity.cert_path, cert_pem)
    return identity


def names(cert_pem: str, address: str) -> bool:
    """Whether the certificate's SubjectAltName holds `address`."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    return _alt_name(address) in alt


def self_signed(cluster: str, address: str) -> tuple[str, str]:
    """A new P-256 key and a certificate for it, signed by itself, naming `address`: (key, cert) as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())  # small and fast to make on a small VM
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"podmanager controller of {cluster}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # a client whose clock is a little behind
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([_alt_name(address)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return key_pem, cert.public_bytes(serialization.Encoding.PEM).decode()


def _alt_name(address: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        return x509.DNSName(address)
