"""Where and how to connect, as the user's OpenSSH would: ``ssh -G`` resolves the config.

When an OpenSSH client is installed, ``ssh -G [-F FILE] [-l USER] [-p PORT] HOST``
prints the effective configuration for the host (Include, Match, tokens,
canonicalisation, first-match-wins: all done by OpenSSH itself, without touching
the network). Without one, paramiko's parser stands in (:mod:`fallback`), and any
option it cannot honour that changes where or how securely we connect is refused by
name (:mod:`options`).

This module resolves a host and each of its jump hosts; :mod:`openssh` asks ``ssh -G``,
:mod:`options` turns the effective options into an :class:`SshTarget` (:mod:`target`),
and :mod:`tokens` expands ``%x``, ``~`` and ``${VAR}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.errors import SshSetupError
from runbook_runner.ssh.fallback import fallback_options
from runbook_runner.ssh.openssh import parse_ssh_g, run_ssh_g, ssh_program
from runbook_runner.ssh.options import build_target, first, option_pair
from runbook_runner.ssh.target import SshTarget

__all__ = ["SshTarget", "build_target", "parse_jump", "parse_ssh_g", "resolve_target"]

MAX_JUMPS = 10  # a ProxyJump loop (a -> b -> a) is refused, not followed forever


def resolve_target(
    host: str,
    *,
    port: int | None = None,
    user: str | None = None,
    identity_files: Sequence[str] | None = None,
    known_hosts: Path | None = None,
    accept_new_host_key: bool = False,
    connect_timeout: float | None = None,
    ssh_config: Path | None = None,
    ssh: str | None = "auto",
    options: Sequence[str] = (),
    jump: str | None = None,
) -> SshTarget:
    """The effective target, with every jump host resolved the same way.

    ``ssh``: the OpenSSH client to ask (``"auto"``: the one on PATH; ``None``: use
    paramiko's parser as the fallback does). ``options`` (``KEY=VALUE``, ssh's ``-o``) and
    ``jump`` (ssh's ``-J``) apply to the host itself, as for ssh: not to its jump hosts.
    """
    program = ssh_program() if ssh == "auto" else ssh
    if "@" in host and user is None:
        user, host = host.rsplit("@", 1)
    _check_host_word(host)
    if port is not None and not 0 < port < 65536:
        raise SshSetupError(f"--port {port}: not a TCP port", "give a port from 1 to 65535")
    # Any file ssh -F reads: /dev/null too (no configuration at all), not a folder.
    if ssh_config is not None and (not ssh_config.exists() or ssh_config.is_dir()):
        what = "a folder" if ssh_config.is_dir() else "no such file"
        raise SshSetupError(f"{ssh_config}: {what}", "give an existing file to --ssh-config")
    # ssh, ssh-keygen and paramiko open these: a FIFO would keep them waiting (a folder
    # given to -i is named by ssh/keyfiles.py, with the other key-file problems)
    for given in (ssh_config, known_hosts):
        if given is not None:
            localfile.require_regular(given, null_ok=True)
    for identity in identity_files or ():
        if not Path(identity).expanduser().is_dir():
            localfile.require_regular(Path(identity).expanduser())
    for option in options:
        option_pair(option)
    if jump is not None:
        for hop in jump.split(","):
            parse_jump(hop.strip())
    settings = _Settings(
        program=program,
        ssh_config=ssh_config,
        known_hosts=known_hosts,
        accept_new=accept_new_host_key,
        connect_timeout=connect_timeout,
        options=tuple(options),
    )
    return _resolve(settings, host, user, port, tuple(identity_files or ()), jump or None, 0)


@dataclass(frozen=True)
class _Settings:
    program: str | None
    ssh_config: Path | None
    known_hosts: Path | None
    accept_new: bool
    connect_timeout: float | None
    options: tuple[str, ...] = ()  # -o KEY=VALUE, for the host itself (depth 0)


def _check_host_word(host: str) -> None:
    if not host or host.startswith("-") or any(c.isspace() or ord(c) < 32 for c in host):
        raise SshSetupError(f"{host!r}: not a host name", "give a host name, address or Host alias")


def _check_dns_name(target: SshTarget) -> None:
    """A name this process resolves must be one DNS can carry: labels of 1 to 63 characters
    (Python's resolver raises UnicodeError, "label empty or too long", for any other)."""
    if target.proxy_command:
        return  # the ProxyCommand is given the name, whatever it is
    try:
        target.hostname.encode("idna")
    except UnicodeError:
        raise SshSetupError(
            f"{target.hostname!r}: not a host name (a label between dots is empty or longer "
            "than 63 characters)",
            "give a host name, address or Host alias",
        ) from None


def _resolve(
    settings: _Settings,
    host: str,
    user: str | None,
    port: int | None,
    identities: tuple[str, ...],
    jump_override: str | None,
    depth: int,
) -> SshTarget:
    if depth > MAX_JUMPS:
        raise SshSetupError(
            f"{host}: more than {MAX_JUMPS} jump hosts; is there a ProxyJump loop?",
            "check the ProxyJump lines of your ssh config",
        )
    options: dict[str, list[str]] | None = None
    extra = settings.options if depth == 0 else ()
    if settings.program is not None:
        options = run_ssh_g(
            settings.program,
            host,
            settings.ssh_config,
            user,
            port,
            jump_override,
            identities,
            extra,
        )
    if options is None:  # no OpenSSH client, or one too old for -G (before 6.8)
        options = fallback_options(
            host, settings.ssh_config, user, port, jump_override, bool(identities), extra
        )
    target = build_target(
        host,
        options,
        explicit_identities=identities,
        known_hosts=settings.known_hosts,
        accept_new=settings.accept_new,
        connect_timeout=settings.connect_timeout,
        ssh_config=settings.ssh_config,
    )
    _check_dns_name(target)
    jump = first(options, "proxyjump")
    if jump is None or jump == "none":
        return target
    hops = [h.strip() for h in jump.split(",") if h.strip()]
    if not hops:
        return target
    # OpenSSH reaches the last hop with "-J <the hops before it>" (which overrides that
    # hop's own ProxyJump); a single hop is reached with its own config, ProxyJump included.
    last_user, last_host, last_port = parse_jump(hops[-1])
    via = _resolve(
        settings,
        last_host,
        last_user,
        last_port,
        (),
        ",".join(hops[:-1]) or None,
        depth + 1,
    )
    return _replace(target, via=via)


def _replace(target: SshTarget, **changes: object) -> SshTarget:
    return replace(target, **changes)  # type: ignore[arg-type]


def parse_jump(hop: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]`` -> (user, host, port)."""
    text = hop[len("ssh://") :] if hop.startswith("ssh://") else hop
    user, at, rest = text.rpartition("@")
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host, port_text = rest, ""
    _check_host_word(host)
    port: int | None = None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise SshSetupError(f"ProxyJump {hop}: bad port", "fix the ProxyJump line")
        port = int(port_text)
    return (user if at else None) or None, host, port
