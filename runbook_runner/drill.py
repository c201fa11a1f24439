"""Set up a drill: a simulated GPU server behind a real SSH server on 127.0.0.1.

``runbook drill`` then runs the runbook against it through the same code as
``runbook run`` (transport, parsers, checks, prompts), with simulated time.
"""

from __future__ import annotations

import shutil
import tempfile
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
    host = DrillHost(scenario.build()).start()
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
        if name == "systemctl" and args[:1] in (["is-active"], ["is-enabled"], ["show"]):
            continue
        if name == "fuser" and "-k" not in args:
            continue
        lines.append(" ".join(call))
    return lines
