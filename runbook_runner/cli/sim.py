"""``runbook sim``: a practice host. Simulated 8-GPU servers on 127.0.0.1, served until Ctrl-C.

Part of the CLI layer (cli/): it starts the simulated hosts (simhost/fleet.py), writes the
key, known_hosts and ssh_config a client needs, prints the exact options for ``runbook
run``/``check``, a fleet, and plain ``ssh``, and serves until it is stopped (Ctrl-C or
SIGTERM: exit 0). The hosts answer as real ones do: each command runs in a real shell
with stand-ins for the GPU and system tools; the host lock, batches, journals, resumes and
signals work as on a real host. Simulated time follows the wall clock and jumps ahead
when a command on the host sleeps.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from runbook_runner.errors import UsageError

MAX_HOSTS = 64


def cmd_sim(args: argparse.Namespace) -> int:
    from runbook_runner.cli import console
    from runbook_runner.simhost.fleet import SimFleet
    from runbook_runner.simhost.scenarios import SCENARIOS
    from runbook_runner.simhost.simulated import WallClock

    if not 1 <= args.hosts <= MAX_HOSTS:
        raise UsageError(f"--hosts {args.hosts}: give 1 to {MAX_HOSTS}", "runbook sim")
    if args.state is not None:
        from runbook_runner.cli.drill import state_from_file

        state_file = args.state
        described = f"the host {args.state} describes"
        state_from_file(state_file)  # a bad file fails before anything starts

        def build(index: int) -> Any:
            return state_from_file(state_file)

    else:
        if args.scenario not in SCENARIOS:
            raise UsageError(
                f"--scenario {args.scenario}: no such scenario (scenarios: {', '.join(SCENARIOS)})",
                "runbook sim",
            )
        scenario = SCENARIOS[args.scenario]
        described = f"scenario {scenario.name}: {scenario.teaches}"

        def build(index: int) -> Any:
            return scenario.build()

    owned = args.folder is None
    folder = Path(tempfile.mkdtemp(prefix="rbr-sim-")) if owned else Path(args.folder)
    if not owned:
        _claim(folder)
    fleet = None
    stop = _StopOnSignal()
    try:
        with stop:
            try:
                fleet = SimFleet(args.hosts, build, clock=WallClock, folder=folder / "hosts")
                files = fleet.write_files(folder, prefix="sim")
            except OSError as error:
                where = f" ({error.filename})" if error.filename else ""
                raise UsageError(
                    f"cannot set up the simulated hosts in {folder}: "
                    f"{error.strerror or error}{where}",
                    "runbook sim",
                ) from None
            fleet.start()
            _announce(console.Output(False), fleet, files, described, folder)
            stop.wait()
    finally:
        if fleet is not None:
            fleet.stop()
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
    console.Output(False).line("runbook sim: stopped; the simulated hosts are gone.")
    return 0


MARKER = ".runbook-sim"  # in a --folder this command made: it may reuse it


def _claim(folder: Path) -> None:
    """Make ``folder`` ready for a practice host: a new or empty folder, or one an earlier
    ``runbook sim`` made (its marker file), whose hosts are cleared for the new ones. Any
    other folder is refused, naming what is in it."""
    try:
        entries = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    except OSError as error:
        raise UsageError(f"--folder {folder}: {error.strerror or error}", "runbook sim") from None
    if folder.exists() and entries is None:
        raise UsageError(f"--folder {folder}: a file is in the way (not a folder)", "runbook sim")
    if entries and MARKER not in entries:
        shown = ", ".join(entries[:8]) + (
            f" and {len(entries) - 8} more" if len(entries) > 8 else ""
        )
        raise UsageError(
            f"--folder {folder}: not empty and not made by runbook sim (in the way: {shown}); "
            "give a new or empty folder, or one an earlier runbook sim made",
            "runbook sim",
        )
    try:
        if entries:
            shutil.rmtree(folder / "hosts", ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARKER).write_text("made by runbook sim: it may reuse this folder\n")
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        raise UsageError(
            f"--folder {folder}: {error.strerror or error}{where}", "runbook sim"
        ) from None


class _StopOnSignal:
    """SIGINT and SIGTERM end the serving (exit 0), never with a traceback."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignal:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._before[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: object) -> None:
        self.signum = signum

    def wait(self) -> None:
        while self.signum is None:
            signal.pause()


def _announce(out: Any, fleet: Any, files: dict[str, Path], described: str, folder: Path) -> None:
    from runbook_runner.cli.render import plural  # cli/parser.py imports this module

    key, known, config = files["key"], files["known_hosts"], files["ssh_config"]
    count = len(fleet.hosts)
    width = max(4, len(str(count)))
    names = [f"sim{index:0{width}d}" for index in range(1, count + 1)]
    out.line(
        out.style(plural(count, "simulated 8-GPU host"), "bold")
        + f" on 127.0.0.1 ({described}). Nothing on this machine is touched."
    )
    for name, host in zip(names, fleet.hosts, strict=True):
        out.line(f"  {name}: port {host.port}, state in {host.folder}")
    first = fleet.hosts[0]
    options = (
        f"--host 127.0.0.1 --port {first.port} --user root "
        f"-i {shlex.quote(str(key))} --known-hosts {shlex.quote(str(known))}"
    )
    out.line("")
    out.line("Options for runbook run and check (the first host):")
    out.line(f"  {options}")
    out.line("For example:")
    out.line(f"  runbook check gpu-node-health {options}")
    out.line(f"  runbook run gpu-oom-recovery {options}")
    out.line("")
    out.line(f"Or by name, through its ssh_config ({config}):")
    for line in config.read_text().splitlines():
        out.line(f"  | {line}")
    cfg = shlex.quote(str(config))
    out.line(f"  runbook run gpu-oom-recovery --ssh-config {cfg} --host {names[0]}")
    if count > 1:
        nodeset = f"sim[{names[0][3:]}-{names[-1][3:]}]"
        out.line(f"  runbook run gpu-oom-recovery --ssh-config {cfg} --hosts '{nodeset}' --yes")
    out.line(f"  ssh -F {cfg} {names[0]} nvidia-smi")
    out.line("")
    out.line(
        "Simulated time follows the clock and jumps ahead when the host sleeps. "
        "Serving until Ctrl-C."
    )


def add_parser(add: Any, handler: Any, scenario_names: str, state_help: str) -> None:
    """Register ``runbook sim`` (called from cli/parser.py; ``handler`` runs cmd_sim)."""
    from runbook_runner.cli import habits

    sim = add(
        "sim",
        handler,
        "serve practice GPU hosts on 127.0.0.1 for run and check",
        "runbook sim --scenario oom-crash",
    )
    given = sim.add_mutually_exclusive_group()
    habits.scenario_option(
        given,
        default="oom-crash",
        help="a drill scenario to start in: " + scenario_names + " (default: oom-crash)",
    )
    given.add_argument("--state", metavar="STATE.yaml", help=state_help)
    sim.add_argument(
        "--hosts",
        type=int,
        default=1,
        metavar="N",
        help=f"how many hosts, each on its own port (default 1, at most {MAX_HOSTS})",
    )
    sim.add_argument(
        "--folder",
        metavar="DIR",
        help="keep the key, known_hosts, ssh_config and the hosts' state here: a new or "
        "empty folder, or one an earlier runbook sim made (it is reused); "
        "default: a temporary folder, removed at exit",
    )
