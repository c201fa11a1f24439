"""Turns a run's events into journal lines (what happened, never a secret)."""

from __future__ import annotations

from typing import Any

from runbook_runner.events import ConfirmRequest, Event, Observed, StepDone, StepStarting, Waiting
from runbook_runner.journal import Journal, lines
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

    def on_event(self, event: Event) -> None:
        # Lines about read-only work are not fsynced one by one: the next destructive step's
        # line (or the run's end) syncs them with it. Losing them to a power cut only means
        # a resume repeats read-only steps.
        if isinstance(event, Observed):
            self.journal.append(lines.observed(self.runbook, event, self.redact))
        elif isinstance(event, StepStarting):
            self.journal.append(lines.step_start(event, self.redact))
        elif isinstance(event, Waiting):
            self.journal.append(lines.wait(event, self.redact))
        elif isinstance(event, StepDone):
            for shown, result in zip(event.record.commands, event.record.results, strict=False):
                self.journal.append(lines.command(event.step.id, shown, result, self.redact))
            self.journal.append(
                lines.step_end(event.record, destructive=event.step.destructive, redact=self.redact)
            )

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
        self.journal.append(
            lines.confirmation(
                request, answer=answer, operator=operator, reason=reason, asked=asked
            )
        )
