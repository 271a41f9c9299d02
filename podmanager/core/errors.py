"""User-facing errors: each carries the message a person should read and the exit code.

The CLI turns any `PodmanagerError` into that message and code in one place; a script
using the API catches the same types.
"""

from __future__ import annotations


class PodmanagerError(Exception):
    """An error with a message meant for the user and the process exit code to use."""

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n{self.hint}" if self.hint else self.message


class SpecError(PodmanagerError):
    """The cluster spec, workload or a flag is invalid; nothing was created."""

    exit_code = 2


class UnsafeFolderError(PodmanagerError):
    """A folder podmanager would keep private files in is not private: a link, another user's, or
    open to others. Nothing is put in it."""


class ClusterNotFoundError(PodmanagerError):
    exit_code = 2


class TimeoutExceededError(PodmanagerError):
    exit_code = 3


class StateStoreError(PodmanagerError):
    """The state store ($PODMANAGER_HOME/state.db) is missing, damaged, or was deleted or
    replaced while in use. `down` works without it; `podmanager rebuild-state` repairs it."""
