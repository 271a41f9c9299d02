"""What goes wrong on the channel, as the user-facing errors every command renders."""

from __future__ import annotations

from podmanager.core.errors import PodmanagerError


class ChannelError(PodmanagerError):
    """The controller could not be reached, or answered with something that is no reply."""


class ChannelUnanswered(ChannelError):
    """Nothing answered: the connection or its reply timed out. A firewall that drops this
    machine's packets (its rule admits other addresses) does that, as does a VM that is down;
    a VM that is up with nothing listening refuses at once instead (a plain `ChannelError`)."""


class ChannelCredentialError(PodmanagerError):
    """This machine's credentials for the cluster's channel are missing, unsafe or not the
    controller's: nothing was sent with them. The fix is the user's, as for a bad flag."""

    exit_code = 2


class RemoteError(PodmanagerError):
    """The controller refused or failed the request and said why (`ErrorReply`): raised on the
    client with the controller's message, hint and exit code."""

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = 1):
        super().__init__(message, hint=hint)
        self.exit_code = exit_code
