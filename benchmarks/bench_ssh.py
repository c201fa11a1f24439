"""Benchmark: `runbook check` and `runbook run` against OpenSSH, whole processes, interleaved.

    python3 benchmarks/bench_ssh.py [--runs 7] [--sizes 10,50,200] [--plain-max 60]

Starts the tests' local sshd (tests/sshd.py: real OpenSSH on 127.0.0.1 fronting the
simulated 8-GPU server, a login user with a fast /bin/sh), then times, round after round,
each of these as whole processes (so the interpreter's start-up counts):

- `runbook check gpu-oom-recovery` (the goal's observations, all of them), against the
  same commands through OpenSSH;
- `runbook run` of 10, 50 and 200 read-only steps (benchmarks/ten-steps.yaml and
  generated ones like it), against the same step commands plus the goal's observation
  before and after, through OpenSSH.

The OpenSSH columns: "ssh cold" opens a ControlMaster, runs the commands one after the
other as `ssh -S` clients over it, then closes it (`ssh -O exit`): what a script that
multiplexes pays from nothing. "ssh warm": the same over a master already open. "ssh
plain": one `ssh` connection per command (skipped above --plain-max commands: minutes).

Every kind of sample is taken once per round, in turn, so a busy machine slows all of them
alike; the table shows medians and the spread (min-max), and the CPU time (user + system)
and peak RSS of the `runbook` process.
One more row times `runbook check` with an empty schema cache (the first load of a
runbook after it changed). Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from sshd import start_test_host  # noqa: E402

from runbook_runner.engine import Runner  # noqa: E402
from runbook_runner.runbook import load  # noqa: E402

TEN_STEPS = HERE / "ten-steps.yaml"
CHECKED = REPO / "runbook_runner" / "runbooks" / "gpu-oom-recovery.yaml"


def steps_runbook(folder: Path, count: int) -> Path:
    """A runbook of ``count`` read-only steps: the ten of ten-steps.yaml, repeated."""
    if count == 10:
        return TEN_STEPS
    text = TEN_STEPS.read_text()
    head, _, steps = text.partition("steps:\n")
    lines = [line for line in steps.splitlines() if line.strip()]
    body = [
        lines[i % len(lines)].replace(f"id: s{i % len(lines) + 1:02d}", f"id: s{i + 1:03d}")
        for i in range(count)
    ]
    path = folder / f"steps-{count}.yaml"
    path.write_text(
        head.replace("name: ten-steps", f"name: steps-{count}")
        + "steps:\n"
        + "\n".join(body)
        + "\n"
    )
    return path


def commands_of_run(path: Path) -> list[str]:
    """What `runbook run` sends: the goal's observations, every step, the observations again."""
    runbook = load(path)
    observe = observation_commands(path)
    steps = [step.run.source for step in runbook.steps if step.run]
    return [*observe, *steps, *observe]


def observation_commands(path: Path) -> list[str]:
    runbook = load(path)
    params = {name: p.default for name, p in runbook.parameters.items()}
    runner = Runner(runbook, params, transport=None)  # type: ignore[arg-type]  # only renders
    return [runner.render(o.command) for o in runbook.observations.values() if o.command]


def measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Seconds, peak RSS (KiB) and CPU seconds of one process, which must succeed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO
    )
    assert process.stderr is not None
    error = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    if process.returncode not in (0,):
        raise SystemExit(f"{' '.join(argv[:6])}... exited {process.returncode}: {error.decode()}")
    return elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--sizes", default="10,50,200", help="step counts (default 10,50,200)")
    parser.add_argument(
        "--plain-max", type=int, default=60, help="skip plain ssh above this many commands"
    )
    args = parser.parse_args()
    from runbook_runner.simhost.model import eight_gpu_server

    host = start_test_host()
    host.set_state(eight_gpu_server())
    work = Path(tempfile.mkdtemp(prefix="rbr-bench-"))
    control = work / "ctl"
    # Bytecode cached, as after "pip install" (which compiles it): never from source each run.
    env = dict(
        os.environ,
        XDG_STATE_HOME=str(work / "state"),
        XDG_CACHE_HOME=str(work / "cache"),
        PYTHONPYCACHEPREFIX=str(work / "pycache"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
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
    plain_base = [*ssh_base[:-3], "-o", "ControlPath=none", ssh_base[-1]]
    runbook_cli = [sys.executable, "-m", "runbook_runner"]

    def open_master() -> None:
        subprocess.run(
            [*ssh_base[:-1], "-M", "-f", "-N", "-o", "ControlPersist=yes", ssh_base[-1]], check=True
        )

    def close_master() -> None:
        subprocess.run([*ssh_base, "-O", "exit"], check=True, capture_output=True)

    def over_master(commands: list[str]) -> None:
        for command in commands:
            subprocess.run([*ssh_base, command], check=False, capture_output=True)

    def timed(fn: Callable[[], None]) -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def ssh_cold(commands: list[str]) -> tuple[float, float]:
        """Open a master (in the foreground, so its CPU counts), run, close: seconds, CPU."""
        cpu_before, started = children_cpu(), time.perf_counter()
        master = subprocess.Popen(
            [*ssh_base[:-1], "-M", "-N", "-o", "ControlPersist=no", ssh_base[-1]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not control.exists():  # the socket appears once the login is done
            if master.poll() is not None:
                raise SystemExit("the ControlMaster exited")
            time.sleep(0.001)
        over_master(commands)
        close_master()
        master.wait()
        return time.perf_counter() - started, children_cpu() - cpu_before

    def ssh_warm(commands: list[str]) -> float:
        open_master()
        try:
            return timed(lambda: over_master(commands))
        finally:
            close_master()

    def ssh_plain(commands: list[str]) -> float:
        def work_() -> None:
            for command in commands:
                subprocess.run([*plain_base, command], check=False, capture_output=True)

        return timed(work_)

    # The rows: (label, runbook argv, the same commands for OpenSSH).
    rows: list[tuple[str, list[str], list[str]]] = [
        (
            "check gpu-oom-recovery",
            [*runbook_cli, "check", str(CHECKED), *host.cli_args()],
            observation_commands(CHECKED),
        )
    ]
    for size in [int(s) for s in args.sizes.split(",") if s]:
        path = steps_runbook(work, size)
        rows.append(
            (
                f"run, {size} read-only steps",
                [*runbook_cli, "run", str(path), *host.cli_args()],
                commands_of_run(path),
            )
        )
    samples: dict[str, dict[str, list[float]]] = {label: {} for label, _, _ in rows}
    rss: dict[str, list[int]] = {label: [] for label, _, _ in rows}
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    ssh_cpu: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    first_load: list[float] = []
    try:
        for _, argv, commands in rows:  # warm the page cache, .pyc files, the schema cache
            measured(argv, env)
            ssh_cold(commands)
        for round_ in range(args.runs):
            print(f"round {round_ + 1}/{args.runs}", file=sys.stderr, flush=True)
            for label, argv, commands in rows:
                elapsed, peak, used = measured(argv, env)
                cpu[label].append(used)
                kinds = samples[label]
                kinds.setdefault("runbook", []).append(elapsed)
                rss[label].append(peak)
                elapsed, used = ssh_cold(commands)
                kinds.setdefault("ssh cold", []).append(elapsed)
                ssh_cpu[label].append(used)
                kinds.setdefault("ssh warm", []).append(ssh_warm(commands))
                if len(commands) <= args.plain_max:
                    kinds.setdefault("ssh plain", []).append(ssh_plain(commands))
            cold_cache = dict(env, XDG_CACHE_HOME=str(work / f"empty-{round_}"))
            first_load.append(measured(rows[0][1], cold_cache)[0])
    finally:
        host.stop()
        shutil.rmtree(work, ignore_errors=True)

    def cell(values: list[float] | None) -> str:
        if not values:
            return "skipped"
        return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"

    print()
    print(f"{args.runs} interleaved rounds; median (min-max) of whole processes")
    print()
    print(
        "| work | commands | `runbook` | ssh ControlMaster, opened in the run | already open "
        "| plain `ssh` per command | `runbook` / opened in the run | CPU: `runbook` "
        "| CPU: ssh, opened in the run | peak RSS of `runbook` |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, _, commands in rows:
        kinds = samples[label]
        ratio = statistics.median(kinds["runbook"]) / statistics.median(kinds["ssh cold"])
        print(
            f"| {label} | {len(commands)} | {cell(kinds['runbook'])} | {cell(kinds['ssh cold'])} "
            f"| {cell(kinds['ssh warm'])} | {cell(kinds.get('ssh plain'))} | {ratio:.2f}x "
            f"| {statistics.median(cpu[label]):.2f} s | {statistics.median(ssh_cpu[label]):.2f} s "
            f"| {max(rss[label]) / 1024:.0f} MiB |"
        )
    print()
    print(f"check gpu-oom-recovery with an empty schema cache: {cell(first_load)}")


if __name__ == "__main__":
    main()
