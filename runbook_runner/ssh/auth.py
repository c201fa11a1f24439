"""Logging in with keys, in OpenSSH's order: the agent's keys (only those named by
IdentityFile when IdentitiesOnly is set), then the remaining identity files, asking for a
passphrase where one is needed."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko
import paramiko.agent

from runbook_runner.errors import AuthenticationFailed, SshSetupError, Unreachable
from runbook_runner.ssh.hooks import Hooks
from runbook_runner.ssh.hostkeys import blob_fingerprint
from runbook_runner.ssh.keyfiles import (
    LOAD_ERRORS,
    is_encrypted,
    key_file_problem,
    public_blob,
    public_key_file,
)
from runbook_runner.ssh.target import SshTarget

PASSPHRASE_TRIES = 3


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
            public_only.append(_Identity(str(path), public_key_file(path), path=path))
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
        except (*LOAD_ERRORS, OSError) as error:
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
        except LOAD_ERRORS:
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
