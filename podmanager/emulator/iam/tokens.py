"""The simulated cloud's OAuth tokens: each names its principal and is signed with a key the
simulated cloud keeps (owner-only), so the emulator maps a token back to whom it was issued to,
also after a restart, and a made-up token is no one's (401, as Google answers an invalid token).

The laptop's user gets one in the simulated application default credentials
(`cloud/gcp/emulator_identity.adc_path()`), written when an emulator starts; a VM's service
account gets one from its metadata server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path

from podmanager.cloud.gcp.emulator_identity import adc_path
from podmanager.core import paths
from podmanager.core.files import write_atomic

USER = "user:owner@example.com"  # the laptop's user, as the simulated project knows them
_PREFIX = "ya29.sim."  # Google's access tokens begin ya29.


def _key_path() -> Path:
    """Where the key is (not made: the first `_key()` makes its folder)."""
    return paths.sim_home_path() / "sim" / "iam" / "token.key"


# The key as read, by its file (path, inode, modification time): every request the emulator serves
# checks a token, and reading the key from disk each time was a tenth of a 1,024-slice `up`'s
# emulator time. A key made anew (a simulated cloud deleted and made again at the same path) is
# another file, whose stat differs even where the inode number is reused.
_known: dict[tuple[str, int, int], bytes] = {}


def _file_id(where: Path) -> tuple[str, int, int]:
    status = os.stat(where)
    return str(where), status.st_ino, status.st_mtime_ns


def _key() -> bytes:
    """The signing key, made once (0600). Written whole before it appears: the emulator and
    the laptop's processes may make it at the same moment, and none may read it half written."""
    where = _key_path()
    try:
        known = _known.get(_file_id(where))
    except FileNotFoundError:
        known = None
    if known is not None:
        return known
    paths.sim_home()  # made 0700 before the folders inside it
    paths.private_dir(where.parent)
    if not where.exists():
        handle, draft = tempfile.mkstemp(dir=where.parent, prefix=".token.key.")  # 0600
        try:
            os.write(handle, secrets.token_bytes(32))
            os.close(handle)
            os.link(draft, where)  # fails if another made it first: theirs is the key
        except FileExistsError:
            pass
        finally:
            os.unlink(draft)
    key = where.read_bytes()
    _known[_file_id(where)] = key
    return key


def _signature(key: bytes, who: str) -> str:
    return hmac.new(key, who.encode(), hashlib.sha256).hexdigest()[:40]


def issue(principal: str) -> str:
    """A token standing for `principal` ("user:EMAIL", "serviceAccount:EMAIL")."""
    who = base64.urlsafe_b64encode(principal.encode()).decode().rstrip("=")
    return f"{_PREFIX}{who}.{_signature(_key(), principal)}"


def principal_of(token: str) -> str | None:
    """Whom `token` was issued to; None for a token this simulated cloud did not issue."""
    if not token.startswith(_PREFIX):
        return None
    who, _, signature = token[len(_PREFIX):].rpartition(".")
    try:
        principal = base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return principal if hmac.compare_digest(signature, _signature(_key(), principal)) else None


def metadata_token(email: str) -> str:
    """A VM's service-account token as its metadata server hands it out (Google's JSON)."""
    return json.dumps({"access_token": issue(f"serviceAccount:{email}"), "expires_in": 3599, "token_type": "Bearer"})


def write_user_credentials() -> Path:
    """The laptop user's simulated application default credentials, owner-only; their path."""
    where = adc_path()
    paths.private_dir(where.parent)
    write_atomic(where, json.dumps({"type": "podmanager_simulated_user", "account": USER,
                                    "access_token": issue(USER)}))
    os.chmod(where, 0o600)
    return where
