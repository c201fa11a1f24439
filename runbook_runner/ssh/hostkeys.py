"""Host keys: fingerprints, the messages for unknown and changed keys, recording a new one.

known_hosts is read by :mod:`runbook_runner.ssh.knownhosts`; the decision is made in
:mod:`runbook_runner.ssh.connect`.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import paramiko

from runbook_runner.errors import HostKeyChanged, UnknownHostKey
from runbook_runner.ssh.knownhosts import hash_name


def unknown_host_key(host: str, key: paramiko.PKey) -> UnknownHostKey:
    return UnknownHostKey(
        f"{host}: unknown host key {key.get_name()} {fingerprint(key)}",
        "check the fingerprint with the host's owner, then re-run with --accept-new-host-key",
    )


def host_key_changed(host: str, expected: paramiko.PKey, got: paramiko.PKey) -> HostKeyChanged:
    return HostKeyChanged(
        f"{host}: HOST KEY CHANGED: known_hosts has {expected.get_name()} {fingerprint(expected)}, "
        f"the host offered {got.get_name()} {fingerprint(got)}",
        "someone may be intercepting the connection, or the host was reinstalled: "
        "verify out of band, then remove the old line from known_hosts",
    )


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint: ``SHA256:base64-without-padding``."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def record_host_key(
    known_hosts: Path, hostname: str, key: paramiko.PKey, *, hashed: bool = False
) -> None:
    """Append one known_hosts line, as OpenSSH's accept-new does (hashed: HashKnownHosts)."""
    known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = hash_name(hostname, os.urandom(20)) if hashed else hostname
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    with known_hosts.open("a", encoding="ascii") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
