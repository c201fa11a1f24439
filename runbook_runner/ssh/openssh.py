"""Asking the user's OpenSSH client: ``ssh -G`` prints the effective configuration.

The one subprocess call of the configuration (:func:`run_ssh_g`): Include, Match,
tokens, canonicalisation and first-match-wins are all OpenSSH's own, without touching
the network.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.errors import SshSetupError


def ssh_program() -> str | None:
    return localfile.program("ssh")


def run_ssh_g(
    program: str,
    host: str,
    ssh_config: Path | None,
    user: str | None,
    port: int | None,
    jump: str | None = None,
    identities: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> dict[str, list[str]] | None:
    """The one subprocess call: OpenSSH's effective configuration for ``host``.

    ``identities`` (-i) go along: with one, ssh adds no default identity files.
    None: this ssh has no -G (OpenSSH before 6.8); the caller falls back.
    """
    argv = [program, "-G"]
    if ssh_config is not None:
        argv += ["-F", str(ssh_config)]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    if jump:
        argv += ["-J", jump]
    for identity in identities:
        argv += ["-i", identity]
    for option in extra:
        argv += ["-o", option]
    argv += ["--", host]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SshSetupError(
            f"cannot ask OpenSSH for the configuration of {host} ({error})",
            "check your OpenSSH client and ssh config",
        ) from None
    if done.returncode != 0 and re.search(r"(illegal|unknown|invalid) option.*G", done.stderr):
        return None
    if done.returncode != 0:
        problem = "; ".join(
            line.strip()
            for line in done.stderr.splitlines()
            if line.strip() and not line.startswith("Pseudo-terminal")
        )
        raise SshSetupError(
            f"OpenSSH rejects the configuration for {host}: {problem or 'ssh -G failed'}",
            "fix your ssh config (ssh -G shows the problem too)",
        )
    return parse_ssh_g(done.stdout)


def parse_ssh_g(text: str) -> dict[str, list[str]]:
    """``key value`` lines -> {key: [values]} (keys repeat for IdentityFile and the like)."""
    options: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            options.setdefault(key.lower(), []).append(value.strip())
    return options
