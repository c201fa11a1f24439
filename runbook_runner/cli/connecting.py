"""Opening the SSH connection of `check` and `run` early, in a thread.

The CLI starts it as soon as the command line is parsed, before it imports what loading
and running a runbook need: the handshake and the host's own work after the login (about
45 ms for sshd's session set-up) then overlap with that CPU work instead of following it.
This module imports nothing heavy itself. The thread first resolves the target with
`ssh -G` (a process it waits for) while the main thread imports paramiko; then it logs in.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from runbook_runner.safetext import visible

if TYPE_CHECKING:
    from runbook_runner.cli.request import Target
    from runbook_runner.transport import SshTransport


def _prompt_passphrase(prompt: str) -> str | None:
    from runbook_runner.cli import console

    return console.prompt_passphrase(prompt)


@dataclass(frozen=True)
class Destination:
    """The host to connect to and how: ``--host`` and the SSH options, typed (a drill
    builds one for its simulated host)."""

    host: str
    port: int | None = None
    user: str | None = None
    identity: tuple[str, ...] | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    connect_timeout: float | None = None
    ssh_config: str | None = None
    ssh_client: str | None = "auto"  # None: no OpenSSH client to ask (`ssh -G`)
    ssh_options: tuple[str, ...] = ()
    jump: str | None = None
    become_password: str | None = None
    plan_pin: Any = None  # run --plan: the plan's host (ssh/target.py's PlanPin)

    @classmethod
    def of(cls, target: Target, *, become: Any = None, plan_pin: Any = None) -> Destination:
        """The destination of a request's target (``become``: -K's Secret, if any)."""
        if target.host is None:
            raise ValueError("a destination needs a host")
        return cls(
            target.host,
            port=target.port,
            user=target.user,
            identity=target.identity,
            known_hosts=target.known_hosts,
            accept_new_host_key=target.accept_new_host_key,
            connect_timeout=target.connect_timeout,
            ssh_config=target.ssh_config,
            ssh_client=target.ssh_client,
            ssh_options=target.ssh_options,
            jump=target.jump,
            become_password=secret_value(become),
            plan_pin=plan_pin,
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Destination:
        """The destination of a parsed command line (its target, -K's password, the pin of
        ``run --plan``)."""
        from runbook_runner.cli.request import target_of

        given = vars(args)
        return cls.of(
            target_of(args), become=given.get("become_password"), plan_pin=given.get("plan_pin")
        )


def connect(to: Destination, say: Callable[[str], None]) -> SshTransport:
    """Resolve ``--host`` and the SSH options as OpenSSH would, and log in."""
    # `ssh -G` needs no paramiko: it runs while the main thread imports it.
    from runbook_runner.ssh.config import resolve_target

    target = resolve_target(
        to.host,
        port=to.port,
        user=to.user,
        identity_files=list(to.identity) if to.identity else None,
        known_hosts=Path(to.known_hosts) if to.known_hosts else None,
        accept_new_host_key=to.accept_new_host_key,
        connect_timeout=to.connect_timeout,
        ssh_config=Path(to.ssh_config) if to.ssh_config else None,
        ssh=to.ssh_client,
        options=to.ssh_options,
        jump=to.jump,
    )
    if to.plan_pin is not None:
        target = replace(target, plan_pin=to.plan_pin)
    from runbook_runner.transport import SshTransport  # the main thread may be importing it

    def recorded(host: str, key: Any) -> None:
        say(key_recorded(host, key, target.known_hosts))

    def notice(text: str) -> None:
        print(f"runbook: {visible(text, lines=False)}", file=sys.stderr, flush=True)

    transport = SshTransport(target, _prompt_passphrase, recorded, notice)
    transport.become_password = to.become_password
    return transport.connect()


def become_password(args: argparse.Namespace) -> str | None:
    """The sudo password -K asked for, if any (cli/__init__.py's _ask_become_pass)."""
    return secret_value(vars(args).get("become_password"))


def secret_value(secret: Any) -> str | None:
    """The text of -K's Secret (cli/console.py), or None when there is none."""
    value = getattr(secret, "value", None)
    return value if isinstance(value, str) else None


def key_recorded(host: str, key: Any, known_hosts: Path) -> str:
    """What is said when --accept-new-host-key records a host's key."""
    from runbook_runner.transport import fingerprint

    return f"recorded the host key of {host} ({key.get_name()} {fingerprint(key)}) in {known_hosts}"


class Connecting:
    """The SSH connection, opened in a thread. :meth:`result` hands it over (and prints
    what connecting had to say, on the caller's thread), or raises what connecting raised;
    :meth:`abandon` closes it when the run never starts."""

    def __init__(self, to: Destination) -> None:
        self._transport: SshTransport | None = None
        self._error: BaseException | None = None
        self._abandoned = False
        self._said: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._connect, args=(to,), daemon=True)
        self._thread.start()  # it starts with `ssh -G`, a process to wait for
        import runbook_runner.transport  # noqa: F401  # on this thread meanwhile: see the module doc

    def _connect(self, to: Destination) -> None:
        try:
            transport = connect(to, self._said.append)
        except BaseException as error:  # handed to the main thread by result()
            self._error = error
            return
        with self._lock:
            if self._abandoned:
                transport.close()
            else:
                self._transport = transport

    def result(self, say: Callable[[str], None]) -> SshTransport:
        self._thread.join()
        for line in self._said:
            say(line)
        self._said.clear()
        if self._error is not None:
            raise self._error
        assert self._transport is not None
        return self._transport

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._transport is not None:
                self._transport.close()
                self._transport = None


def started(args: argparse.Namespace) -> Connecting:
    """The connection the CLI started early for these arguments, or a new one."""
    early = vars(args).get("connecting")
    if early is not None:  # a Connecting, or --local's LocalConnecting (runbook_runner/local.py)
        args.connecting = None  # handed over once
        return cast("Connecting", early)
    return Connecting(Destination.from_args(args))
