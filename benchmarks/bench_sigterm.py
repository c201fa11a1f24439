"""Benchmark: how long `runbook check` on a fleet takes to exit after SIGTERM, by size.

    python3 benchmarks/bench_sigterm.py [--sizes 1000,100000] [--after 3] [--forks 64]

For each N, an inventory of N simulated hosts (``h000001`` ...), every one of them
127.0.0.1 on the port of one silent listener: it accepts each connection and never sends
the SSH banner, so every host the fleet has started is in flight (its handshake waiting,
with --connect-timeout 60) and the rest are not started yet: the worst moment for a stop.
--after seconds after it says it began checking, the command gets SIGTERM; the time from the signal to its exit is
what is measured (the docs say about a second, at any size), with its exit status (143).

Only 127.0.0.1 is contacted; the listener and the command end with this script. Not a test
(tests/test_fleet_sigterm.py checks a size the
suite can afford, with a bound a 10x slower machine keeps).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class Silent:
    """A listener on 127.0.0.1 that accepts and holds connections, and never says a word."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def inventory(folder: Path, count: int, port: int) -> Path:
    path = folder / f"inventory-{count}.ini"
    lines = ["[sim]"]
    lines += [f"h{i:06d} ansible_host=127.0.0.1 ansible_port={port}" for i in range(1, count + 1)]
    lines.append("[sim:vars]\nansible_user=nobody")
    path.write_text("\n".join(lines) + "\n")
    return path


def stop_time(count: int, port: int, folder: Path, after: float, forks: int) -> tuple[float, int]:
    """Seconds from SIGTERM to the exit of `runbook check` on ``count`` silent hosts."""
    known = folder / "known_hosts"
    known.write_text("")
    command = [
        sys.executable, "-m", "runbook_runner", "check", "gpu-node-health",
        "--inventory", str(inventory(folder, count, port)), "--forks", str(forks),
        "--connect-timeout", "60", "--known-hosts", str(known),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env=env,
        text=True,
    )
    begun = threading.Event()

    def read() -> None:  # the first line says the hosts are being checked; then drain
        assert process.stdout is not None
        for line in process.stdout:
            if "hosts (read-only check" in line:
                begun.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not begun.wait(600):
            raise SystemExit(f"{count} hosts: the check never began")
        time.sleep(after)  # a benchmark, not a test: the signal comes mid-run
        if process.poll() is not None:
            raise SystemExit(f"{count} hosts: ended before the signal ({process.returncode})")
        signalled = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=600)
        return time.perf_counter() - signalled, code
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--after", type=float, default=3.0, help="seconds before the SIGTERM")
    parser.add_argument("--forks", type=int, default=64)
    args = parser.parse_args()
    listener = Silent()
    try:
        with tempfile.TemporaryDirectory(prefix="rbr-sigterm-") as tmp:
            print("| hosts | SIGTERM to exit | exit status |")
            print("|------:|----------------:|------------:|")
            for size in (int(s) for s in args.sizes.split(",")):
                seconds, code = stop_time(size, listener.port, Path(tmp), args.after, args.forks)
                print(f"| {size:,} | {seconds:.2f} s | {code} |", flush=True)
    finally:
        listener.close()


if __name__ == "__main__":
    main()
