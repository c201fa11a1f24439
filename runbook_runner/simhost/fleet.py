"""Many simulated GPU servers in one process, each on its own port of 127.0.0.1.

Each host has its own host key and its own state (a :class:`DrillHost`); one client key
is accepted by all, as an operator's key would be. One thread accepts on every port.
Used by ``runbook sim``, the fleet benchmark and tests. Each host's commands run in a real
shell in the host's own folder (hostshell.py), with its stand-ins first on PATH.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import paramiko

from runbook_runner.simhost.model import SimHost, eight_gpu_server
from runbook_runner.simhost.simulated import SimClock
from runbook_runner.simhost.sshserver import DrillHost


class FleetHost(DrillHost):
    """A drill host of a fleet (each channel is closed after its exit status, as sshd does,
    which OpenSSH's client under clush waits for: every simulated host does so now)."""


class SimFleet:
    def __init__(
        self,
        count: int,
        state: Callable[[int], SimHost] = lambda index: eight_gpu_server(),
        clock: Callable[[], SimClock] = SimClock,
        folder: Path | None = None,
    ) -> None:
        """``folder``: where each host's folder goes (``host1``, ...); a temporary one each
        by default. ``clock``: each host's simulated time (SimClock: only when waited)."""
        self.client_key = paramiko.ECDSAKey.generate()
        self.hosts: list[FleetHost] = []
        self._selector = selectors.DefaultSelector()
        self._closed = threading.Event()
        for index in range(count):
            home = folder / f"host{index + 1}" if folder is not None else None
            host = FleetHost(state(index), clock=clock(), folder=home)
            host.client_key = self.client_key
            listener = socket.create_server(("127.0.0.1", 0), backlog=128)
            listener.setblocking(False)
            host._listener = listener
            self._selector.register(listener, selectors.EVENT_READ, host)
            self.hosts.append(host)
        self._thread = threading.Thread(target=self._accept_loop, name="simfleet", daemon=True)

    def start(self) -> SimFleet:
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                host: DrillHost = key.data
                try:
                    sock, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                sock.setblocking(True)
                if host.is_down():
                    sock.close()
                    continue
                threading.Thread(target=self._serve, args=(host, sock), daemon=True).start()

    @staticmethod
    def _serve(host: DrillHost, sock: socket.socket) -> None:
        try:
            host._serve(sock)
        finally:
            # OpenSSH's client (clush) waits for the server to hang up after its disconnect.
            with contextlib.suppress(OSError):
                sock.close()

    def stop(self) -> None:
        self._closed.set()
        for host in self.hosts:
            host.stop()
        with contextlib.suppress(Exception):
            self._selector.close()

    def write_files(self, folder: Path, prefix: str = "sim") -> dict[str, Path]:
        """known_hosts, an Ansible inventory (INI), an ssh_config and the client key, for
        runbook and for OpenSSH (clush): host ``sim0001`` is 127.0.0.1 on its port."""
        folder.mkdir(parents=True, exist_ok=True)
        key = folder / "client_key"
        self.client_key.write_private_key_file(str(key))
        known = folder / "known_hosts"
        inventory = folder / "inventory.ini"
        config = folder / "ssh_config"
        width = max(4, len(str(len(self.hosts))))
        known_lines, inventory_lines, config_lines = [], ["[sim]"], []
        for index, host in enumerate(self.hosts, 1):
            name = f"{prefix}{index:0{width}d}"
            host_key = host.host_key
            known_lines.append(
                f"[127.0.0.1]:{host.port} {host_key.get_name()} {host_key.get_base64()}"
            )
            inventory_lines.append(f"{name} ansible_host=127.0.0.1 ansible_port={host.port}")
            config_lines.append(f"Host {name}\n  HostName 127.0.0.1\n  Port {host.port}")
        config_lines.append(
            f"Host *\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        )
        inventory_lines.append("[sim:vars]\nansible_user=root")
        known.write_text("\n".join(known_lines) + "\n")
        inventory.write_text("\n".join(inventory_lines) + "\n")
        config.write_text("\n".join(config_lines))
        return {"key": key, "known_hosts": known, "inventory": inventory, "ssh_config": config}
