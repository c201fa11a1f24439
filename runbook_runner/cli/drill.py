"""``runbook drill`` and ``runbook test``: a run on a simulated GPU server.

Part of the CLI layer (cli/): it sets up the simulated host (simhost/drill.py), points the
run's options at it, runs it as ``runbook run`` does (host.py), and prints the debrief.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import journal as journal_module
from runbook_runner import localfile
from runbook_runner.cli import console
from runbook_runner.cli.host import execute_run, load_named
from runbook_runner.errors import RunbookRunnerError, UsageError

if TYPE_CHECKING:
    from runbook_runner.events import RunReport


class StateFileInvalid(RunbookRunnerError):
    """A ``runbook test --state`` file that cannot be read or describes no host."""


class DrillHooks:
    """What a drill adds to a run: its scenario in the journal, simulated time stamps,
    and its judgement in the JSON document."""

    def __init__(self, scenario: str, clock: Callable[[], float], judge: Any) -> None:
        from runbook_runner.simhost.model import EPOCH

        self.scenario = scenario
        self.journal_clock = lambda: EPOCH + clock()
        self.judge = judge  # (report, exit code) -> drill.Judgement
        self.journal: Path | None = None
        self.retry = f"runbook drill NAME --scenario {scenario} --yes --allow-reboot"

    def summary(self, report: RunReport, code: int) -> dict[str, Any]:
        return dict(self.judge(report, code).to_json())


def cmd_drill(args: argparse.Namespace) -> int:
    from runbook_runner.simhost import drill as drills
    from runbook_runner.simhost.scenarios import SCENARIOS

    named = args.scenario != "random"
    if named and args.scenario not in SCENARIOS:
        raise UsageError(
            f"--scenario {args.scenario}: no such scenario "
            f"(scenarios: {', '.join(SCENARIOS)}, or random)",
            f"runbook {args.command}",
        )
    runbook = load_named(args)  # a bad runbook name fails before anything starts
    name = drills.pick(args.scenario)
    drill = drills.start(name)
    scenario = drill.scenario
    out = console.Output(args.json)
    try:
        label = "Test" if getattr(args, "command", "") == "test" else "Drill"
        if named:
            out.line(out.style(f"{label}: {name}", "bold") + f": {scenario.teaches}.")
        else:
            out.line(
                out.style(f"{label}: a scenario picked at random", "bold")
                + " (the debrief names it)."
            )
        _describe_simulated_host(out, drill)
        given = {item.split("=", 1)[0] for item in getattr(args, "set", None) or []}
        known = [
            f"{k}={v}" for k, v in scenario.params if k not in given and k in runbook.parameters
        ]
        if known:
            args.set = [*known, *(getattr(args, "set", None) or [])]
            out.line("What the operator knows here: " + " ".join(f"--set {kv}" for kv in known))
        started = drill.host.clock.now()
        _point_at_simulated_host(args, drill)

        def judge(report: RunReport, code: int) -> drills.Judgement:
            said = " ".join(r.message for r in report.steps if r.status in {"blocked", "declined"})
            # A run that ends with the goal not reached says what a human must do: its hints.
            said += "".join(
                f" {r.message} {report.runbook.checks[r.name].hint}" for r in report.failing
            )
            return drills.judge(
                scenario,
                drill.host.host.actions,
                started,
                drill.host.clock.now(),
                code,
                report.ok,
                said,
            )

        hooks = DrillHooks(name, drill.host.clock.now, judge)
        hooks.retry = hooks.retry.replace("NAME", args.runbook)
        code, report = execute_run(
            args, clock=drill.host.clock.now, sleep=drill.host.clock.sleep, drill=hooks
        )
        if report is not None:
            judgement = judge(report, code)
            if hooks.journal is not None:
                journal = journal_module.Journal(hooks.journal, hooks.journal_clock)
                verdict: dict[str, Any] = dict(judgement.to_json())
                journal.write("drill-end", **verdict)
                journal.close()
            timeline = [(t - started, what, by) for t, what, by in drill.host.host.timeline]
            console.debrief(out, report, judgement, timeline)
        return code
    finally:
        drill.close()


def cmd_test(args: argparse.Namespace) -> int:
    """``runbook drill``'s machinery, without questions: a state file's host, or a scenario's."""
    args.yes = True  # the host is simulated: nothing to ask about
    load_named(args)
    if args.state is None:
        args.scenario = args.scenario or "oom-crash"
        return cmd_drill(args)
    host = state_from_file(args.state)
    args.scenario = Path(args.state).name
    return _simulate(args, "Test", host)


def state_from_file(name: str) -> Any:
    """The simulated host a ``--state`` file describes (a SimHost), or StateFileInvalid."""
    from runbook_runner.format.yamlsource import DocumentError, load_data
    from runbook_runner.simhost.statefile import StateFileError, host_from_state

    try:
        text = localfile.read_text(Path(name), localfile.CONFIG_LIMIT)
        data = load_data(text, f"--state {name}")
        return host_from_state(data)
    except OSError as error:
        raise StateFileInvalid(f"--state {name}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise StateFileInvalid(f"--state {name}: not UTF-8 text ({error.reason})") from None
    except DocumentError as error:
        raise StateFileInvalid(str(error)) from None
    except StateFileError as error:
        raise StateFileInvalid(f"--state {name}: {error}") from None


def _simulate(args: argparse.Namespace, label: str, state: Any) -> int:
    """A run on the simulated host a state file describes (no expert's row to judge it by)."""
    from runbook_runner.simhost import drill as drills

    drill = drills.start(args.scenario, state)
    out = console.Output(args.json)
    try:
        out.line(out.style(f"{label}: {args.scenario}", "bold") + f": {drill.scenario.teaches}.")
        _describe_simulated_host(out, drill)
        started = drill.host.clock.now()
        _point_at_simulated_host(args, drill)
        code, report = execute_run(args, clock=drill.host.clock.now, sleep=drill.host.clock.sleep)
        console.state_debrief(
            out, report, drills.changes(drill.host.calls), drill.host.clock.now() - started
        )
        return code
    finally:
        drill.close()


def _describe_simulated_host(out: console.Output, drill: Any) -> None:
    model = drill.host.host
    out.line(
        f"A simulated server with {len(model.gpus)} GPUs and "
        f"{model.memory_total_bytes / 1024**3:,.0f} GiB of RAM answers over SSH on "
        f"127.0.0.1:{drill.host.port}. Nothing on this machine is touched; simulated time runs fast."
    )


def _point_at_simulated_host(args: argparse.Namespace, drill: Any) -> None:
    """The run's options, aimed at the simulated host: its port, key and known_hosts."""
    args.host, args.port, args.user = "127.0.0.1", drill.host.port, "root"
    args.identity, args.known_hosts = [str(drill.identity)], str(drill.known_hosts)
    args.ssh_config, args.accept_new_host_key, args.connect_timeout = (
        str(drill.ssh_config),
        False,
        5.0,
    )
    args.dry_run, args.from_step = False, None
    # The drill's ssh config is empty and every option is given: nothing for OpenSSH to
    # resolve, and a drill starts no program on this machine.
    args.ssh_client = None
    # The host lock is taken on the simulated host (in its folder), as a real run takes it.
    args.lock, args.journal, args.resume, args.break_lock, args.force = (
        True,
        None,
        None,
        False,
        False,
    )
