"""``runbook compare OLD NEW``: what a change to a runbook does to each incident.

Both runbooks run on every scenario of the matrix (simhost/scenarios.py): the simulated
hosts over real SSH, through the run session as ``runbook drill`` runs them, in simulated
time. Per scenario it prints what each did (the steps that acted, their targets, what the
simulated host recorded as changed) and how each ended, and where they
differ. ``runbook compare NAME`` compares the working copy with the last commit's
(``git show HEAD:PATH``). Exit 0: no scenario differs; 1: one does; 2: bad input.
"""

from __future__ import annotations

import argparse
import difflib
import io
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runbook_runner import localfile, session
from runbook_runner.cli import console, outcomes
from runbook_runner.errors import UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.runbook import Runbook, display_name, load, loads
from runbook_runner.status import StepStatus

PROG = "runbook compare"
JOBS = 4  # drills at once: past this, on two cores, the interpreter's lock is the limit


@dataclass(frozen=True)
class Played:
    """One runbook on one scenario: what it did and how it ended, as lines to compare."""

    ending: tuple[str, ...]
    acts: tuple[str, ...]  # the steps that acted (or were refused), with their targets
    host: tuple[str, ...]  # what the simulated host recorded as changed, in order
    sent: tuple[str, ...]  # the commands as the run sent them (shown, not compared)

    def lines(self) -> list[str]:
        return [
            *(f"ends: {e}" for e in self.ending),
            *(f"step: {a}" for a in self.acts),
            *(f"host: {h}" for h in self.host),
        ]


def cmd_compare(args: argparse.Namespace) -> int:
    from runbook_runner.simhost.scenarios import MATRIX, SCENARIOS

    old, new, old_label, new_label = _the_two(args)
    unknown = [name for name in args.scenario if name not in SCENARIOS]
    if unknown:
        raise UsageError(
            f"--scenario {unknown[0]}: no such scenario (scenarios: {', '.join(SCENARIOS)})",
            PROG,
        )
    rows = [SCENARIOS[name] for name in args.scenario] or [
        s for s in MATRIX if s.runbook == new.name
    ]
    rows = rows or list(MATRIX)
    print(
        f"{PROG}: {old_label} (old) and {new_label} (new) on {len(rows)} scenario(s), "
        "simulated hosts, simulated time"
    )
    differing = []
    for row, (before, after) in zip(rows, _played_all(old, new, rows), strict=True):
        same = before.lines() == after.lines()
        print()
        print(f"{row.name}: {'same' if same else 'DIFFERS'}")
        if same:
            for line in before.lines():
                print(f"    {line}")
        else:
            differing.append(row.name)
            for line in difflib.ndiff(before.lines(), after.lines()):
                if line[:1] in ("-", "+", " "):
                    print(
                        f"  {'old' if line[0] == '-' else 'new' if line[0] == '+' else '   '} "
                        f"{line[2:]}"
                    )
        if before.sent != after.sent:
            same_calls = before.host == after.host
            print(
                "    commands written differently (the same changes on the host):"
                if same_calls
                else "    commands sent:"
            )
            for line in difflib.ndiff(list(before.sent), list(after.sent)):
                if line[:1] in ("-", "+"):
                    print(f"      {'old' if line[0] == '-' else 'new'} {line[2:]}")
    print()
    if differing:
        print(f"{len(differing)} of {len(rows)} scenario(s) differ: {', '.join(differing)}")
        return int(ExitCode.GOAL_NOT_MET)
    print(f"no scenario differs ({len(rows)} compared)")
    return int(ExitCode.OK)


def _played_all(old: Runbook, new: Runbook, rows: list[Any]) -> Iterator[tuple[Played, Played]]:
    """Both runbooks on each row, in the rows' order, a few rows at a time: each drill is its
    own simulated host with its own clock, so what one does cannot depend on another; most of
    a drill's time is its SSH round trips and its host's shells, which overlap."""
    pool = ThreadPoolExecutor(max_workers=min(JOBS, len(rows)), thread_name_prefix="compare")
    try:
        pending = [pool.submit(_both, old, new, row) for row in rows]
        for future in pending:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _both(old: Runbook, new: Runbook, row: Any) -> tuple[Played, Played]:
    return play(old, row), play(new, row)


def _the_two(args: argparse.Namespace) -> tuple[Runbook, Runbook, str, str]:
    from runbook_runner.cli.host import catalog

    if args.new is not None:
        old_path, new_path = catalog(args).find(args.old), catalog(args).find(args.new)
        return _old(old_path), load(new_path), str(args.old), str(args.new)
    path = catalog(args).find(args.old).resolve()
    new = load(path)
    raw, where = _at_head(path)
    old = loads(raw, where, stem=path.stem, string_placeholders=True)
    return old, new, where, args.old


def _old(path: Path) -> Runbook:
    """The runbook before the change: a command string may still hold placeholders (the
    form before the list form); it runs only on the simulated hosts here."""
    raw = localfile.read_bytes(path, localfile.RUNBOOK_LIMIT)
    # A copy of the old version is often named otherwise (old.yaml): its name is not checked.
    return loads(raw, display_name(path), stem=None, string_placeholders=True)


def _at_head(path: Path) -> tuple[bytes, str]:
    """The file as of the last commit of the git checkout it is in."""

    def git(*argv: str) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["git", "-C", str(path.parent), *argv],
                capture_output=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise UsageError(f"{path}: git cannot be run ({error})", PROG) from None

    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UsageError(
            f"{path} is not in a git checkout: give both files (runbook compare OLD.yaml NEW.yaml)",
            PROG,
        )
    relative = path.relative_to(Path(top.stdout.decode().strip()).resolve()).as_posix()
    shown = git("show", f"HEAD:{relative}")
    if shown.returncode != 0:
        reason = shown.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(
            f"HEAD:{relative}: not in the last commit ({reason[-1] if reason else 'git show'})",
            PROG,
        )
    return shown.stdout, f"HEAD:{relative}"


def play(runbook: Runbook, row: Any) -> Played:
    """One run of ``runbook`` on the scenario's simulated host, as ``runbook drill --yes``
    runs it (the row's --set values and --allow-reboot), printing nothing."""
    from runbook_runner.cli.connecting import Connecting
    from runbook_runner.cli.drill import _simulated_host
    from runbook_runner.format.parameters import resolve_parameters
    from runbook_runner.simhost import drill as drills

    drill = drills.start(row.name)
    quiet = console.Output(True)
    quiet.stream, quiet.tty = io.StringIO(), False
    try:
        params = resolve_parameters(
            runbook, [f"{k}={v}" for k, v in row.params if k in runbook.parameters]
        )
        started = drill.host.clock.now()
        confirmer = console.Confirmer(quiet, "simulated", yes=True, allow_reboot=row.allow_reboot)
        with (
            tempfile.TemporaryDirectory(prefix="runbook-compare-") as folder,
            Connecting(_simulated_host(drill)).result(quiet.line) as transport,
        ):
            outcome = session.run(
                session.RunRequest(
                    runbook,
                    params,
                    transport,
                    confirmer,
                    session.JournalPolicy(Path(folder), path=Path(folder) / "run.jsonl"),
                    "compare",
                    lock=session.LockPolicy(True),
                    on_event=lambda event: None,
                    clock=drill.host.clock.now,
                    sleep=drill.host.clock.sleep,
                )
            )
        took = drill.host.clock.now() - started
        changed = [f"{action} (at {at - started:.0f} s)" for at, action in drill.host.host.actions]
        return _played(outcome, confirmer, took, changed)
    finally:
        drill.close()


def _played(outcome: Any, confirmer: Any, took: float, host: list[str]) -> Played:
    report = outcome.report
    if outcome.error is not None:
        failure = outcomes.failure(outcome.error)
        code = failure.code if failure is not None else ExitCode.INTERNAL
        said = "; ".join(failure.lines) if failure is not None else str(outcome.error)
        ending = [f"exit {int(code)}: {said}"]
    else:
        assert report is not None
        code = outcomes.run_code(report, dry_run=False, reboot_blocked=confirmer.reboot_blocked)
        if report.ok:
            by = f"reached by {report.reached_by}" if report.reached_by else "from the start"
            ending = [f"exit {int(code)}: the goal holds, {by}"]
        else:
            failing = ", ".join(r.name for r in report.failing) or "none failing"
            ending = [f"exit {int(code)}: the goal does not hold ({failing})"]
    ending.append(f"after {took:.0f} s (simulated)")
    acts, sent = [], []
    for record in report.steps if report is not None else ():
        if record.status == StepStatus.SKIPPED:
            continue
        targets = f" on {', '.join(record.targets)}" if record.targets else ""
        acts.append(f"{record.id} {record.status.value}{targets}")
        sent += [f"{record.id}: {command}" for command in record.commands]
    return Played(tuple(ending), tuple(acts), tuple(host), tuple(sent))
