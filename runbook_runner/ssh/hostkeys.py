"""Host keys: the decision on the key a host offers, fingerprints, the messages for unknown
and changed keys, recording a new one.

known_hosts is read, and its verdict given, by :mod:`runbook_runner.ssh.knownhosts`;
:func:`verify_host_key` acts on the verdict as OpenSSH would.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import paramiko

from runbook_runner.errors import HostKeyChanged, HostKeyRevoked, UnknownHostKey
from runbook_runner.ssh import knownhosts
from runbook_runner.ssh.hooks import Hooks
from runbook_runner.ssh.knownhosts import hash_name
from runbook_runner.ssh.target import SshTarget


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
    return blob_fingerprint(key.asbytes())


def blob_fingerprint(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


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


def verify_host_key(
    target: SshTarget, entries: tuple[knownhosts.Entry, ...], key: paramiko.PKey, hooks: Hooks
) -> None:
    name = target.host_key_name
    blob = key.asbytes()
    offered = f"{key.get_name()} {blob_fingerprint(blob)}"
    decision = knownhosts.check(entries, name, blob, target.host_key_plain_name)
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
    pin = target.plan_pin
    if pin is not None and pin.host_key == blob_fingerprint(blob):
        # run --plan: known_hosts does not know the host, and it offered the key the
        # approved plan was made with (that key was verified when the plan was made).
        hooks.on_notice(
            f"{target.label}: not in known_hosts; its key {offered} is the one the plan "
            f"{pin.plan} records: accepted for this run, not recorded"
        )
        return
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
