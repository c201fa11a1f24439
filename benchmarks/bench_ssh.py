"""Benchmark: one `runbook run` of ten read-only steps against OpenSSH multiplexing.

    python3 benchmarks/bench_ssh.py [--runs 9]

Starts the tests' local sshd (tests/sshd.py: real OpenSSH on 127.0.0.1, a login
user with a fast /bin/sh), then times, as whole processes:

- runbook: `runbook run ten-steps --host ...` (Python start-up, loading and
  validating the runbook, one SSH connection, the ten steps plus the goal's
  observation before and after);
- ssh cold: `ssh -M` opening a ControlMaster, the same ten commands as
  `ssh -S` clients over it, then `ssh -O exit`;
- ssh warm: the ten commands over a master that is already open.

Prints the medians and the ratios. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from sshd import start_test_host  # noqa: E402

RUNBOOK = HERE / "ten-steps.yaml"


def step_commands() -> list[str]:
    return [step["run"] for step in yaml.safe_load(RUNBOOK.read_text())["steps"]]


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    host = start_test_host()
    control = Path(tempfile.mkdtemp(prefix="rbr-bench-")) / "ctl"
    ssh_base = [
        "ssh",
        "-p",
        str(host.port),
        "-i",
        str(host.client_key),
        "-o",
        f"UserKnownHostsFile={host.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ControlPath={control}",
        f"{host.user}@127.0.0.1",
    ]
    commands = step_commands()
    runbook = [sys.executable, "-m", "runbook_runner", "run", str(RUNBOOK), *host.cli_args()]

    def run_runbook() -> None:
        subprocess.run(runbook, check=True, capture_output=True)

    def open_master() -> None:
        subprocess.run(
            [*ssh_base[:-1], "-M", "-f", "-N", "-o", "ControlPersist=yes", ssh_base[-1]], check=True
        )

    def close_master() -> None:
        subprocess.run([*ssh_base, "-O", "exit"], check=True, capture_output=True)

    def ten_commands() -> None:
        for command in commands:
            subprocess.run([*ssh_base, command], check=True, capture_output=True)

    def ssh_cold() -> None:
        open_master()
        ten_commands()
        close_master()

    try:
        run_runbook()  # warm the page cache and .pyc files
        ssh_cold()
        samples: dict[str, list[float]] = {"runbook": [], "ssh cold": [], "ssh warm": []}
        for _ in range(args.runs):
            samples["runbook"].append(timed(run_runbook))
            samples["ssh cold"].append(timed(ssh_cold))
            open_master()
            samples["ssh warm"].append(timed(ten_commands))
            close_master()
        medians = {name: statistics.median(values) for name, values in samples.items()}
        for name, value in medians.items():
            print(f"{name:>9}: median {value * 1000:7.1f} ms over {args.runs} runs")
        print(f"runbook / ssh cold = {medians['runbook'] / medians['ssh cold']:.2f}")
        print(f"runbook / ssh warm = {medians['runbook'] / medians['ssh warm']:.2f}")
    finally:
        host.stop()


if __name__ == "__main__":
    main()
