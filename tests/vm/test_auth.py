"""vm/auth.py: the cluster's Ray token, made once in an owner-only file, and the environment
that hands it to a child process by path, never by value."""

from __future__ import annotations

import stat

from podmanager.vm import auth


def test_token_created_once_with_0600(home):
    path = auth.ensure_token("c1")
    first = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first) == 64
    assert auth.ensure_token("c1").read_text() == first
    env = auth.child_env(path, {"RAY_AUTH_TOKEN": "stale", "X": "1"})
    assert env == {"X": "1", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
