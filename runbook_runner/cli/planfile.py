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
connection: ssh/connect.py refuses another before logging in, and a host known_hosts does
not know is accepted when it offers the key the approved plan records (ssh/hostkeys.py).

``run --resume`` of a run that applied a plan goes on under that plan only as ``run
--plan`` would start it (``resumed``): the file the journal names, unchanged, its approval
proved again from the command line (a journal is no proof: anyone can edit it), and the
plan's host pinned for the connection.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.cli.request import Approval, Request
from runbook_runner.errors import UsageError
from runbook_runner.plan import saved as saved_plan


def read(request: Request) -> Request:
    """Read the plan the request names, check it and its approval, and give the request
    the rest of the command takes from it: the runbook and host it names (unless the command
    line does), the approver, the approval said in words, and the host pin."""
    where = str(request.approval.plan)
    try:
        data = localfile.read_bytes(Path(where), localfile.PLAN_LIMIT)
    except OSError as error:
        raise UsageError(f"--plan {where}: {error.strerror or error}", "runbook run") from None
    approved = saved_plan.load(data, where)
    words, approved_by = approval(request.approval, approved, data)
    asked = approved.document.get("asked", {})
    runbook = request.runbook
    if not runbook and isinstance(asked.get("runbook"), str):
        runbook = asked["runbook"]
    target = request.target
    if not (target.host or target.hosts or target.local) and isinstance(asked.get("host"), str):
        port = target.port
        if port is None and isinstance(asked.get("port"), int):
            port = asked["port"]
        user = target.user
        if user is None and approved.destination is not None:
            user = approved.destination[2]  # the user OpenSSH resolved when it was made
        target = replace(target, host=asked["host"], port=port, user=user)
    from runbook_runner.ssh.target import PlanPin

    request = replace(
        request,
        runbook=runbook,
        target=target,
        approval=replace(request.approval, approved_by=approved_by),
        saved_plan=approved,
        plan_approval=words,
        plan_pin=PlanPin(where, approved.host_key, approved.destination),
    )
    return request


def resumed(request: Request) -> Request:
    """``--resume`` of a run that applied a saved plan: the request as ``run --plan`` of the
    same file gives it (runbook and approval proved again, host pinned), read before
    anything connects; a run without a plan, or a journal that cannot be found, as it is
    (the rest is the resume's own checks, cli/host.py)."""
    import os

    from runbook_runner import journal

    try:
        path = journal.find(str(request.resume), journal.default_dir(os.environ))
    except journal.UnknownRun:
        return request  # said by the resume itself (exit 7)
    mark = (journal.read(path).first("run-start") or {}).get("plan")
    if not isinstance(mark, dict):
        return request
    where = str(mark.get("file"))
    try:
        data = localfile.read_bytes(Path(where), localfile.PLAN_LIMIT)
    except OSError as error:
        raise journal.JournalError(
            f"run {path.stem} applied the plan {where}, which cannot be read now "
            f"({error.strerror or error}): a resume goes on only under the same plan"
        ) from None
    approved = saved_plan.load(data, where)
    if approved.sha256 != mark.get("sha256"):
        raise journal.JournalError(
            f"run {path.stem} applied the plan {where} with SHA-256 {mark.get('sha256')}; the "
            "file is another plan now: a resume goes on only under the same plan"
        )
    given = replace(request.approval, plan=where)
    if not (given.allowed_signers or given.approved_sha256):
        raise UsageError(
            f"run {path.stem} applied the plan {where}: a resume proves its approval again, "
            "as run --plan did: give --allowed-signers FILE or --approved-sha256 HASH",
            "runbook run",
        )
    words, approved_by = approval(given, approved, data)
    from runbook_runner.ssh.target import PlanPin

    return replace(
        request,
        approval=replace(given, approved_by=approved_by),
        saved_plan=approved,
        plan_approval=words,
        plan_pin=PlanPin(where, approved.host_key, approved.destination),
    )


def approval(
    given: Approval, approved: saved_plan.SavedPlan, data: bytes
) -> tuple[str, str | None]:
    """How the plan's approval was proved, in words, and who approved it (``--approved-by``,
    else the signer); refused (exit 2) when it is not proved."""
    plan = str(given.plan)
    approved_by = given.approved_by
    if approved_by is not None and not approved_by.strip():
        raise UsageError(
            "--approved-by is empty: name the person who approved the plan", "runbook run"
        )
    said: list[str] = []
    if given.allowed_signers:
        from runbook_runner.ssh import signatures

        signature = signatures.signature_path(plan)
        good = signatures.verify(data, signature, Path(given.allowed_signers), approved_by)
        approved_by = approved_by or good.principal
        said.append(
            f"signed by {good.principal} (ssh-keygen -Y verify of {signature} against "
            f"{given.allowed_signers})"
        )
    if given.approved_sha256:
        saved_plan.check_approved_sha256(approved, given.approved_sha256, plan)
        said.append("its SHA-256 as given with --approved-sha256")
    if not said:
        raise UsageError(
            f"--plan {plan}: say how it was approved: --allowed-signers FILE (the plan "
            f"signed with ssh-keygen -Y sign -n {saved_plan.SIGNATURE_NAMESPACE}, in "
            f"{plan}.sig) or --approved-sha256 HASH (its SHA-256 as the reviewer gave it)",
            "runbook run",
        )
    return " and ".join(said), approved_by


def sign(path: str, key: str) -> Path:
    """``--sign-with KEY``: sign the plan file just written, as it is on disk; the signature
    goes next to it (``FILE.sig``), whole or not at all."""
    import os
    import tempfile

    from runbook_runner.ssh import signatures

    data = localfile.read_bytes(Path(path), localfile.PLAN_LIMIT)
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
