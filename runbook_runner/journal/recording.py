"""Turns a run's events into journal lines (what happened, never a secret)."""

from __future__ import annotations

from typing import Any

from runbook_runner.cli import render
from runbook_runner.events import ConfirmRequest, Event, Observed, StepDone, StepStarting, Waiting
from runbook_runner.journal import TAIL_BYTES, Journal
from runbook_runner.runbook import Runbook


class Recorder:
    def __init__(self, journal: Journal, runbook: Runbook, params: dict[str, Any]) -> None:
        self.journal = journal
        self.runbook = runbook
        self.secrets = [
            str(params[name])
            for name, p in runbook.parameters.items()
            if p.secret and params.get(name) not in (None, "")
        ]

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def _redacted(self, items: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        return [
            {k: self.redact(v) if isinstance(v, str) else v for k, v in item.items()}
            for item in items
        ]

    def _tail(self, text: str) -> str:
        return self.redact(text[-TAIL_BYTES:])

    def on_event(self, event: Event) -> None:
        # Lines about read-only work are not fsynced one by one: the next destructive step's
        # line (or the run's end) syncs them with it. Losing them to a power cut only means
        # a resume repeats read-only steps.
        if isinstance(event, Observed):
            self.journal.write(
                "observed",
                sync=False,
                label=event.label,
                state=render.state_json(self.runbook, event.state),
                checks=[{**r.to_json(), "message": self.redact(r.message)} for r in event.results],
            )
        elif isinstance(event, StepStarting):
            self.journal.write(
                "step-start",
                sync=event.step.destructive,
                id=event.step.id,
                commands=list(event.commands),
                **({"items": self._redacted(event.acted)} if event.acted else {}),
            )
        elif isinstance(event, Waiting):
            self.journal.write(
                "wait",
                sync=False,
                step=event.step.id,
                elapsed_s=round(event.elapsed_s, 3),
                timeout_s=event.timeout_s,
                unchanged_s=round(event.unchanged_s, 3),
                failing=[self.redact(r.message) for r in event.failing],
            )
        elif isinstance(event, StepDone):
            for shown, result in zip(event.record.commands, event.record.results, strict=False):
                self.journal.write(
                    "command",
                    sync=False,
                    step=event.step.id,
                    command=shown,
                    exit_status=result.exit_status,
                    timed_out=result.timed_out,
                    duration_s=round(result.duration_s, 3),
                    stdout_tail=self._tail(result.stdout),
                    stderr_tail=self._tail(result.stderr),
                    stdout_bytes=result.stdout_size,
                    stderr_bytes=result.stderr_size,
                )
            document = {**event.record.to_json(), "message": self.redact(event.record.message)}
            if "acted" in document:
                document["acted"] = self._redacted(event.record.acted)
            self.journal.write("step-end", sync=event.step.destructive, **document)

    def confirmation(
        self,
        request: ConfirmRequest,
        answer: bool,
        operator: str,
        *,
        reason: str = "",
        asked: bool = True,
    ) -> None:
        """An operator's answer, or (``asked`` False) why nobody was asked: the real reason."""
        self.journal.write(
            "confirmation",
            step=request.step.id,
            commands=list(request.commands),
            targets=list(request.targets),
            answer=("yes" if answer else "no") if asked or answer else "not asked",
            reason=reason,
            operator=operator,
        )
