"""Opening an authenticated SSH connection the way OpenSSH would, for a resolved target.

The route (ProxyJump hops, ProxyCommand, or a TCP socket), the algorithms the
user's config allows, the host key checked against known_hosts as OpenSSH reads it
(:mod:`runbook_runner.ssh.knownhosts`), then the keys offered in OpenSSH's order: the
agent's (only those named by IdentityFile when IdentitiesOnly is set), then the
remaining identity files.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import socket
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
import paramiko.agent

from runbook_runner import localfile
from runbook_runner.errors import (
    AuthenticationFailed,
    HostKeyChanged,
    HostKeyRevoked,
    SshSetupError,
    TransportError,
    UnknownHostKey,
    Unreachable,
)
from runbook_runner.ssh import knownhosts
from runbook_runner.ssh.fallback import OPENSSH_DEFAULT_ALGORITHMS
from runbook_runner.ssh.hostkeys import record_host_key
from runbook_runner.ssh.target import SshTarget

PassphrasePrompt = Callable[[str], str | None]
Notice = Callable[[str], None]
Recorded = Callable[[str, paramiko.PKey], None]
PASSPHRASE_TRIES = 3

# Suggested only among what OpenSSH itself enables by default (never CBC or MD5).
_OPENSSH_DEFAULTS = {
    name for names in OPENSSH_DEFAULT_ALGORITHMS.values() for name in names.split(",")
}
# OpenSSH and paramiko spell one algorithm differently.
_ALIASES = {"curve25519-sha256": "curve25519-sha256@libssh.org"}


@dataclass
class Hooks:
    passphrase_prompt: PassphrasePrompt | None
    on_record: Recorded
    on_notice: Notice


def connect_route(
    target: SshTarget, hooks: Hooks, opened: list[paramiko.SSHClient]
) -> paramiko.SSHClient:
    """Every hop in turn, each through the one before; returns the client of ``target``.

    Each opened client is appended to ``opened`` (so a failure half-way closes them all).
    """
    sock: Any = None
    previous: SshTarget | None = None
    client: paramiko.SSHClient | None = None
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
            sock = _open_socket(hop)
        client = connect_one(hop, sock, hooks)
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


def _open_socket(target: SshTarget) -> socket.socket:
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


def connect_one(target: SshTarget, sock: Any, hooks: Hooks) -> paramiko.SSHClient:
    """Handshake, host key check and login over ``sock``."""
    known = knownhosts.read_files(target.known_hosts_files + target.global_known_hosts_files)
    for problem in known.problems:
        hooks.on_notice(f"warning: {problem}")
    try:
        transport = paramiko.Transport(sock)
    except (paramiko.SSHException, OSError) as error:
        raise Unreachable(f"{target.label}: {error}", "check the network path") from None
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


# -- host keys ------------------------------------------------------------------------


def blob_fingerprint(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def verify_host_key(
    target: SshTarget, entries: tuple[knownhosts.Entry, ...], key: paramiko.PKey, hooks: Hooks
) -> None:
    name = target.host_key_name
    blob = key.asbytes()
    offered = f"{key.get_name()} {blob_fingerprint(blob)}"
    decision = knownhosts.check(entries, name, key.get_name(), blob, target.host_key_plain_name)
    where = f"{decision.entry.file}:{decision.entry.line}" if decision.entry else ""
    if decision.verdict is knownhosts.Verdict.KNOWN:
        return
    if decision.verdict is knownhosts.Verdict.REVOKED:
        raise HostKeyRevoked(
            f"{target.label}: the host offered a REVOKED key {offered} (@revoked at {where})",
            "do not connect: the key is marked compromised; ask the host's owner",
        )
    if decision.verdict is knownhosts.Verdict.CHANGED:
        assert decision.entry is not None
        raise HostKeyChanged(
            f"{target.label}: HOST KEY CHANGED: known_hosts has {decision.entry.key_type} "
            f"{blob_fingerprint(decision.entry.blob)} ({where}), the host offered {offered}",
            "someone may be intercepting the connection, or the host was reinstalled: "
            f"verify out of band, then remove the old line ({where})",
        )
    if decision.verdict is knownhosts.Verdict.CA_ONLY:
        raise UnknownHostKey(
            f"{target.label}: host certificates are not supported: known_hosts names only a "
            f"@cert-authority for {name} ({where}), and the host offered the plain key {offered}",
            "add the host's own key to known_hosts (ssh-keyscan, checked out of band)",
        )
    if not target.accept_new_host_key:
        known = (
            f" (known_hosts has only {', '.join(decision.other_types)} for it)"
            if decision.other_types
            else ""
        )
        if target.strict_host_key_checking == "no":
            raise UnknownHostKey(
                f"{target.label}: unknown host key {offered}{known}; the ssh config's "
                "StrictHostKeyChecking no is not followed (it would accept any key, an "
                "attacker's too)",
                "check the fingerprint with the host's owner, then re-run with "
                "--accept-new-host-key (a new key only: a changed one is still refused)",
            )
        raise UnknownHostKey(
            f"{target.label}: unknown host key {offered}{known}",
            "check the fingerprint with the host's owner, then re-run with --accept-new-host-key",
        )
    if not records(target.known_hosts):
        # UserKnownHostsFile /dev/null: ssh accepts the new key for this connection and
        # records it nowhere (appending to /dev/null); so do we, without an fsync it refuses.
        hooks.on_notice(
            f"{target.label}: accepted the new host key {offered} for this connection only: "
            f"UserKnownHostsFile is {target.known_hosts}, so it is not recorded"
        )
        return
    record_host_key(target.known_hosts, name, key, hashed=target.hash_known_hosts)
    hooks.on_record(name, key)


def records(known_hosts: Path) -> bool:
    """Whether a key appended to ``known_hosts`` is kept (not /dev/null or another device)."""
    try:
        return not stat.S_ISCHR(known_hosts.stat().st_mode)
    except OSError:
        return True  # not there yet: recording creates it


# -- authentication --------------------------------------------------------------------


@dataclass
class _Identity:
    label: str
    blob: bytes | None  # the public key, when known without the passphrase
    key: paramiko.PKey | None = None  # an agent key, or the loaded private key
    path: Path | None = None


def _agent_keys(target: SshTarget, hooks: Hooks) -> list[paramiko.AgentKey]:
    if not target.identity_agent:
        return []
    agent = paramiko.agent.AgentSSH()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(target.connect_timeout)
        sock.connect(target.identity_agent)
        getattr(agent, "_connect")(sock)  # noqa: B009  # AgentSSH's own socket set-up
    except (OSError, paramiko.SSHException) as error:
        sock.close()
        hooks.on_notice(f"warning: cannot use the SSH agent at {target.identity_agent} ({error})")
        return []
    return list(agent.get_keys())


def key_file_problem(path: Path) -> str | None:
    """What is wrong with a private key file, before reading it (None: looks usable)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "no such file"
    except OSError as error:
        return f"cannot read it ({error.strerror})"
    if stat.S_ISDIR(info.st_mode):
        return "a directory, not a key file"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > localfile.CONFIG_LIMIT:
        return f"larger than {localfile.CONFIG_LIMIT // localfile.MiB} MiB: not a key file"
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError as error:
        return f"cannot read it ({error.strerror})"
    if path.suffix == ".pub" or head.split(b" ", 1)[0] in _PUBLIC_PREFIXES:
        return "a public key; give the private key (the file without .pub)"
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        return (
            f"permissions {stat.S_IMODE(info.st_mode):04o} are too open, so ssh ignores this key; "
            "chmod 600 it"
        )
    return None


_PUBLIC_PREFIXES = {
    b"ssh-ed25519",
    b"ssh-rsa",
    b"ssh-dss",
    b"ecdsa-sha2-nistp256",
    b"ecdsa-sha2-nistp384",
    b"ecdsa-sha2-nistp521",
    b"sk-ssh-ed25519@openssh.com",
    b"sk-ecdsa-sha2-nistp256@openssh.com",
}


def public_blob(path: Path) -> bytes | None:
    """The public key of a key file without its passphrase: the .pub, or OpenSSH's header."""
    pub = Path(f"{path}.pub")
    try:
        words = localfile.read_text(pub, localfile.CONFIG_LIMIT, errors="replace").split()
        if len(words) >= 2:
            return base64.b64decode(words[1], validate=True)
    except (OSError, ValueError):
        pass
    try:
        text = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace")
    except OSError:
        return None
    if "BEGIN OPENSSH PRIVATE KEY" in text:
        header = _openssh_header(text)
        return header[1] if header else None
    if is_encrypted(path):
        return None
    try:
        return paramiko.PKey.from_path(path).asbytes()
    except (*_LOAD_ERRORS, OSError):
        return None


def _public_key_file(path: Path) -> bytes | None:
    """The key in a public key file ("TYPE BASE64 [comment]"), if it is one."""
    try:
        words = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace").split()
        return base64.b64decode(words[1], validate=True) if len(words) >= 2 else None
    except (OSError, ValueError):
        return None


def _identities(target: SshTarget, hooks: Hooks) -> tuple[list[_Identity], list[str]]:
    """OpenSSH's pubkey_prepare: agent keys first (file-named ones at their place), then files.

    A public key file (``IdentityFile ~/.ssh/key.pub``, as agents like 1Password suggest)
    names the agent's key; with no agent holding it, it is skipped (an -i one is an error).
    """
    problems: list[str] = []
    files: list[_Identity] = []
    public_only: list[_Identity] = []
    for name in target.identity_files:
        path = Path(name)
        problem = key_file_problem(path)
        if problem is not None and problem.startswith("a public key"):
            public_only.append(_Identity(str(path), _public_key_file(path), path=path))
            continue
        if problem is not None:
            if name in target.explicit_identities:
                raise SshSetupError(f"identity file {path}: {problem}", "check -i/--identity")
            if problem != "no such file":
                hooks.on_notice(f"warning: identity file {path}: {problem}; skipped")
                problems.append(f"{path}: {problem}")
            continue
        files.append(_Identity(str(path), public_blob(path), path=path))
    ordered: list[_Identity] = []
    for agent_key in _agent_keys(target, hooks):
        blob = agent_key.asbytes()
        matches = [f for f in files + public_only if f.blob == blob]
        if matches:
            files = [f for f in files if f.blob != blob]
            public_only = [f for f in public_only if f.blob != blob]
            ordered.append(_Identity(matches[0].label, blob, agent_key))
        elif not target.identities_only:
            ordered.append(
                _Identity(
                    f"agent key {agent_key.comment or blob_fingerprint(blob)}", blob, agent_key
                )
            )
    for unmatched in public_only:  # no agent holds its private key
        problem = "a public key, and no SSH agent holds its private key"
        if unmatched.label in target.explicit_identities:
            raise SshSetupError(
                f"identity file {unmatched.label}: {problem}",
                "give the private key (the file without .pub), or add it to ssh-agent",
            )
        hooks.on_notice(f"warning: identity file {unmatched.label}: {problem}; skipped")
        problems.append(f"{unmatched.label}: {problem}")
    return ordered + files, problems


def is_encrypted(path: Path) -> bool:
    """Does the key file need a passphrase? (OpenSSH format: its cipher; PEM: its header.)"""
    try:
        text = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace")
    except OSError:
        return False
    if "BEGIN OPENSSH PRIVATE KEY" in text:
        header = _openssh_header(text)
        return header is not None and header[0] != b"none"
    return "ENCRYPTED" in text


def _openssh_header(text: str) -> tuple[bytes, bytes] | None:
    """(cipher name, public key blob) of an OpenSSH-format private key file."""
    try:
        body = "".join(line for line in text.splitlines() if line and not line.startswith("-----"))
        data = base64.b64decode(body)
        magic = b"openssh-key-v1\x00"
        if not data.startswith(magic):
            return None
        offset = len(magic)
        fields: list[bytes] = []
        for _ in range(3):  # cipher name, kdf name, kdf options
            (size,) = struct.unpack(">I", data[offset : offset + 4])
            fields.append(data[offset + 4 : offset + 4 + size])
            offset += 4 + size
        offset += 4  # number of keys
        (size,) = struct.unpack(">I", data[offset : offset + 4])
        return fields[0], data[offset + 4 : offset + 4 + size]
    except (ValueError, struct.error):
        return None


_LOAD_ERRORS = (paramiko.SSHException, ValueError, TypeError, struct.error, IndexError)


def _load_private(
    identity: _Identity, target: SshTarget, hooks: Hooks, problems: list[str]
) -> paramiko.PKey | None:
    assert identity.path is not None
    path = identity.path
    explicit = str(path) in target.explicit_identities

    def unusable(problem: str) -> None:
        if explicit:
            raise SshSetupError(f"identity file {path}: {problem}", "check -i/--identity")
        hooks.on_notice(f"warning: identity file {path}: {problem}; skipped")
        problems.append(f"{path}: {problem}")

    if not is_encrypted(path):
        try:
            return paramiko.PKey.from_path(path)
        except PermissionError as error:
            unusable(f"cannot read it ({error.strerror})")
        except (*_LOAD_ERRORS, OSError) as error:
            unusable(f"not a private key runbook can read ({error or type(error).__name__})")
        return None
    prompt = None if target.batch_mode else hooks.passphrase_prompt
    for _ in range(PASSPHRASE_TRIES):
        answer = prompt(f"Enter passphrase for key '{path}': ") if prompt else None
        if answer is None:
            problems.append(f"{path} is encrypted and no passphrase was given")
            return None
        try:
            # paramiko wants the passphrase as bytes here (its stubs say str).
            return paramiko.PKey.from_path(path, answer.encode())  # type: ignore[arg-type]
        except _LOAD_ERRORS:
            continue  # a wrong passphrase: paramiko cannot decode the key
        except OSError as error:
            unusable(f"cannot read it ({error.strerror})")
            return None
    raise SshSetupError(
        f"identity file {path}: wrong passphrase ({PASSPHRASE_TRIES} tries)",
        "check the passphrase, or load the key into ssh-agent (ssh-add)",
    )


def authenticate(transport: paramiko.Transport, target: SshTarget, hooks: Hooks) -> None:
    user = target.user or ""
    identities, problems = _identities(target, hooks)
    tried: list[str] = []
    for identity in identities:
        key = identity.key
        if key is None:
            key = _load_private(identity, target, hooks, problems)
            if key is None:
                continue
        tried.append(identity.label)
        try:
            remaining = transport.auth_publickey(user, key)
        except paramiko.BadAuthenticationType as error:
            raise AuthenticationFailed(
                f"{target.label}: the host does not accept keys for {user} "
                f"(it allows: {', '.join(error.allowed_types) or 'nothing'})",
                "runbook logs in with SSH keys only",
            ) from None
        except paramiko.AuthenticationException:
            continue
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise Unreachable(
                f"{target.label}: the connection failed during login ({error or type(error).__name__})",
                "check the host; the server may limit login attempts (MaxAuthTries)",
            ) from None
        if remaining:
            raise AuthenticationFailed(
                f"{target.label}: the host wants more than a key ({', '.join(remaining)})",
                "runbook logs in with one SSH key only",
            )
        return
    detail = f"tried {', '.join(tried)}" if tried else "no key to offer"
    if problems:
        detail += "; " + "; ".join(problems)
    encrypted = any("encrypted" in p for p in problems)
    raise AuthenticationFailed(
        f"{target.label}: authentication failed as {user} ({detail})",
        "load the key into ssh-agent (ssh-add), or run from a terminal to be asked"
        if encrypted
        else "check --user and -i/--identity, or that the key is in authorized_keys",
    )


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


__all__ = ["Hooks", "TransportError", "connect_route", "key_file_problem"]
