"""A fleet stops within about a second of SIGTERM, at any size (issue #38).

Every host is 127.0.0.1 on the port of one silent listener: it accepts each connection and
never sends the SSH banner, so each host the fleet started is in flight (its handshake
waits, with --connect-timeout 300) and the others are not started: the worst moment for a
stop. The suite's size is one it can afford; benchmarks/bench_sigterm.py measures 100,000.
The bound is generous (a machine ten times slower keeps it); before the fix, the hosts in
flight waited out their ConnectTimeout (300 s here).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sshd import wait_for

from runbook_runner.exitcodes import ExitCode

REPO = Path(__file__).resolve().parent.parent
HOSTS = 2000
FORKS = 16
BOUND_S = 15.0  # about a second here; ten times slower keeps it


class Silent:
    """Accepts and holds connections on 127.0.0.1; never says a word."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("workers", [1, 2], ids=["threads", "processes"])
def test_sigterm_stops_a_fleet_with_hosts_in_flight_within_the_bound(tmp_path, workers):
    listener = Silent()
    try:
        inventory = tmp_path / "inventory.ini"
        lines = [
            f"h{i:05d} ansible_host=127.0.0.1 ansible_port={listener.port}" for i in range(HOSTS)
        ]
        inventory.write_text("[sim]\n" + "\n".join(lines) + "\n[sim:vars]\nansible_user=nobody\n")
        known = tmp_path / "known_hosts"
        known.write_text("")
        process = subprocess.Popen(
            [sys.executable, "-m", "runbook_runner", "check", "gpu-node-health",
             "--inventory", str(inventory), "--forks", str(FORKS), "--workers", str(workers),
             "--connect-timeout", "300", "--known-hosts", str(known)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(process.stdout), daemon=True)
        reader.start()
        try:
            # every fork in flight: the listener holds a connection for each
            wait_for(lambda: len(listener.held) >= FORKS, 120, f"{FORKS} connections in flight")
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=BOUND_S * 4)
            took = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        reader.join(10)
        out = "".join(said)
        assert code == 128 + signal.SIGTERM, out[-2000:]
        assert took < BOUND_S, f"{took:.1f}s from SIGTERM to exit"
        assert code != ExitCode.INTERNAL
        assert "not started" in out  # the hosts never reached are said so, folded
        assert "Traceback" not in out
    finally:
        listener.close()


# -- the summary's fold, without ClusterShell for the common names (the oracle: ClusterShell)


def test_the_quick_fold_is_clustershells_fold():
    from ClusterShell.NodeSet import NodeSet
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from runbook_runner.fleet.selection import _fold_numbered

    name = st.builds(
        lambda prefix, number, width: f"{prefix}{number:0{width}d}",
        st.sampled_from(["gpu", "node-", "a_b.", "", "X"]),
        st.integers(0, 300),
        st.sampled_from([1, 3]),
    )

    @settings(max_examples=300, deadline=None)
    @given(st.lists(name, min_size=1, max_size=40))
    def agrees(names):
        quick = _fold_numbered(names)
        if quick is not None:
            assert quick == str(NodeSet.fromlist(names))

    agrees()
    assert _fold_numbered(["gpu01", "gpu1"]) is None  # two paddings of one prefix
    assert _fold_numbered(["10.0.0.1"]) is None  # digits in the prefix: ClusterShell's
    assert _fold_numbered([f"h{i:06d}" for i in range(1, 100_001)]) == "h[000001-100000]"
