"""``runbook drill`` and ``runbook test``: a run on a simulated GPU server.

Part of the CLI layer (cli/): it sets up the simulated host (simhost/drill.py), runs the
runbook there through the run session as ``runbook run`` does (host.py), and prints the
debrief.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook_runner import journal as journal_module
from runbook_runner import localfile
from runbook_runner.cli import console
from runbook_runner.cli.connecting import Connecting, Destination
from runbook_runner.cli.host import RunSettings, load_requested, run_on_host
from runbook_runner.cli.request import Request, request_of
from runbook_runner.errors import StateFileInvalid, UsageError
from runbook_runner.format.parameters import gpu_range, resolve_parameters
from runbook_runner.journal import lines as journal_lines
from runbook_runner.runbook import Runbook
from runbook_runner.status import REFUSED

if TYPE_CHECKING:
    from runbook_runner.events import RunReport


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
    request = request_of(args)
    return _drill(request, str(request.scenario), yes=request.yes)


def _drill(request: Request, scenario_name: str, *, yes: bool) -> int:
    from runbook_runner.simhost import drill as drills
    from runbook_runner.simhost.scenarios import SCENARIOS

    named = scenario_name != "random"
    if named and scenario_name not in SCENARIOS:
        raise UsageError(
            f"--scenario {scenario_name}: no such scenario "
            f"(scenarios: {', '.join(SCENARIOS)}, or random)",
            f"runbook {request.command}",
        )
    runbook = load_requested(request)  # a bad runbook name fails before anything starts
    name = drills.pick(scenario_name)
    drill = drills.start(name)
    scenario = drill.scenario
    out = console.Output(request.json)
    try:
        label = "Test" if request.command == "test" else "Drill"
        if named:
            out.line(out.style(f"{label}: {name}", "bold") + f": {scenario.teaches}.")
        else:
            out.line(
                out.style(f"{label}: a scenario picked at random", "bold")
                + " (the debrief names it)."
            )
        _describe_simulated_host(out, drill)
        given = {item.split("=", 1)[0] for item in request.settings}
        known = [
            f"{k}={v}" for k, v in scenario.params if k not in given and k in runbook.parameters
        ]
        if known:
            out.line("What the operator knows here: " + " ".join(f"--set {kv}" for kv in known))
        started = drill.host.clock.now()

        def judge(report: RunReport, code: int) -> drills.Judgement:
            said = " ".join(r.message for r in report.steps if r.status in REFUSED)
            # A run that ends with the goal not reached says what a human must do: its hints.
            said += "".join(
                f" {r.message} {report.runbook.checks[r.name].hint}" for r in report.failing
            )
            said += "".join(f" {held}" for held in report.verdict.held)  # the ledger's
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
        hooks.retry = hooks.retry.replace("NAME", str(request.runbook))
        code, report = _run_simulated(request, runbook, known, drill, yes=yes, hooks=hooks)
        if report is not None:
            judgement = judge(report, code)
            if hooks.journal is not None:
                journal = journal_module.Journal(hooks.journal, hooks.journal_clock)
                journal.append(journal_lines.drill_end(judgement.to_json()))
                journal.close()
            timeline = [(t - started, what, by) for t, what, by in drill.host.host.timeline]
            console.debrief(out, report, judgement, timeline)
        return code
    finally:
        drill.close()


def cmd_test(args: argparse.Namespace) -> int:
    """``runbook drill``'s machinery, without questions: a state file's host, or a scenario's.
    The host is simulated: nothing to ask about (as with --yes)."""
    request = request_of(args)
    load_requested(request)
    if args.state is None:
        return _drill(request, request.scenario or "oom-crash", yes=True)
    host = state_from_file(args.state)
    return _simulate(request, Path(args.state).name, "Test", host)


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


def _simulate(request: Request, name: str, label: str, state: Any) -> int:
    """A run on the simulated host a state file describes (no expert's row to judge it by)."""
    from runbook_runner.simhost import drill as drills

    runbook = load_requested(request)
    drill = drills.start(name, state)
    out = console.Output(request.json)
    try:
        out.line(out.style(f"{label}: {name}", "bold") + f": {drill.scenario.teaches}.")
        _describe_simulated_host(out, drill)
        started = drill.host.clock.now()
        code, report = _run_simulated(request, runbook, [], drill, yes=True)
        console.state_debrief(
            out, report, drills.changes(drill.host.calls), drill.host.clock.now() - started
        )
        return code
    finally:
        drill.close()


def _run_simulated(
    request: Request,
    runbook: Runbook,
    known: list[str],
    drill: Any,
    *,
    yes: bool,
    hooks: DrillHooks | None = None,
) -> tuple[int, RunReport | None]:
    """The run on the simulated host, as ``runbook run`` runs one host (cli/host.py, through
    the run session): the host lock taken on the simulated host, a journal in the usual
    folder, its simulated time."""
    settings = RunSettings(
        dry_run=request.dry_run,
        out=request.approval.out,
        simulated=True,
        yes=yes,
        allow_reboot=request.allow_reboot,
        allow_node_wide=request.allow_node_wide,
        lock=True,  # taken on the simulated host (in its folder), as a real run takes it
        as_json=request.json,
        verbose=request.verbose,
    )
    connecting = Connecting(_simulated_host(drill))
    try:
        narrowed = gpu_range(runbook, request.gpus)
        params = resolve_parameters(runbook, [*narrowed, *known, *request.settings])
    except BaseException:
        connecting.abandon()  # bad input is reported as such, whatever the host does
        raise
    return run_on_host(
        settings,
        runbook,
        params,
        connecting,
        console.Output(request.json),
        clock=drill.host.clock.now,
        sleep=drill.host.clock.sleep,
        drill=hooks,
    )


def _describe_simulated_host(out: console.Output, drill: Any) -> None:
    model = drill.host.host
    out.line(
        f"A simulated server with {len(model.gpus)} GPUs and "
        f"{model.memory_total_bytes / 1024**3:,.0f} GiB of RAM answers over SSH on "
        f"127.0.0.1:{drill.host.port}. Nothing on this machine is touched; simulated time runs fast."
    )


def _simulated_host(drill: Any) -> Destination:
    """Where the run connects: the simulated host's port, key and known_hosts. The drill's
    ssh config is empty and every option is given: nothing for OpenSSH to resolve, and a
    drill starts no program on this machine."""
    return Destination(
        "127.0.0.1",
        port=drill.host.port,
        user="root",
        identity=(str(drill.identity),),
        known_hosts=str(drill.known_hosts),
        ssh_config=str(drill.ssh_config),
        accept_new_host_key=False,
        connect_timeout=5.0,
        ssh_client=None,
    )
