"""Where and how to connect: command-line options first, then ~/.ssh/config."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from runbook_runner.errors import Unreachable


@dataclass
class SshTarget:
    """Where and how to connect, after ~/.ssh/config was applied."""

    host: str  # as the user named it (used for known_hosts and messages)
    hostname: str  # what to connect to
    port: int = 22
    user: str | None = None
    identity_files: list[str] = field(default_factory=list)
    known_hosts: Path = field(default_factory=lambda: Path.home() / ".ssh" / "known_hosts")
    accept_new_host_key: bool = False
    connect_timeout: float = 10.0
    proxy_jump: str | None = None
    ssh_config: Path | None = None

    @property
    def label(self) -> str:
        return self.host if self.port == 22 else f"{self.host}:{self.port}"


def resolve_target(
    host: str,
    *,
    port: int | None = None,
    user: str | None = None,
    identity_files: list[str] | None = None,
    known_hosts: Path | None = None,
    accept_new_host_key: bool = False,
    connect_timeout: float = 10.0,
    ssh_config: Path | None = None,
) -> SshTarget:
    """Command-line options first, then ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump)."""
    if "@" in host and user is None:
        user, host = host.rsplit("@", 1)
    config_path = ssh_config or Path.home() / ".ssh" / "config"
    entry: dict[str, Any] = {}
    if config_path.is_file():
        try:
            entry = _lookup(paramiko.SSHConfig.from_path(str(config_path)), host)
        except (OSError, paramiko.SSHException) as error:
            raise Unreachable(
                f"cannot read {config_path}: {error}", "fix or remove the file"
            ) from None
    elif ssh_config is not None:
        raise Unreachable(f"{ssh_config}: no such file", "give an existing file to --ssh-config")
    proxy = entry.get("proxyjump")
    return SshTarget(
        host=host,
        hostname=entry.get("hostname", host),
        port=port or int(entry.get("port", 22)),
        user=user or entry.get("user"),
        identity_files=(identity_files or []) + list(entry.get("identityfile", [])),
        known_hosts=known_hosts or Path.home() / ".ssh" / "known_hosts",
        accept_new_host_key=accept_new_host_key,
        connect_timeout=connect_timeout,
        proxy_jump=None if proxy in (None, "none") else proxy,
        ssh_config=ssh_config,
    )


def _lookup(config: paramiko.SSHConfig, host: str) -> dict[str, Any]:
    try:
        return dict(config.lookup(host))
    except ImportError:
        # The CLI imports paramiko without invoke (a tenth of its start-up); only a
        # "Match exec" needs it, and gets it now.
        import invoke
        import paramiko.config

        paramiko.config.invoke = invoke  # type: ignore[attr-defined]
        return dict(config.lookup(host))
