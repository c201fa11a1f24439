"""Terminal input and output for the CLI: progress, prompts, the closing summary.

With the rest of cli/, the only code that prints or asks; the text itself comes from render.py.
"""

from __future__ import annotations

import getpass
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from runbook_runner.cli import render
from runbook_runner.errors import NeedsConfirmation
from runbook_runner.runbook import Runbook
from runbook_runner.safetext import visible_styled
from runbook_runner.status import EXPLAINED, STOPPING, StepStatus

if TYPE_CHECKING:
    from runbook_runner.events import Answer, ConfirmRequest, Event, RunReport
    from runbook_runner.simhost.drill import Judgement

OUTPUT_LINES = 25  # of each command's output, shown under its step


class Output:
    """Where people read progress: stdout, or stderr when stdout carries --json."""

    def __init__(self, as_json: bool) -> None:
        self.stream: IO[str] = sys.stderr if as_json else sys.stdout
        self.tty = self.stream.isatty()
        self.style = render.Style(render.use_colour(self.stream))
        self._live = False
        self._last_live = 0.0

    def line(self, text: str = "") -> None:
        """One line for people; what the host printed in it shows its control characters."""
        self.end_live()
        print(visible_styled(text), file=self.stream, flush=True)

    def live(self, text: str) -> None:
        """A line rewritten in place on a terminal; elsewhere printed every 10 s at most."""
        text = visible_styled(text)
        if self.tty:
            print(f"\r\x1b[K{text}", end="", file=self.stream, flush=True)
            self._live = True
        elif time.monotonic() - self._last_live >= 10:
            print(text, file=self.stream, flush=True)
            self._last_live = time.monotonic()

    def end_live(self) -> None:
        if self._live:
            print(file=self.stream, flush=True)
            self._live = False


def stdin_is_terminal() -> bool:
    """Whether questions can be asked: stdin is open and a terminal (it may be closed: None)."""
    return sys.stdin is not None and sys.stdin.isatty()


def prompt_passphrase(prompt: str) -> str | None:
    if not stdin_is_terminal():
        return None
    return getpass.getpass(prompt)


class Secret:
    """A value that must not be printed, logged or journaled by accident (its repr hides it)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def ask_secret(prompt: str) -> str:
    """A secret typed on the terminal, not echoed."""
    return getpass.getpass(prompt)


def report_state(out: Output, runbook: Runbook, observed: Any, title: str) -> None:
    out.line(out.style(title, "bold"))
    out.line(render.gpu_table(runbook, observed.state))
    out.line(render.check_lines(observed.results, runbook, out.style))


class Confirmer:
    """Asks before each destructive step, naming the host and the exact commands (the run
    session's consent for one host: it journals each answer with :meth:`answered_by`)."""

    def __init__(self, out: Output, host: str, *, yes: bool, allow_reboot: bool) -> None:
        self.yes, self.out, self.host = yes, out, host
        self.allow_reboot = allow_reboot
        self.refusal: str | None = None
        self.reboot_blocked = False

    def __call__(self, request: ConfirmRequest) -> Answer:
        return self._ask(request)

    def answered_by(self, request: ConfirmRequest, answer: Answer) -> str:
        return getpass.getuser() + (
            " (--yes)"
            if self.yes and answer.yes and not request.step.reboots and not request.resend
            else ""
        )

    def _ask(self, request: ConfirmRequest) -> Answer:
        from runbook_runner.events import Answer

        step = request.step
        if request.resend:
            # Sending a destructive command a second time is never covered by --yes.
            if not sys.stdin.isatty():
                raise NeedsConfirmation(
                    f"{request.resend}; sending it again needs a confirmation on a terminal "
                    "(--yes does not cover a second send): check the host, then resume this "
                    "run from a terminal"
                )
            self.out.line(self.out.style(f"  {request.resend}.", "yellow", "bold"))
            self.out.line("  Its command may already have run once. Send it again?")
        elif step.reboots:
            if self.allow_reboot:
                return Answer(True, "--allow-reboot", asked=False)
            if not stdin_is_terminal():
                self.reboot_blocked = True
                self.refusal = (
                    f"step {step.id!r} reboots the host, which needs --allow-reboot "
                    "(or a terminal to confirm it); not rebooting"
                )
                return Answer(False, "needs --allow-reboot", asked=False)
        elif self.yes:
            return Answer(True, "--yes", asked=False)
        if not stdin_is_terminal():
            self.refusal = (
                f"step {step.id!r} is destructive (affects {step.affects}) and needs a confirmation, "
                "but stdin is not a terminal: re-run with --yes to allow it"
            )
            return Answer(False, "no terminal to ask (use --yes)", asked=False)
        self.out.line(
            self.out.style(
                f"  {step.title}: DESTRUCTIVE, affects {step.affects}, on {self.host}",
                "yellow",
                "bold",
            )
        )
        if request.targets:
            self.out.line(
                f"    acts on {len(request.targets)} observed item"
                f"{'s' if len(request.targets) != 1 else ''}:"
            )
            for target in request.targets:
                self.out.line(f"      - {target}")
        for command in request.commands:
            self.out.line(f"    $ {command}")
        try:
            answer = input("  Run it? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() in {"y", "yes"}:
            return Answer(True, f"confirmed by {getpass.getuser()}")
        self.refusal = f"declined step {step.id!r}"
        return Answer(False, f"declined by {getpass.getuser()}")


class Printer:
    """A run's progress, a line per rung that acted, waited, failed or was blocked; the
    rungs that were not needed fold into one line (``verbose`` lists each, and what the
    read-only steps printed)."""

    def __init__(self, out: Output, runbook: Runbook, *, verbose: bool = False) -> None:
        self.out, self.runbook, self.verbose = out, runbook, verbose
        self.numbers: dict[str, tuple[int, int]] = {}
        self.folded: list[str] = []

    def flush(self) -> None:
        """The rungs not needed since the last line, as one line."""
        if self.folded:
            self.out.line(self.out.style(render.folded_line(self.folded), "dim"))
            self.folded = []

    def __call__(self, event: Event) -> None:
        from runbook_runner.events import Reconnecting, StepDone, StepStarting, Waiting

        out = self.out
        if isinstance(event, StepStarting):
            self.numbers[event.step.id] = (event.number, event.total)
        elif isinstance(event, Waiting):
            # A terminal rewrites one line in place; elsewhere the line is kept, wrapped whole.
            line = render.wait_line(event, **({} if out.tty else {"width": 1 << 20}))
            head = line.find(": ") + 2  # the message gets a step line's width after it
            out.live(
                line if out.tty else "\n".join(render.wrapped(line, " " * 8, head + render.LINE))
            )
        elif isinstance(event, Reconnecting) and event.step is None:
            out.live(
                f"      connection lost; reconnecting: {event.elapsed_s:.0f}s of {event.timeout_s:.0f}s"
            )
        elif isinstance(event, Reconnecting):
            out.live(
                f"      waiting for the host to come back: {event.elapsed_s:.0f}s of {event.timeout_s:.0f}s"
            )
        elif isinstance(event, StepDone):
            self._done(event.step, event.record)

    def _done(self, step: Any, record: Any) -> None:
        out = self.out
        if record.status == StepStatus.SKIPPED and not self.verbose:
            self.folded.append(record.id)
            return
        self.flush()
        steps = [s.id for s in self.runbook.steps]
        number, total = self.numbers.get(record.id, (0, len(steps)))
        if not number:
            number = steps.index(record.id) + 1 if record.id in steps else 0
        printed = [
            text
            for result in record.results
            for text in (result.stdout + result.stderr).rstrip().splitlines()
        ]
        shown = printed if self.verbose else printed[-OUTPUT_LINES:]
        out.line(render.step_line(record, number, total, out.style))
        if len(printed) > len(shown):
            out.line(out.style(f"        | ... {len(printed) - len(shown)} lines above", "dim"))
        for text in shown:
            out.line(out.style(f"        | {text}", "dim"))


def printer(out: Output, runbook: Runbook, *, verbose: bool = False) -> Printer:
    return Printer(out, runbook, verbose=verbose)


def closing(
    out: Output, report: RunReport, host: str, confirmer: Confirmer, retry: str | None = None
) -> None:
    """The run's last lines: the GPUs before and after, then its verdict (what it did, what
    it left alone, what is still wrong, what a person does next); ``retry``: the command to
    allow a refused reboot (a drill's own)."""
    runbook = report.runbook
    if report.before and report.after:
        out.line(render.before_after(runbook, report.before.state, report.after.state))
        out.line(render.check_summary(report.after.results, runbook, out.style))
    verdict = report.verdict
    nexts = list(verdict.next)
    because: list[str] = []
    if report.blocked is not None:
        headline = (
            f"stopped before step {report.blocked.id!r}: {report.blocked.message}",
            "yellow",
        )
    elif report.declined and confirmer.reboot_blocked:
        headline = (f"goal NOT reached on {host}", "red")
        declined = next(r for r in report.steps if r.status == StepStatus.DECLINED)
        again = (
            retry or f"runbook run {runbook.name} --host ... --from {declined.id} --allow-reboot"
        )
        nexts.insert(0, f"reboot the host: {again}")
        because = [f"  because of: {target}" for target in declined.targets]
    elif report.declined:
        headline = (f"stopped: {confirmer.refusal or 'declined'}", "yellow")
    elif report.ok and verdict.held:
        headline = (
            f"the goal's checks hold on {host}, but not every GPU of the server is free or serving",
            "red",
        )
    elif report.ok:
        how = (
            f"by step {report.reached_by!r}"
            if report.reached_by
            else "already; nothing needed doing"
        )
        headline = (f"goal holds on {host}: reached {how}", "green")
    else:
        headline = (f"goal NOT reached on {host}", "red")
    out.line(out.style(headline[0], headline[1], "bold"))
    for line in because:
        out.line(line)
    stopped = [r for r in report.steps if r.status in STOPPING]
    if not report.ok and stopped and report.blocked is None and not report.declined:
        out.line(f"  last failure: step {stopped[-1].id!r}: {stopped[-1].message}"[:200])
    for line in render.verdict_lines(verdict, nexts):
        out.line(line)


SITE = "docs/"  # pages are named by their path in the repository's docs/ folder
XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


def debrief(
    out: Output,
    report: RunReport | None,
    judgement: Judgement,
    timeline: list[tuple[float, str, bool]] | None = None,
) -> None:
    """The end of a drill: what was wrong, what the run did, what an expert does, the
    difference, time to recovery against the ideal, and the lesson with its page.
    ``timeline``: (seconds from the start, what, done by the host itself), in order."""
    if report is None:
        return
    style = out.style
    scenario = judgement.scenario
    out.line("")
    out.line(style(f"Debrief: {scenario.name}", "bold"))
    out.line(f"  What was wrong: {scenario.wrong}")
    before = report.before.state if report.before is not None else {}
    xids, gpus = before.get("xids"), before.get("gpus")
    index = {g.pci: g.index for g in gpus if g.pci} if isinstance(gpus, tuple) else {}
    for event in xids if isinstance(xids, tuple) else ():
        # The GPU's index first: every command takes -i N, not the PCI address.
        where = f"GPU {index[event.pci]} ({event.pci})" if event.pci in index else event.pci
        out.line(
            f"  The kernel logged: Xid {event.code} on {where}: {event.action} "
            f"({event.meaning}); NVIDIA's Xid catalog: {XID_CATALOG}"
        )
    out.line("  What the run did:")
    if timeline is None:
        timeline = [(at, action, False) for at, action in judgement.taken]
    for at, what, by_host in timeline:
        line = f"    +{at:5.0f} s  " + (f"(the host: {what})" if by_host else what)
        out.line(style(line, "dim") if by_host else line)
    if not judgement.taken:
        out.line("    nothing to the host (it only looked)")
    out.line(f"  What an expert does: {scenario.expert}")
    for action in scenario.actions:
        out.line(f"    {action}")
    if not scenario.actions:
        out.line("    no action on the host")
    if judgement.extra or judgement.missing:
        out.line(style("  The difference:", "yellow", "bold"))
        for action in judgement.extra:
            out.line(style(f"    + {action}  (the expert would not)", "yellow"))
        for action in judgement.missing:
            out.line(style(f"    - {action}  (the expert would)", "yellow"))
    else:
        out.line(style("  The difference: none (the expert's actions, no more)", "green"))
    ratio = judgement.recovery_s / scenario.ideal_s if scenario.ideal_s else 0.0
    ending = "to recovery" if scenario.ends == "goal" else "to stopping"
    timing = (
        f"  Time {ending}: {judgement.recovery_s:.0f} s simulated "
        f"(ideal {scenario.ideal_s:.0f} s, {ratio:.1f}x)"
    )
    out.line(style(timing, "green" if judgement.in_time else "yellow"))
    if not judgement.ended_right:
        want = (
            "the goal reached"
            if scenario.ends == "goal"
            else f"a stop (exit {scenario.exit_code}: {scenario.message})"
        )
        out.line(style(f"  It did not end where the expert would: {want}", "red", "bold"))
    out.line("  Rungs:")
    for record in report.steps:
        if record.status == StepStatus.SKIPPED:
            continue
        out.line(f"    {record.id:<24} {record.status}{_note(record)}"[:160])
    if report.ok:
        out.line(f"  The rung that worked: {style(str(report.reached_by), 'green', 'bold')}")
    else:
        out.line(style("  No rung reached the goal.", "red", "bold"))
    out.line(f"  Simulated time: {judgement.recovery_s / 60:.1f} min")
    out.line(f"  Lesson: {scenario.lesson}")
    out.line(f"  Read: {SITE}{scenario.page}")
    others = [page for page in report.runbook.docs if page != scenario.page]
    if others:
        out.line("  Read next: " + ", ".join(f"{SITE}{page}" for page in others))


def state_debrief(
    out: Output, report: RunReport | None, changes: list[str], simulated_s: float
) -> None:
    """The end of a `runbook test --state` run: which rungs ran, what they changed, which one
    worked, what to read (no expert's row to judge it by, unlike a drill's debrief)."""
    if report is None:
        return
    style = out.style
    out.line("")
    out.line(style("Debrief", "bold"))
    out.line("  Rungs:" if report.steps else "  Rungs: none ran")
    for record in report.steps:
        out.line(f"    {record.id:<24} {record.status}{_note(record)}"[:160])
    out.line("  What changed on the host:")
    for change in changes or ["nothing"]:
        out.line(f"    $ {change}")
    if report.ok and report.reached_by is None:
        out.line(style("  The goal held already: no rung was needed.", "green", "bold"))
    elif report.ok:
        out.line(f"  The rung that worked: {style(str(report.reached_by), 'green', 'bold')}")
    else:
        out.line(style("  No rung reached the goal.", "red", "bold"))
    out.line(f"  Simulated time: {simulated_s / 60:.1f} min")
    if report.runbook.docs:
        out.line("  Read next:")
        for page in report.runbook.docs:
            out.line(f"    docs/{page}")


def _note(record: Any) -> str:
    """A debrief's why of a rung, without the status it repeats ("blocked (blocked: ...)")."""
    if record.status not in EXPLAINED:
        return ""
    return f"  ({record.message.removeprefix(f'{record.status}: ')})"
