"""The project's exception hierarchy.

Only transport and input failures are exceptions; a remote command that exits
non-zero is data (a result), never an exception.
"""

from __future__ import annotations


class RunbookRunnerError(Exception):
    """Base class of every error this package raises on purpose."""


class ParseError(RunbookRunnerError):
    """Command output could not be turned into typed state."""


class TransportError(RunbookRunnerError):
    """Reaching or talking to the host failed; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class Unreachable(TransportError):
    """Connection refused, DNS failure, timeout, or no SSH server."""


class AuthenticationFailed(TransportError):
    """The host refused every key (or an encrypted key had no passphrase)."""


class UnknownHostKey(TransportError):
    """The host is not in known_hosts and --accept-new-host-key was not given."""


class HostKeyChanged(TransportError):
    """known_hosts holds another key for this host: always refused."""


class SshSetupError(TransportError):
    """A problem on our side before any host is involved: the ssh config, a key file.

    Exit 2 (bad input), not 3: fixing it is up to the operator, not the host.
    """


class HostKeyRevoked(TransportError):
    """The host offered a key that known_hosts marks @revoked."""


class ConnectionLost(TransportError):
    """The connection dropped while a command ran or a channel opened."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived; ``ended_on_host`` names the remote process group
    that was ended because of it (None when no command was running)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.ended_on_host: str | None = None


class NeedsConfirmation(RunbookRunnerError):
    """A confirmation that --yes does not cover could not be asked (no terminal)."""


class UsageError(RunbookRunnerError):
    """The command line is wrong; ``prog`` names the (sub)command for the hint."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class StateFileInvalid(RunbookRunnerError):
    """A ``runbook test --state`` file that cannot be read or describes no host."""
