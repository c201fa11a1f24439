"""One resolved SSH target: where and how to connect, as :mod:`runbook_runner.ssh.config`
resolves it (OpenSSH's effective configuration), and the route of jump hosts to it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook_runner.ssh.tokens import home

DEFAULT_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class PlanPin:
    """run --plan: the host the plan was made on. ``destination`` is (hostname, port,
    user) as ``ssh -G`` resolved them, ``host_key`` the SHA256 fingerprint of the key the
    host offered (both None: the plan was made with --local). ssh/connect.py refuses
    another destination before connecting and another key before logging in."""

    plan: str  # the plan file, for messages
    host_key: str | None
    destination: tuple[str, int, str | None] | None


@dataclass(frozen=True)
class SshTarget:
    """One resolved connection (the host, or a jump host on the way to it)."""

    host: str  # as the user named it (used in messages)
    hostname: str  # what to connect to
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()  # in OpenSSH's order; missing ones are skipped
    explicit_identities: tuple[str, ...] = ()  # given with -i: a problem with one is an error
    identities_only: bool = False
    identity_agent: str | None = None  # the agent's socket; None: no agent
    known_hosts_files: tuple[Path, ...] = ()  # UserKnownHostsFile, in order
    global_known_hosts_files: tuple[Path, ...] = ()  # GlobalKnownHostsFile
    host_key_alias: str | None = None
    strict_host_key_checking: str = "ask"
    accept_new_host_key: bool = False
    hash_known_hosts: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    server_alive_interval: int = 0
    server_alive_count_max: int = 3
    batch_mode: bool = False
    address_family: str = "any"
    proxy_command: str | None = None  # tokens expanded; run with the user's shell
    via: SshTarget | None = None  # the (resolved) jump host this one is reached through
    host_key_algorithms: tuple[str, ...] = ()  # empty: paramiko's own
    kex_algorithms: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    macs: tuple[str, ...] = ()
    ssh_config: Path | None = None
    plan_pin: PlanPin | None = field(default=None, compare=False)  # run --plan's host
    # Each socket and paramiko transport opened on the way, as it is opened (a fleet's stop
    # shuts the connections still being made: fleet/stop.py).
    on_open: Callable[[Any], None] | None = field(default=None, compare=False)
    notices: tuple[str, ...] = field(default=(), compare=False)

    @property
    def label(self) -> str:
        return self.host if self.port == 22 else f"{self.host}:{self.port}"

    @property
    def known_hosts(self) -> Path:
        """Where an accepted new key is recorded: the first UserKnownHostsFile."""
        if self.known_hosts_files:
            return self.known_hosts_files[0]
        return home() / ".ssh" / "known_hosts"

    @property
    def host_key_name(self) -> str:
        """The name known_hosts is searched for, as OpenSSH forms it."""
        if self.host_key_alias:
            return self.host_key_alias.lower()
        name = self.hostname.lower()
        return name if self.port == 22 else f"[{name}]:{self.port}"

    @property
    def host_key_plain_name(self) -> str | None:
        """The port-less name OpenSSH also tries for a port other than 22 (no HostKeyAlias)."""
        if self.host_key_alias or self.port == 22:
            return None
        return self.hostname.lower()

    @property
    def route(self) -> tuple[SshTarget, ...]:
        """The jump hosts, first to last, then this host."""
        hops: list[SshTarget] = []
        hop: SshTarget | None = self
        while hop is not None:
            hops.append(hop)
            hop = hop.via
        return tuple(reversed(hops))
