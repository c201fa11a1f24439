"""Where and how to connect: see :mod:`runbook_runner.ssh.config` (OpenSSH resolves it)."""

from __future__ import annotations

from runbook_runner.ssh.config import SshTarget, resolve_target

__all__ = ["SshTarget", "resolve_target"]
