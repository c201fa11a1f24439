"""One operator per host: a lock taken on the host itself for the length of a destructive run.

``mkdir`` is atomic on every filesystem, so the first run to create the folder holds the
lock; its owner file says who and since when. The folder lives in /run/lock (cleared on
boot) unless $RUNBOOK_LOCK_DIR on the host says otherwise.
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


class _Runs(Protocol):
    def run(
        self, command: str, timeout: float, *, output_limit: int = ..., as_root: bool = False
    ) -> Any: ...


class HostLock:
    def __init__(self, transport: _Runs, host: str, owner: dict[str, Any]) -> None:
        self.transport, self.host, self.owner = transport, host, owner
        self.held = False

    def acquire(self, break_stale: bool = False) -> None:
        if break_stale:
            self._release()
        owner = quote(json.dumps(self.owner))
        command = (
            f'd={_DIR}; [ -d "$d" ] && [ -w "$d" ] || d=/tmp; '
            f'if mkdir "$d/{LOCK_NAME}" 2>/dev/null; then printf %s {owner} > "$d/{LOCK_NAME}/owner"; '
            f'else cat "$d/{LOCK_NAME}/owner" 2>/dev/null; exit 75; fi'
        )
        result = self.transport.run(command, 15)
        if result.exit_status == 75:
            try:
                owner_found = json.loads(result.stdout or "{}")
            except ValueError:
                owner_found = {}
            raise HostLocked(self.host, owner_found if isinstance(owner_found, dict) else {})
        self.held = result.exit_status == 0

    def release(self) -> None:
        if self.held:
            self._release()
            self.held = False

    def _release(self) -> None:
        self.transport.run(
            f'd={_DIR}; [ -d "$d" ] && [ -w "$d" ] || d=/tmp; rm -rf "$d/{LOCK_NAME}"', 15
        )
