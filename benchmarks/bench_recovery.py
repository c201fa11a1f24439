"""What on-call waits for: SSH commands and time to recovery, ours beside the simulated expert's.

    python3 benchmarks/bench_recovery.py [--rounds N] [--scenario NAME ...]

For each scenario (default: the seed's crash, the seed's state with its launcher still alive,
and a healthy server) it runs `runbook drill gpu-oom-recovery --scenario NAME --yes` in this
process, N rounds, and counts what went over SSH: the exec requests the simulated host's SSH
server answered (each one round trip on a real network) and the tool calls they made on the
host. Beside it, the scenario's expert: the actions an engineer takes and the simulated time
they take to recovery. Our time to recovery is simulated time too (the drill's clock: waits
and resets take what they take on a real host), so the two are comparable on any machine; the
wall time of the whole drill in this process is printed beside it, for what it costs here.

Nothing on this machine is touched: the host is the drill's simulated one on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runbook_runner.cli import main as runbook  # noqa: E402
from runbook_runner.simhost import sshserver  # noqa: E402
from runbook_runner.simhost.scenarios import SCENARIOS  # noqa: E402

DEFAULT = ("oom-crash", "seed-launcher-alive", "healthy-server")


class Counted:
    """The exec requests the simulated host's SSH server answers, counted as they come."""

    def __init__(self) -> None:
        self.requests = 0
        self._respond = sshserver.DrillHost.respond

    def __enter__(self) -> Counted:
        counted = self
        original = self._respond

        def respond(host: Any, channel: Any, transport: Any, command: str) -> None:
            counted.requests += 1
            original(host, channel, transport, command)

        sshserver.DrillHost.respond = respond  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        sshserver.DrillHost.respond = self._respond  # type: ignore[method-assign]


def play(name: str) -> dict[str, Any]:
    out = io.StringIO()
    with (
        Counted() as counted,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        started = time.monotonic()
        code = runbook(["drill", "gpu-oom-recovery", "--scenario", name, "--yes", "--json"])
        wall = time.monotonic() - started
    document = json.loads(out.getvalue())
    drill = document["drill"]
    return {
        "exit": code,
        "ssh_commands": counted.requests,
        "steps": len(document.get("steps", [])),
        "recovery_s": float(drill["recovery_s"]),
        "ideal_s": float(drill["ideal_s"]),
        "actions": drill["actions"],
        "expert": drill["expert"],
        "ok": drill["ok"],
        "wall_s": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs per scenario (default 3)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), default=None)
    args = parser.parse_args()
    names = args.scenario or list(DEFAULT)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    print(
        f"Measured {when} on {platform.machine()} {platform.system()} {platform.release()}, "
        f"{os.cpu_count()} CPUs (load average {load:.1f}), Python {platform.python_version()}, "
        f"{args.rounds} rounds per scenario (median).\n"
    )
    print(
        "| scenario | ours: SSH commands | ours: actions | ours: to recovery (sim. s) "
        "| expert: actions | expert: to recovery (sim. s) | ratio | exit | wall s here |"
    )
    print("|---|---:|---|---:|---|---:|---:|---:|---:|")
    failed = 0
    for name in names:
        rows = [play(name) for _ in range(args.rounds)]
        first = rows[0]
        commands = statistics.median(r["ssh_commands"] for r in rows)
        recovery = statistics.median(r["recovery_s"] for r in rows)
        wall = statistics.median(r["wall_s"] for r in rows)
        ideal = first["ideal_s"]
        ratio = f"{recovery / ideal:.2f}" if ideal else "-"
        failed += sum(not r["ok"] for r in rows)
        ours = ", ".join(first["actions"]) or "none"
        theirs = ", ".join(first["expert"]) or "none"
        print(
            f"| {name} | {commands:g} | {ours} | {recovery:g} | {theirs} | {ideal:g} | {ratio} "
            f"| {first['exit']} | {wall:.1f} |"
        )
    if failed:
        print(f"\n{failed} run(s) did not end as the expert would (see `runbook drill`).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
