"""A saved plan's approval through OpenSSH's own signatures (``ssh-keygen -Y``).

As git signs commits with SSH keys: the approver signs the plan file's bytes with
``ssh-keygen -Y sign -n runbook-plan`` (the namespace keeps a plan's signature from being
any other file's), and a run checks it with ``ssh-keygen -Y verify`` against an
``allowed_signers`` file (``man ssh-keygen``, ALLOWED SIGNERS). OpenSSH is the oracle: what
a good signature is, and who made it, is its answer, never ours. The signature covers the
whole file: the gates, the commands, the host key, everything the reviewer read.

Every file handed to ssh-keygen is first read here, bounded and regular files only (a FIFO
or /dev/zero given as ``--allowed-signers`` must not hang ssh-keygen), and passed as a
private copy: what is verified is exactly what was read.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.errors import SshSetupError

NAMESPACE = "runbook-plan"
SIGNATURE_LIMIT = 64 * 1024  # an SSH signature is a few hundred bytes
TIMEOUT_S = 60.0  # ssh-keygen may ask a key's passphrase on the terminal


class SignatureRefused(SshSetupError):
    """No good signature by an allowed signer over the plan (exit 2: bad input)."""


@dataclass(frozen=True)
class Verified:
    """A good signature: who signed (the allowed_signers principal) and OpenSSH's words."""

    principal: str
    said: str


def signature_path(plan: str | Path) -> Path:
    """Where a plan's signature is: ``PLAN.sig``, as ``ssh-keygen -Y sign FILE`` writes it."""
    return Path(f"{plan}.sig")


def _program() -> str:
    found = localfile.program("ssh-keygen")
    if found is None:
        raise SshSetupError(
            "ssh-keygen is not installed: a plan's signature is OpenSSH's (8.1 or later)",
            "install the OpenSSH client, or approve with --approved-sha256 HASH",
        )
    return found


def _run(argv: list[str], data: bytes | None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            argv,
            input=data,
            stdin=None if data is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SshSetupError(
            f"cannot run {argv[0]} ({error})", "check your OpenSSH client (ssh-keygen -Y)"
        ) from None


def _said(done: subprocess.CompletedProcess[bytes]) -> str:
    text = (done.stderr or b"").decode("utf-8", "replace") + (done.stdout or b"").decode(
        "utf-8", "replace"
    )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines)[:300] or f"exit status {done.returncode}"


def sign(data: bytes, key: str) -> bytes:
    """The armored signature of ``data`` with ``key`` (a private key file, or a public key
    whose private half the agent holds), in the ``runbook-plan`` namespace."""
    done = _run([_program(), "-Y", "sign", "-q", "-f", key, "-n", NAMESPACE], data)
    if done.returncode != 0 or b"BEGIN SSH SIGNATURE" not in done.stdout:
        raise SshSetupError(
            f"ssh-keygen could not sign the plan with {key}: {_said(done)}",
            "give --sign-with the approver's SSH key (ssh-keygen -Y sign needs OpenSSH 8.1+)",
        )
    return done.stdout


def verify(data: bytes, signature: Path, allowed_signers: Path, principal: str | None) -> Verified:
    """Check ``signature`` over ``data`` with ``ssh-keygen -Y verify`` against
    ``allowed_signers``; the signer is ``principal`` (``--approved-by``), or the one the
    allowed_signers file names for the signing key (``ssh-keygen -Y find-principals``)."""
    sig = localfile.read_bytes(signature, SIGNATURE_LIMIT)
    signers = localfile.read_bytes(allowed_signers, localfile.CONFIG_LIMIT)
    program = _program()
    with tempfile.TemporaryDirectory(prefix="runbook-verify-") as folder:
        sig_copy, signers_copy = Path(folder) / "plan.sig", Path(folder) / "allowed_signers"
        sig_copy.write_bytes(sig)
        signers_copy.write_bytes(signers)
        if principal is None:
            found = _run(
                [program, "-Y", "find-principals", "-s", str(sig_copy), "-f", str(signers_copy)],
                None,
            )
            names = found.stdout.decode("utf-8", "replace").split()
            if found.returncode != 0 or not names:
                raise SignatureRefused(
                    f"{signature}: signed by no key {allowed_signers} allows ({_said(found)})",
                    "sign with an approver's key listed in the allowed_signers file",
                )
            principal = names[0]
        done = _run(
            [
                program,
                "-Y",
                "verify",
                "-f",
                str(signers_copy),
                "-I",
                principal,
                "-n",
                NAMESPACE,
                "-s",
                str(sig_copy),
            ],
            data,
        )
    if done.returncode != 0:
        raise SignatureRefused(
            f"{signature}: not a good signature of this plan by {principal} ({_said(done)})",
            f"the plan changed after it was signed, or {principal} did not sign it with a key "
            f"{allowed_signers} allows for the namespace {NAMESPACE}",
        )
    return Verified(principal, _said(done))
