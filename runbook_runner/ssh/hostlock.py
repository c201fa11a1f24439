"""One operator per host: a lock taken on the host itself for the length of a destructive run.

The lock is a folder, ``runbook-runner.lock``, in /run/lock (cleared on boot) unless
$RUNBOOK_LOCK_DIR on the host says otherwise; its owner file says who, which run, and
since when.

It is bound to the SSH connection: a process on the host (``flock`` on the folder's
``alive`` file, then ``cat`` reading a channel of ours) holds it for as long as our
connection lives. A runner that dies (SIGKILL, a closed laptop) drops its connection, so
its lock is free again: the next run finds the folder, takes the ``flock``, and records
whose lock it took over. After a reconnect the run takes its lock again, and stops if
another run took it meanwhile. On a host without ``flock`` (util-linux), the folder alone
is the lock (``mkdir`` is atomic): a dead run's lock stays until its own resume takes it
over or ``--break-lock`` removes it.

It fails closed: a lock folder that cannot be created, or an owner file that cannot be
written, stops the run with the host's own reason (never a fallback to /tmp, never a run
without the lock).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.format.template import quote

LOCK_NAME = "runbook-runner.lock"
_DIR = '"${RUNBOOK_LOCK_DIR:-/run/lock}"'
_HELD = "rbr-lock-held"
_NO_FLOCK = "rbr-no-flock"
LOCK_TAKE_S = 15  # how long taking the lock may take before the host is asked if it answers


class HostLocked(RunbookRunnerError):
    def __init__(self, host: str, owner: dict[str, Any], *, meanwhile: bool = False) -> None:
        who = owner.get("operator", "someone")
        since = owner.get("started", "an unknown time")
        run = owner.get("run", "?")
        super().__init__(
            f"{host} is locked by {who} (run {run}, from {owner.get('client', '?')}) since {since}"
            + (" (taken while this run was reconnecting: stopped here)" if meanwhile else "")
        )
        self.owner = owner


class LockUnavailable(RunbookRunnerError):
    """The lock could not be taken for a reason other than another run holding it."""


class _Runs(Protocol):
    def run(
        self, command: str, timeout: float, *, output_limit: int = ..., as_root: bool = False
    ) -> Any: ...

    def hold(self, command: str, ready: str, timeout: float) -> Any: ...

    @property
    def after_reconnect(self) -> list[Any]: ...


class HostLock:
    def __init__(self, transport: _Runs, host: str, owner: dict[str, Any]) -> None:
        self.transport, self.host, self.owner = transport, host, owner
        self.held = False
        self._channel: Any = None

    def acquire(self, break_stale: bool = False) -> dict[str, Any] | None:
        """Take the lock; returns the owner it took over from (a dead run's), if any."""
        if break_stale:
            self._release()
        previous = self._take(wait_s=0)
        self.transport.after_reconnect.append(self._retake)
        return previous

    def _retake(self) -> None:
        """After a reconnect: our old holder died with the old connection (or soon will)."""
        if not self.held:
            return
        self._channel = None
        try:
            previous = self._take(wait_s=20, retaking=True)
        except HostLocked as locked:
            self.held = False
            raise HostLocked(self.host, locked.owner, meanwhile=True) from None
        if previous and not self._ours(previous):
            # Another run held it while we were away: what it did is not ours to build on.
            raise HostLocked(self.host, previous, meanwhile=True)

    def _take(self, wait_s: int, retaking: bool = False) -> dict[str, Any] | None:
        owner = quote(json.dumps(self.owner))
        lock = f'"$d/{LOCK_NAME}"'
        wait = f"-w {wait_s}" if wait_s else "-n"
        script = (
            f"d={_DIR}; "
            f"command -v flock >/dev/null 2>&1 || {{ echo {_NO_FLOCK}; exit 0; }}; "
            f"if ! e=$(mkdir {lock} 2>&1) && ! [ -d {lock} ]; then "
            f'printf \'%s\\n\' "$d" "$e" >&2; exit 73; fi; '
            f'if ! e=$( (: >> {lock}/alive) 2>&1); then printf \'%s\\n\' "$d" "$e" >&2; exit 74; fi; '
            f"exec 9>> {lock}/alive; "
            # The file we locked must still be the lock's (not one a releasing run unlinked).
            f"if ! flock {wait} 9 || {{ [ -d /proc/$$/fd ] && ! [ /proc/$$/fd/9 -ef {lock}/alive ]; }}; "
            f"then cat {lock}/owner 2>/dev/null; exit 75; fi; "
            f"p=$(cat {lock}/owner 2>/dev/null); "
            f"if ! e=$( (printf %s {owner} > {lock}/owner) 2>&1); then "
            f'rm -f {lock}/owner; printf \'%s\\n\' "$d" "$e" >&2; exit 74; fi; '
            f"printf '%s\\n' \"$p\" {_HELD}; exec cat > /dev/null"
        )
        held = self.transport.hold(script, _HELD, LOCK_TAKE_S + wait_s)
        if held.channel is not None:
            self._channel, self.held = held.channel, True
            previous = _owner(held.stdout.strip())
            return previous or None
        if held.exit_status == 0 and _NO_FLOCK in held.stdout:
            return None if retaking else self._take_folder_only()
        if held.exit_status == 75 and not wait_s and self._ours(_owner(held.stdout)):
            # Our own run's lock (a resume after the runner died): its holder ends as soon as
            # sshd sees that connection gone; wait a little for that.
            return self._take(wait_s=10)
        self._refused(held)
        return None  # not reached

    def _take_folder_only(self) -> dict[str, Any] | None:
        """The lock without flock: the folder alone (a resumed run takes its own over)."""
        owner = quote(json.dumps(self.owner))
        lock = f'"$d/{LOCK_NAME}"'
        command = (
            f"d={_DIR}; "
            f"if e=$(mkdir {lock} 2>&1); then "
            f"if e=$( (printf %s {owner} > {lock}/owner) 2>&1); then exit 0; fi; "
            f'rm -rf {lock}; printf \'%s\\n\' "$d" "$e" >&2; exit 74; fi; '
            f"if [ -d {lock} ]; then cat {lock}/owner 2>/dev/null; exit 75; fi; "
            f'printf \'%s\\n\' "$d" "$e" >&2; exit 73'
        )
        result = self.transport.run(command, 15)
        if result.exit_status == 0:
            self.held = True
            return None
        if result.exit_status == 75 and self._ours(_owner(result.stdout)):
            taken = self.transport.run(f"d={_DIR}; printf %s {owner} > {lock}/owner", 15)
            if taken.exit_status == 0:
                self.held = True
                return _owner(result.stdout)
        self._refused(result)
        return None  # not reached

    def _ours(self, found: dict[str, Any]) -> bool:
        return bool(found.get("run")) and found.get("run") == self.owner.get("run")

    def _refused(self, result: Any) -> None:
        if result.exit_status == 75:
            raise HostLocked(self.host, _owner(result.stdout))
        lines = (result.stderr or "").strip().splitlines()
        folder = lines[0] if len(lines) > 1 else "$RUNBOOK_LOCK_DIR or /run/lock"
        reason = lines[-1] if lines else f"exit status {result.exit_status}"
        if result.exit_status is None:
            # The host still answers (a stalled connection is a ConnectionLost, exit 3):
            # the lock's own commands hung, e.g. on the folder's file system.
            raise LockUnavailable(
                f"{self.host}: taking the lock in {folder} did not finish in time, though the "
                "host still answers; not running without the lock: check that folder's file "
                "system, or set RUNBOOK_LOCK_DIR on the host to another folder"
            )
        what = "write the lock's files in" if result.exit_status == 74 else "take the lock in"
        raise LockUnavailable(
            f"{self.host}: cannot {what} the lock folder {folder}: {reason}; "
            "not running without the lock: make that folder writable, "
            "or set RUNBOOK_LOCK_DIR on the host to one that is"
        )

    def release(self) -> None:
        if self.held:
            self._release()
            self.held = False
        if self._retake in self.transport.after_reconnect:
            self.transport.after_reconnect.remove(self._retake)

    def _release(self) -> None:
        self.transport.run(f'd={_DIR}; rm -rf "$d/{LOCK_NAME}"', 15)
        if self._channel is not None:
            self._channel.close()  # the holder on the host reads end-of-file and exits
            self._channel = None


def _owner(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
