"""State fixtures for the ladder's tests: what gpu-oom-recovery's observations would parse
to on a simulated host, made in this process with no shell and no SSH.

Each observation's text is what the simulated host's own commands (simhost/commands.py,
the same functions its stand-ins answer with) print for the observation's command line;
the text is then parsed by the runbook's parsers and the holders classified (their health
asked of the simulated host's curl), as the engine does. So a matrix row's first state is
a fixture in milliseconds, and the ladder and the planner can be driven over it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from runbook_runner.errors import ParseError
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import Unavailable
from runbook_runner.plan import ownership
from runbook_runner.runbook import Runbook
from runbook_runner.simhost import render
from runbook_runner.simhost.commands import COMMANDS, Env
from runbook_runner.simhost.model import SimHost
from runbook_runner.simhost.simulated import SimClock, SimProcesses
from runbook_runner.status import Condition

DEVICES = "/dev/nvidia*"
GPU_SERVICES = (
    "nvidia-persistenced",
    "nvidia-dcgm",
    "dcgm",
    "dcgm-exporter",
    "nvidia-fabricmanager",
)


class Host:
    """One simulated host, asked in process."""

    def __init__(self, host: SimHost, clock: SimClock | None = None) -> None:
        self.host = host
        self.clock = clock or SimClock()
        self.procs = SimProcesses(host, self.clock)

    def call(self, line: str, *, merge: bool = False) -> tuple[str, int]:
        """One simple command (no pipes) -> (stdout, status); ``merge``: 2>&1."""
        argv = shlex.split(line)
        env = Env(self.host, self.procs, user="root")
        status = COMMANDS[argv[0]](env, argv[1:])
        text = "".join(env.stdout) + ("".join(env.stderr) if merge else "")
        return text, status

    # -- gpu-oom-recovery's observations, one text each --------------------------------

    def holders(self) -> tuple[str, int]:
        ps, _ = self.call(
            "ps -ww -N --ppid 2 -o pid,ppid,pgid,sid,user:32,etimes,stat,cgroup:4096,args"
        )
        fuser, _ = self.call(f"fuser -v {DEVICES}", merge=True)
        meminfo = render.meminfo(self.host)  # what the host's cat /proc/meminfo prints
        total = "".join(f"{ln}\n" for ln in meminfo.splitlines() if ln.startswith("MemTotal:"))
        return f"{ps}@@ fuser\n{fuser}@@ memory\n{total}@@ end\n", 0

    def hung_tasks(self) -> tuple[str, int]:
        text, _ = self.call("dmesg")
        found = [
            ln for ln in text.splitlines() if re.search(r"blocked for more than [0-9]+ seconds", ln)
        ]
        return "".join(f"{ln}\n" for ln in found[-50:]), 0 if found else 1

    def shm(self) -> tuple[str, int]:
        now, _ = self.call("date +%s")
        rows = [now]
        for segment in self.host.shm:
            path = segment.path
            _, held = self.call(f"fuser -s {shlex.quote(path)}")
            mark = "held" if held == 0 else "free"
            text, _ = self.call(f"stat -c {shlex.quote(f'%s %U %Y {mark} %n')} {shlex.quote(path)}")
            rows.append(text)
        return "".join(rows), 0

    def stopped_units(self) -> tuple[str, int]:
        text, status = self.call(
            "systemctl list-units --type=service --all --state=inactive --no-legend --plain"
        )
        return "UNIT\n" + "".join(f"{ln.split(' ')[0]}\n" for ln in text.splitlines()), status

    def running_gpu_services(self) -> tuple[str, int]:
        up = [u for u in GPU_SERVICES if self.call(f"systemctl is-active --quiet {u}")[1] == 0]
        return "".join(f"{u}\n" for u in up), 0

    def stopped_gpu_services(self) -> tuple[str, int]:
        found = []
        for unit in GPU_SERVICES:
            shown, _ = self.call(f"systemctl show -p LoadState {unit}")
            loaded = "LoadState=loaded" in shown.splitlines()
            if loaded and self.call(f"systemctl is-active --quiet {unit}")[1] != 0:
                found.append(unit)
        return "".join(f"{u}\n" for u in found), 0

    def gpu_fabric(self) -> tuple[str, int]:
        """The gpu_fabric observation's three sections, as its command prints them."""
        topo, _ = self.call("nvidia-smi topo -m", merge=True)
        manager, _ = self.call("systemctl is-active nvidia-fabricmanager")
        query, status = self.call("nvidia-smi -q", merge=True)
        return f"@@ topo\n{topo}@@ fabric-manager\n{manager}@@ query\n{query}", status

    def text_of(self, name: str) -> tuple[str, int]:
        plain: dict[str, Callable[[], tuple[str, int]]] = {
            "holders": self.holders,
            "gpus": lambda: self.call("nvidia-smi -q"),
            "gpu_holders": lambda: self.call(f"fuser -v {DEVICES}", merge=True),
            "memory": lambda: self.call("free -b"),
            "processes": lambda: self.call("ps -eo pid,stat,args"),
            "xids": lambda: self.call("dmesg"),
            "hung_tasks": self.hung_tasks,
            "shm": self.shm,
            "stopped_units": self.stopped_units,
            "server_log": lambda: self.call(
                "journalctl -u 'sglang*' -u 'vllm*' -n 200 --no-pager -o cat --since -30min"
            ),
            "running_gpu_services": self.running_gpu_services,
            "stopped_gpu_services": self.stopped_gpu_services,
            "gpu_list": lambda: self.call("nvidia-smi -L"),
            "gpu_instances": lambda: self.call("nvidia-smi mig -lgi"),
            "compute_instances": lambda: self.call("nvidia-smi mig -lci"),
            "gpu_process_instances": lambda: self.call("nvidia-smi -q -d PIDS"),
            "gpu_fabric": self.gpu_fabric,
        }
        return plain[name]()

    def state(self, runbook: Runbook, params: Mapping[str, Any]) -> dict[str, Any]:
        """Every observation of ``runbook``, parsed (and the holders classified)."""
        subject = runbook.subject.with_parameters(params) if runbook.subject else None
        found: dict[str, Any] = {}
        for name, observation in runbook.observations.items():
            text, status = self.text_of(name)
            if status == 127:
                found[name] = Unavailable(f"{name}: command not found", Condition.NOT_FOUND)
                continue
            if (
                status not in observation.ok_exit
                and PARSERS[observation.parser].tool != "nvidia-smi"
            ):
                found[name] = Unavailable(f"{name} exited {status}", Condition.FAILED)
                continue
            try:
                value = PARSERS[observation.parser].parse(text, status, name)
            except ParseError as error:
                found[name] = Unavailable(
                    str(error), getattr(error, "condition", Condition.UNPARSABLE)
                )
                continue
            if observation.parser == "process-owners" and subject is not None:
                value = self.classify(subject, value)
            found[name] = value
        return found

    def classify(self, subject: Any, records: Any) -> Any:
        results = []
        for probe in ownership.probes(subject, records):
            out, status = self.call(probe.command)
            results.append(ownership.judge_probe(probe, status, out, ""))
        restarts: dict[str, int] = {}
        for unit_probe in ownership.unit_probes(subject, records):
            out, status = self.call(unit_probe.command)
            count = ownership.judge_unit(status, out)
            if count is not None:
                restarts[unit_probe.unit] = count
        return ownership.classify(subject, records, results, restarts)
