"""Opening an authenticated SSH connection the way OpenSSH would, for a resolved target.

The route (ProxyJump hops, ProxyCommand, or a TCP socket), the algorithms the user's
config allows, the handshake and keepalives (ServerAliveInterval). The host key is
decided in :mod:`runbook_runner.ssh.hostkeys` (known_hosts as
:mod:`runbook_runner.ssh.knownhosts` reads it), the login in :mod:`runbook_runner.ssh.auth`
(key files read by :mod:`runbook_runner.ssh.keyfiles`).
"""

from __future__ import annotations

import os
import shlex
import socket
import threading
from collections.abc import Callable
from typing import Any

import paramiko

from runbook_runner.errors import SshSetupError, TransportError, Unreachable
from runbook_runner.ssh import knownhosts
from runbook_runner.ssh.auth import authenticate
from runbook_runner.ssh.fallback import OPENSSH_DEFAULT_ALGORITHMS
from runbook_runner.ssh.hooks import Hooks
from runbook_runner.ssh.hostkeys import fingerprint, verify_host_key
from runbook_runner.ssh.target import SshTarget

# Suggested only among what OpenSSH itself enables by default (never CBC or MD5).
_OPENSSH_DEFAULTS = {
    name for names in OPENSSH_DEFAULT_ALGORITHMS.values() for name in names.split(",")
}
# OpenSSH and paramiko spell one algorithm differently.
_ALIASES = {"curve25519-sha256": "curve25519-sha256@libssh.org"}


class NotThePlansHost(TransportError):
    """run --plan: the host is not the one the plan was made on (another destination, or
    another host key offered in the handshake). Refused before any login: exit 3."""


def check_plan_destination(target: SshTarget) -> None:
    """run --plan: the destination OpenSSH resolved now must be the plan's (before any
    connection is opened)."""
    pin = target.plan_pin
    if pin is None:
        return
    now = (target.hostname, target.port, target.user)
    if pin.host_key is None or pin.destination is None:
        raise NotThePlansHost(
            f"{target.label}: the plan {pin.plan} was made on this machine (--local), not "
            "over SSH: not connecting",
            "apply it with --local where it was made, or make a plan for this host",
        )
    if now != pin.destination:
        host, port, user = pin.destination
        raise NotThePlansHost(
            f"{target.label}: the plan {pin.plan} was made for {user or '?'}@{host} port "
            f"{port}, and OpenSSH resolves this run to {target.user or '?'}@{target.hostname} "
            f"port {target.port}: not connecting",
            "a plan is applied only on the host it was made on: make a plan for this host",
        )


def check_plan_host_key(target: SshTarget, key: paramiko.PKey) -> None:
    """run --plan: the key the host offered in the handshake must be the one the plan was
    made with; checked before any authentication (nothing of ours reaches another host)."""
    pin = target.plan_pin
    if pin is None or pin.host_key is None:
        return
    offered = fingerprint(key)
    if offered != pin.host_key:
        raise NotThePlansHost(
            f"{target.label}: the host offered the key {key.get_name()} {offered}, and the "
            f"plan {pin.plan} was made on the host with the key {pin.host_key}: another host; "
            "not logging in",
            "a plan is applied only on the host it was made on: make a plan for this host",
        )


def connect_route(
    target: SshTarget, hooks: Hooks, opened: list[paramiko.SSHClient]
) -> paramiko.SSHClient:
    """Every hop in turn, each through the one before; returns the client of ``target``.

    Each opened client is appended to ``opened`` (so a failure half-way closes them all).
    """
    sock: Any = None
    previous: SshTarget | None = None
    client: paramiko.SSHClient | None = None
    check_plan_destination(target)  # run --plan: only where the plan was made
    for hop in target.route:
        algorithms(hop)  # an algorithm list nothing can satisfy is refused before connecting
    for hop in target.route:
        for notice in hop.notices:
            hooks.on_notice(notice)
        if client is not None and previous is not None:
            sock = _forward(client, previous, hop)
        elif hop.proxy_command:
            sock = _proxy_command(hop)
        else:
            sock = _open_socket(hop, target.on_open)
        client = connect_one(hop, sock, hooks, target.on_open)
        opened.append(client)
        previous = hop
    assert client is not None
    return client


def _forward(client: paramiko.SSHClient, jump: SshTarget, hop: SshTarget) -> paramiko.Channel:
    transport = client.get_transport()
    assert transport is not None
    try:
        return transport.open_channel(
            "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0), timeout=hop.connect_timeout
        )
    except (paramiko.SSHException, OSError, EOFError) as error:
        raise Unreachable(
            f"{jump.label} could not reach {hop.hostname}:{hop.port}: {error or type(error).__name__}",
            "check the ProxyJump chain and that the jump host may forward",
        ) from None


def _proxy_command(hop: SshTarget) -> paramiko.ProxyCommand:
    assert hop.proxy_command is not None
    shell = os.environ.get("SHELL") or "/bin/sh"
    try:
        # As ssh does: the user's shell runs "exec COMMAND" (pipes and quotes work).
        return paramiko.ProxyCommand(shlex.join([shell, "-c", f"exec {hop.proxy_command}"]))
    except (OSError, paramiko.SSHException) as error:
        raise Unreachable(
            f"{hop.label}: cannot start the ProxyCommand {hop.proxy_command!r} ({error})",
            "check the ProxyCommand of your ssh config",
        ) from None


def _open_socket(target: SshTarget, on_open: Callable[[Any], None] | None = None) -> socket.socket:
    family = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}.get(
        target.address_family, socket.AF_UNSPEC
    )
    try:
        addresses = socket.getaddrinfo(target.hostname, target.port, family, socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise Unreachable(
            f"{target.label}: cannot resolve {target.hostname!r} ({error.strerror})",
            "check the host name, or use its address",
        ) from None
    last: OSError | None = None
    for af, kind, proto, _, address in addresses:
        sock = socket.socket(af, kind, proto)
        sock.settimeout(target.connect_timeout)
        if on_open is not None:
            on_open(sock)
        try:
            sock.connect(address)
        except OSError as error:
            sock.close()
            last = error
            continue
        # Without TCP_NODELAY each small exec request waits on Nagle: ~45 ms instead of ~3 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    if isinstance(last, TimeoutError):
        raise Unreachable(
            f"{target.label}: no answer within {target.connect_timeout:g}s",
            "check that the host is up and port reachable, or raise --connect-timeout",
        )
    if isinstance(last, ConnectionRefusedError):
        raise Unreachable(
            f"{target.label}: connection refused", "is sshd running on that port? check --port"
        )
    raise Unreachable(
        f"{target.label}: {(last.strerror if last else None) or last}", "check the network path"
    )


def _allowed(
    option: str, wanted: tuple[str, ...], ours: tuple[str, ...], host: str
) -> tuple[str, ...]:
    """The user's algorithms, in the user's order, that paramiko has."""
    if not wanted:
        return ours
    chosen = tuple(dict.fromkeys(_ALIASES.get(a, a) for a in wanted if _ALIASES.get(a, a) in ours))
    if not chosen:
        raise SshSetupError(
            f"{host}: none of the {option} your ssh config allows ({','.join(wanted)}) "
            "is one runbook (paramiko) supports",
            "allow one of "
            + ",".join(a for a in ours if a in _OPENSSH_DEFAULTS or _ALIASES.get(a) in ours)
            + " for this host",
        )
    return chosen


def algorithms(target: SshTarget) -> dict[str, tuple[str, ...]]:
    """What may be negotiated: the config's lists (in its order) that paramiko supports."""
    ours = {
        "HostKeyAlgorithms": ("_preferred_keys", target.host_key_algorithms),
        "KexAlgorithms": ("_preferred_kex", target.kex_algorithms),
        "Ciphers": ("_preferred_ciphers", target.ciphers),
        "MACs": ("_preferred_macs", target.macs),
    }
    return {
        option: _allowed(
            option, wanted, tuple(getattr(paramiko.Transport, attribute)), target.label
        )
        for option, (attribute, wanted) in ours.items()
    }


def connect_one(
    target: SshTarget, sock: Any, hooks: Hooks, on_open: Callable[[Any], None] | None = None
) -> paramiko.SSHClient:
    """Handshake, host key check and login over ``sock``."""
    known = knownhosts.read_files(target.known_hosts_files + target.global_known_hosts_files)
    for problem in known.problems:
        hooks.on_notice(f"warning: {problem}")
    try:
        transport = paramiko.Transport(sock)
    except (paramiko.SSHException, OSError) as error:
        raise Unreachable(f"{target.label}: {error}", "check the network path") from None
    if on_open is not None:
        on_open(transport)
    try:
        options = transport.get_security_options()
        allowed = algorithms(target)
        options.key_types = tuple(
            knownhosts.preferred_algorithms(
                known.entries, target.host_key_name, allowed["HostKeyAlgorithms"]
            )
        )
        options.kex = allowed["KexAlgorithms"]
        options.ciphers = allowed["Ciphers"]
        options.digests = allowed["MACs"]
        transport.banner_timeout = target.connect_timeout
        transport.handshake_timeout = target.connect_timeout
        transport.auth_timeout = target.connect_timeout
        try:
            transport.start_client(timeout=target.connect_timeout)
            # start_client returns when the time is up even if the handshake did not finish.
            key = transport.get_remote_server_key()
        except (paramiko.SSHException, EOFError, OSError) as error:
            if not transport.is_active() and target.proxy_command:
                raise Unreachable(
                    f"{target.label}: the ProxyCommand ended before the SSH handshake "
                    f"({target.proxy_command})",
                    "run the ProxyCommand by hand to see why",
                ) from None
            if transport.is_active():  # start_client's time ran out
                raise Unreachable(
                    f"{target.label}: SSH handshake failed: no answer within {target.connect_timeout:g}s",
                    "is an SSH server listening on that port? or raise --connect-timeout",
                ) from None
            raise Unreachable(
                f"{target.label}: SSH handshake failed ({error or type(error).__name__})",
                "is an SSH server listening on that port?",
            ) from None
        check_plan_host_key(target, key)  # run --plan: before any authentication
        verify_host_key(target, known.entries, key, hooks)
        authenticate(transport, target, hooks)
        if target.server_alive_interval > 0:
            _ServerAlive(transport, target.server_alive_interval, target.server_alive_count_max)
        else:
            transport.set_keepalive(15)
    except BaseException:
        transport.close()
        raise
    client = paramiko.SSHClient()
    # An SSHClient around our own transport: what callers use is get_transport() and close().
    setattr(client, "_transport", transport)  # noqa: B010
    return client


class _ServerAlive:
    """ServerAliveInterval/CountMax: close the connection after CountMax unanswered probes."""

    def __init__(self, transport: paramiko.Transport, interval: int, count_max: int) -> None:
        self.transport = transport
        self.interval = interval
        self.count_max = max(count_max, 1)
        threading.Thread(target=self._watch, name="ssh-server-alive", daemon=True).start()

    def _watch(self) -> None:
        missed = 0
        pause = threading.Event()  # never set: waits out the interval between probes
        while self.transport.is_active():
            answered = threading.Event()
            threading.Thread(target=self._probe, args=(answered,), daemon=True).start()
            if answered.wait(self.interval):
                missed = 0
                pause.wait(self.interval)
                continue
            missed += 1
            if missed >= self.count_max:
                self.transport.close()
                return

    def _probe(self, answered: threading.Event) -> None:
        try:
            self.transport.global_request("keepalive@openssh.com", wait=True)
        except (paramiko.SSHException, EOFError, OSError):
            return  # the connection is going away; the watcher ends it
        answered.set()


__all__ = ["Hooks", "connect_route"]
