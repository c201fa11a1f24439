"""One operator per host: a lock taken on the host itself for the length of a destructive run.

``mkdir`` is atomic on every filesystem, so the first run to create the folder holds the
lock; its owner file says who and since when. The folder lives in /run/lock (cleared on
boot) unless $RUNBOOK_LOCK_DIR on the host says otherwise.

It fails closed: a lock folder that cannot be created, or an owner file that cannot be
written, stops the run with the host's own reason (never a fallback to /tmp, never a run
without the lock). A resumed run whose own lock was left behind (its runner was killed)
takes it over: the owner file names the run.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.template import quote

LOCK_NAME = "runbook-runner.lock"
_DIR = '"${RUNBOOK_LOCK_DIR:-/run/lock}"'


class HostLocked(RunbookRunnerError):
    def __init__(self, host: str, owner: dict[str, Any]) -> None:
        who = owner.get("operator", "someone")
        since = owner.get("started", "an unknown time")
        run = owner.get("run", "?")
        super().__init__(
            f"{host} is locked by {who} (run {run}, from {owner.get('client', '?')}) since {since}"
        )
        self.owner = owner


class LockUnavailable(RunbookRunnerError):
    """The lock could not be taken for a reason other than another run holding it."""


class _Runs(Protocol):
    def run(
        self, command: str, timeout: float, *, output_limit: int = ..., as_root: bool = False
    ) -> Any: ...


class HostLock:
    def __init__(self, transport: _Runs, host: str, owner: dict[str, Any]) -> None:
        self.transport, self.host, self.owner = transport, host, owner
        self.held = False

    def acquire(self, break_stale: bool = False) -> dict[str, Any] | None:
        """Take the lock; returns the owner it took over from (a resumed run's own), if any."""
        if break_stale:
            self._release()
        owner = quote(json.dumps(self.owner))
        lock = f'"$d/{LOCK_NAME}"'
        command = (
            f"d={_DIR}; "
            f"if e=$(mkdir {lock} 2>&1); then "
            f"if e=$( (printf %s {owner} > {lock}/owner) 2>&1); then exit 0; fi; "
            f"rm -rf {lock}; printf '%s\\n' \"$d\" \"$e\" >&2; exit 74; fi; "
            f"if [ -d {lock} ]; then cat {lock}/owner 2>/dev/null; exit 75; fi; "
            f"printf '%s\\n' \"$d\" \"$e\" >&2; exit 73"
        )
        result = self.transport.run(command, 15)
        if result.exit_status == 0:
            self.held = True
            return None
        if result.exit_status == 75:
            try:
                owner_found = json.loads(result.stdout or "{}")
            except ValueError:
                owner_found = {}
            owner_found = owner_found if isinstance(owner_found, dict) else {}
            if owner_found.get("run") and owner_found.get("run") == self.owner.get("run"):
                self._take_over()
                return owner_found
            raise HostLocked(self.host, owner_found)
        lines = (result.stderr or "").strip().splitlines()
        folder = lines[0] if len(lines) > 1 else "$RUNBOOK_LOCK_DIR or /run/lock"
        reason = lines[-1] if len(lines) > 1 else f"exit status {result.exit_status}"
        if result.timed_out:
            reason = "the host did not answer within 15s"
        what = "write the lock's owner file in" if result.exit_status == 74 else "take the lock in"
        raise LockUnavailable(
            f"{self.host}: cannot {what} the lock folder {folder}: {reason}; "
            "not running without the lock: make that folder writable, "
            "or set RUNBOOK_LOCK_DIR on the host to one that is"
        )

    def _take_over(self) -> None:
        owner = quote(json.dumps(self.owner))
        result = self.transport.run(
            f'd={_DIR}; printf %s {owner} > "$d/{LOCK_NAME}/owner"', 15
        )
        if result.exit_status != 0:
            reason = (result.stderr or "").strip().splitlines()
            raise LockUnavailable(
                f"{self.host}: cannot take over this run's own lock: "
                + (reason[-1] if reason else f"exit status {result.exit_status}")
            )
        self.held = True

    def release(self) -> None:
        if self.held:
            self._release()
            self.held = False

    def _release(self) -> None:
        self.transport.run(f'd={_DIR}; rm -rf "$d/{LOCK_NAME}"', 15)
