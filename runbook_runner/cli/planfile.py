"""``run --plan FILE``: the plan file read once, checked, and its approval proved, before
anything connects; and ``--sign-with KEY``: the saved plan signed as it is written.

The plan file is input like any other: a regular file only, at most
``localfile.PLAN_LIMIT`` bytes, parsed with depth and shape bounds (plan/saved.py), every
refusal one line naming the file (exit 2). Its approval is one of two, and the run says
which it used:

- a signature: ``FILE.sig`` made with ``ssh-keygen -Y sign -n runbook-plan``, checked with
  ``ssh-keygen -Y verify`` against ``--allowed-signers`` (ssh/signatures.py); the signer
  is the approver (``--approved-by`` names the one expected, else the file's principal);
- ``--approved-sha256 HASH``: the plan's SHA-256 as the reviewer gave it out of band.

A digest alone proves nothing (anyone can recompute it), so one of them is required. The
plan then pins the host it was made on (its key and ``ssh -G`` destination) for the
connection: ssh/connect.py refuses another before logging in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.errors import UsageError
from runbook_runner.plan import saved as saved_plan


def read(args: argparse.Namespace) -> saved_plan.SavedPlan:
    """Read ``args.plan``, check it and its approval, and set on ``args`` what the rest of
    the command takes from it: the runbook and host it names (unless the command line
    does), the approver, the approval said in words, and the host pin."""
    where = str(args.plan)
    try:
        data = localfile.read_regular(Path(where), localfile.PLAN_LIMIT)
    except OSError as error:
        raise UsageError(f"--plan {where}: {error.strerror or error}", "runbook run") from None
    approved = saved_plan.load(data, where)
    args.plan_approval = approval(args, approved, data)
    asked = approved.document.get("asked", {})
    if not args.runbook and isinstance(asked.get("runbook"), str):
        args.runbook = asked["runbook"]
    named = args.host or getattr(args, "hosts", None) or getattr(args, "local", False)
    if not named and isinstance(asked.get("host"), str):
        args.host = asked["host"]
        if args.port is None and isinstance(asked.get("port"), int):
            args.port = asked["port"]
    from runbook_runner.ssh.target import PlanPin

    args.plan_pin = PlanPin(where, approved.host_key, approved.destination)
    args.saved_plan = approved
    return approved


def approval(args: argparse.Namespace, approved: saved_plan.SavedPlan, data: bytes) -> str:
    """How the plan's approval was proved, in words; refused (exit 2) when it is not."""
    signers = getattr(args, "allowed_signers", None)
    given = getattr(args, "approved_sha256", None)
    said: list[str] = []
    if signers:
        from runbook_runner.ssh import signatures

        signature = signatures.signature_path(args.plan)
        good = signatures.verify(data, signature, Path(signers), args.approved_by)
        args.approved_by = args.approved_by or good.principal
        said.append(
            f"signed by {good.principal} (ssh-keygen -Y verify of {signature} against {signers})"
        )
    if given:
        saved_plan.check_approved_sha256(approved, given, str(args.plan))
        said.append("its SHA-256 as given with --approved-sha256")
    if not said:
        raise UsageError(
            f"--plan {args.plan}: say how it was approved: --allowed-signers FILE (the plan "
            f"signed with ssh-keygen -Y sign -n {saved_plan.SIGNATURE_NAMESPACE}, in "
            f"{args.plan}.sig) or --approved-sha256 HASH (its SHA-256 as the reviewer gave it)",
            "runbook run",
        )
    return " and ".join(said)


def sign(path: str, key: str) -> Path:
    """``--sign-with KEY``: sign the plan file just written, as it is on disk; the signature
    goes next to it (``FILE.sig``), whole or not at all."""
    import os
    import tempfile

    from runbook_runner.ssh import signatures

    data = localfile.read_regular(Path(path), localfile.PLAN_LIMIT)
    armored = signatures.sign(data, key)
    target = signatures.signature_path(path)
    handle, temporary = tempfile.mkstemp(prefix=".plan-sig-", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(armored)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
