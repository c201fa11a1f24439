"""Set up a drill: a simulated GPU server behind a real SSH server on 127.0.0.1.

``runbook drill`` then runs the runbook against it through the same code as
``runbook run`` (transport, parsers, checks, prompts), with simulated time.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runbook_runner.simhost.model import SimHost
from runbook_runner.simhost.scenarios import SCENARIOS, Scenario
from runbook_runner.simhost.sshserver import DrillHost


@dataclass
class Drill:
    scenario: Scenario
    host: DrillHost
    folder: Path

    @property
    def identity(self) -> Path:
        return self.folder / "drill_client_key"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.folder / "ssh_config"  # empty: the user's ~/.ssh/config has no say here

    def close(self) -> None:
        self.host.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def start(scenario_name: str, state: SimHost | None = None) -> Drill:
    """A scenario's host, or (``runbook test --state``) the host a state file describes."""
    if state is not None:
        scenario = Scenario(scenario_name, "the host your state file describes", lambda: state)
    else:
        scenario = SCENARIOS[scenario_name]
    host = DrillHost(scenario.build(), save_state=False).start()
    folder = Path(tempfile.mkdtemp(prefix="runbook-drill-"))
    drill = Drill(scenario, host, folder)
    host.client_key.write_private_key_file(str(drill.identity))
    key = host.host_key
    drill.known_hosts.write_text(f"[127.0.0.1]:{host.port} {key.get_name()} {key.get_base64()}\n")
    drill.ssh_config.write_text("")
    return drill


CHANGING = {"kill", "pkill", "fuser", "systemctl", "rmmod", "modprobe", "reboot", "nvidia-smi"}


def changes(calls: list[list[str]]) -> list[str]:
    """The commands of a drill that changed the simulated host, as one line each."""
    lines = []
    for call in calls:
        name, args = call[0], call[1:]
        if name not in CHANGING:
            continue
        if name == "nvidia-smi" and not {"--gpu-reset", "-r", "-pm"} & set(args):
            continue
        if name == "systemctl" and args[:1] in (
            ["is-active"],
            ["is-enabled"],
            ["show"],
            ["list-units"],
        ):
            continue
        if name == "fuser" and "-k" not in args:
            continue
        lines.append(" ".join(call))
    return lines


TOLERANCE = 1.5  # a run may take this many times the expert's time to recovery


@dataclass(frozen=True)
class Judgement:
    """A drill run against its scenario's row: ended where the expert would, with the
    expert's actions, in time. Pure: built from what the simulated host recorded."""

    scenario: Scenario
    taken: tuple[tuple[float, str], ...]  # (seconds after the start, action), in order
    recovery_s: float  # simulated seconds from the start to the end of the run
    exit_code: int
    goal_reached: bool
    said: str  # what the run said about why it stopped

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(action for _, action in self.taken))

    @property
    def extra(self) -> tuple[str, ...]:
        return tuple(a for a in self.actions if a not in self.scenario.actions)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(a for a in self.scenario.actions if a not in self.actions)

    @property
    def ended_right(self) -> bool:
        if self.scenario.ends == "goal":
            return self.goal_reached and self.exit_code == 0
        return self.exit_code == self.scenario.exit_code and self.scenario.message in self.said

    @property
    def in_time(self) -> bool:
        return self.recovery_s <= TOLERANCE * self.scenario.ideal_s

    @property
    def ok(self) -> bool:
        return self.ended_right and not self.extra and not self.missing and self.in_time

    def to_json(self) -> dict[str, object]:
        return {
            "scenario": self.scenario.name,
            "actions": list(self.actions),
            "timeline": [{"at_s": round(t, 1), "action": a} for t, a in self.taken],
            "expert": list(self.scenario.actions),
            "extra": list(self.extra),
            "missing": list(self.missing),
            "recovery_s": round(self.recovery_s, 1),
            "ideal_s": self.scenario.ideal_s,
            "exit_code": self.exit_code,
            "ended_right": self.ended_right,
            "in_time": self.in_time,
            "ok": self.ok,
        }


def judge(
    scenario: Scenario,
    actions: list[tuple[float, str]],
    started: float,
    ended: float,
    exit_code: int,
    goal_reached: bool,
    said: str,
) -> Judgement:
    taken = tuple((t - started, action) for t, action in actions)
    return Judgement(scenario, taken, ended - started, exit_code, goal_reached, said)


def pick(name: str, choose: Callable[[list[str]], str] | None = None) -> str:
    """The scenario to play: NAME, or for 'random' one picked without naming it."""
    if name != "random":
        return name
    return (choose or random.choice)(sorted(SCENARIOS))
