"""Benchmark: `runbook check gpu-node-health` on a fleet, against clush and a shell loop.

    python3 benchmarks/bench_fleet.py [--sizes 1000,10000] [--loop-sample 8]

Serves N simulated 8-GPU servers from simulator processes of up to --per-server hosts each
(runbook_runner/simhost/fleet.py: the drill's paramiko SSH server on N ports of 127.0.0.1,
each host with its own host key and state, one client key for all; every 50th host keeps
81,920 MiB on GPU 3, so the summary has two groups), then times, as whole processes, for
each N:

- runbook:  `runbook check gpu-node-health --inventory INV --forks F` (one SSH
  connection per host, the runbook's four observations, the checks, the summary; from 256
  hosts on, one worker process per core with threads inside each);
- clush:    `clush -f 64 -b -w sim[0001-N]` running the same four observation commands
  through OpenSSH (an ssh_config and known_hosts for the ports), output gathered;
- loop:     `for h in ...; do runbook check gpu-node-health --host $h; done`, run on a
  sample of hosts and extrapolated to N (marked "~").

Wall time, hosts per second, CPU time per host (user + system of the command and every
process under it, from getrusage of the reaped children), and the peak RSS of the whole
process tree (sampled every 0.1 s: clush's ssh children count; forked workers count their
shared pages once each, so runbook's figure is an upper bound). The server runs on the same machine and shares its
CPUs. Bounded: each command has a time limit and the server exits when this script
does (or after --serve-for seconds). Only 127.0.0.1 is contacted. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

OBSERVATIONS = "; ".join(
    [
        "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.used,memory.total,"
        "persistence_mode --format=csv",
        "nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid,gpu_bus_id"
        " --format=csv",
        "free -b",
        "ps -eo pid,stat,args",
    ]
)


def serve(count: int, folder: Path, limit_s: float, prefix: str = "sim") -> None:
    """The server side: N simulated hosts until stdin closes (or the time limit); the client
    key is the one in FOLDER/../client_key when there is one (shared by every server)."""
    logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)
    import paramiko

    from runbook_runner.simhost.fleet import SimFleet
    from runbook_runner.simhost.model import eight_gpu_server

    def state(index: int):  # type: ignore[no-untyped-def]
        host = eight_gpu_server()
        if index % 50 == 49:
            host.gpu(3).orphaned_mib = 81920
        return host

    fleet = SimFleet(count, state)
    shared = folder.parent / "client_key"
    if shared.exists():
        key = paramiko.ECDSAKey.from_private_key_file(str(shared))
        fleet.client_key = key
        for host in fleet.hosts:
            host.client_key = key
    fleet.start()
    fleet.write_files(folder, prefix)
    print("ready", flush=True)
    deadline = time.monotonic() + limit_s
    watcher = threading.Thread(target=sys.stdin.read, daemon=True)
    watcher.start()
    while watcher.is_alive() and time.monotonic() < deadline:
        watcher.join(0.5)
    fleet.stop()


def _tree_pss_kib(root: int) -> int:
    """The proportional set size of a process tree: pages shared between its processes
    (forked workers, the ssh binary and libraries of clush's children) counted once."""
    total = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            status = (entry / "status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            children.setdefault(int(fields["PPid"]), []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


def _tree_rss_kib(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            status = (entry / "status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            pid = int(entry.name)
            children.setdefault(int(fields["PPid"]), []).append(pid)
            rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        total += rss.get(pid, 0)
        pending += children.get(pid, [])
    return total


PSS: list[int] = []  # the peak PSS of the last command measured, in KiB


def measure(
    command: list[str], limit_s: float, env: dict[str, str]
) -> tuple[float, int, int, float]:
    """(wall seconds, peak tree RSS in KiB, exit status, CPU seconds) of one command; its
    peak tree PSS goes to PSS."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env
    )
    peak = pss = 0
    PSS[:] = [0]
    sampled = 0
    while process.poll() is None:
        peak = max(peak, _tree_rss_kib(process.pid))
        sampled += 1
        if sampled % 5 == 0:  # PSS costs more to read: every half second
            pss = max(pss, _tree_pss_kib(process.pid))
            PSS[:] = [pss]
        if time.perf_counter() - started > limit_s:
            process.kill()
            process.wait()
            return float("inf"), peak, -9, 0.0
        time.sleep(0.1)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, peak, process.returncode, cpu


def start_servers(total: int, per_server: int, folder: Path) -> tuple[list[Any], list[str]]:
    """Simulator processes of up to ``per_server`` hosts each (prefixes sa, sb, ...), one
    client key for all; their files merged into FOLDER (inventory.ini, known_hosts,
    ssh_config). Returns the processes and the host names in order."""
    import paramiko

    paramiko.ECDSAKey.generate().write_private_key_file(str(folder / "client_key"))
    counts = [min(per_server, total - start) for start in range(0, total, per_server)]
    servers = []
    for number, count in enumerate(counts):
        sub = folder / f"server{number}"
        sub.mkdir()
        servers.append(
            subprocess.Popen(
                [sys.executable, __file__, "--serve", str(count), str(sub), _prefix(number)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    names: list[str] = []
    inventory, known, config = ["[sim]"], [], []
    for number, server in enumerate(servers):
        if server.stdout is None or server.stdout.readline().strip() != "ready":
            raise SystemExit("a simulated fleet did not start")
        sub = folder / f"server{number}"
        for line in (sub / "inventory.ini").read_text().splitlines():
            if line.startswith(_prefix(number)):
                inventory.append(line)
                names.append(line.split()[0])
        known.append((sub / "known_hosts").read_text())
        blocks = (sub / "ssh_config").read_text().split("Host *")[0]
        config.append(blocks)
    (folder / "inventory.ini").write_text(
        "\n".join([*inventory, "[sim:vars]", "ansible_user=root"]) + "\n"
    )
    (folder / "known_hosts").write_text("".join(known))
    (folder / "ssh_config").write_text(
        "".join(config)
        + f"Host *\n  User root\n  IdentityFile {folder / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
    )
    return servers, names


def _prefix(number: int) -> str:
    return "s" + chr(ord("a") + number)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--forks", type=int, default=64)
    parser.add_argument("--per-server", type=int, default=2500, help="hosts per simulator")
    parser.add_argument("--loop-sample", type=int, default=8, help="hosts the loop really runs")
    parser.add_argument("--limit", type=float, default=300, help="seconds per command, at most")
    parser.add_argument(
        "--serve", nargs=3, metavar=("N", "FOLDER", "PREFIX"), help=argparse.SUPPRESS
    )
    parser.add_argument("--serve-for", type=float, default=1800, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), Path(args.serve[1]), args.serve_for, args.serve[2])
        return
    sizes = [int(n) for n in args.sizes.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="rbr-bench-fleet-"))
    servers: list[Any] = []
    try:
        servers, names = start_servers(max(sizes), args.per_server, folder)
        (folder / "empty_config").write_text("")
        env = {**os.environ, "XDG_STATE_HOME": str(folder / "state"), "NO_COLOR": "1"}
        common = ["-i", str(folder / "client_key"), "--known-hosts", str(folder / "known_hosts")]
        clush = shutil.which("clush")
        rows = []
        for count in sizes:
            inventory = folder / f"inventory-{count}.ini"
            lines = (folder / "inventory.ini").read_text().splitlines()
            inventory.write_text("\n".join([lines[0], *lines[1 : count + 1], *lines[-2:]]) + "\n")
            nodes = ",".join(names[:count])  # clush folds them
            runbook = [
                sys.executable,
                "-m",
                "runbook_runner",
                "check",
                "gpu-node-health",
                "--inventory",
                str(inventory),
                "--ssh-config",
                str(folder / "empty_config"),
                "--forks",
                str(args.forks),
                *common,
            ]
            wall, rss, code, cpu = measure(runbook, args.limit, env)
            rows.append((count, f"runbook --forks {args.forks}", wall, rss, code, "", cpu, PSS[0]))
            if clush:
                command = [
                    clush, "-f", str(args.forks), "-b", "-w", nodes,
                    "-o", f"-F {folder / 'ssh_config'}", OBSERVATIONS,
                ]  # fmt: skip
                wall, rss, code, cpu = measure(command, args.limit, env)
                rows.append((count, f"clush -f {args.forks} -b", wall, rss, code, "", cpu, PSS[0]))
            sample = min(count, args.loop_sample)
            loop = " ".join(
                f"{sys.executable} -m runbook_runner check gpu-node-health --host {name} "
                f"--ssh-config {folder / 'ssh_config'} {' '.join(common)} >/dev/null;"
                for name in names[:sample]
            )
            wall, rss, code, cpu = measure(["sh", "-c", loop], args.limit, env)
            note = f"~ ({sample} run, x{count / sample:g})" if sample < count else ""
            scale = count / sample
            rows.append(
                (
                    count,
                    "for loop of runbook --host",
                    wall * scale,
                    rss,
                    0,
                    note,
                    cpu * scale,
                    PSS[0],
                )
            )
        print_table(rows)
    finally:
        for server in servers:
            if server.stdin is not None:
                server.stdin.close()
        for server in servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=30)
            if server.poll() is None:
                server.kill()
        shutil.rmtree(folder, ignore_errors=True)


def print_table(rows: list[tuple[int, str, float, int, int, str, float, int]]) -> None:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    print(
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} CPUs ({cpu}), "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print("| hosts | how | wall s | hosts/s | CPU ms/host | peak RSS MiB | peak PSS MiB | exit |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for count, how, wall, rss, code, note, cpu, pss in rows:
        rate = count / wall if wall and wall != float("inf") else 0
        shown = f"{note.split(' ', 1)[0]}{wall:.1f}" if note else f"{wall:.1f}"
        print(
            f"| {count:,} | {how}{' ' + note.split(' ', 1)[1] if note else ''} | {shown} | "
            f"{rate:.1f} | {1000 * cpu / count:.1f} | {rss / 1024:.0f} | {pss / 1024:.0f} | "
            f"{code} |"
        )


if __name__ == "__main__":
    main()
