"""A real OpenSSH sshd on 127.0.0.1 for the tests, with a stand-in GPU host behind it.

Each server gets its own host key and a pinned known_hosts line; the client
key is authorised for one login user. When the tests run as root that user is
a dedicated unprivileged account with /bin/sh as its shell: its commands
cannot signal or change anything of the real machine's, and its shell starts
fast (root's login shell here sources a slow .bashrc). Commands that change a
machine are shadowed on its PATH by recording stand-ins (runbook_runner.simhost).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import runbook_runner
from runbook_runner.simhost import standin
from runbook_runner.simhost.model import CONTAINER_FILES, SimHost, SimProcess, eight_gpu_server
from runbook_runner.simhost.standin import RealProcesses

SSHD = "/usr/sbin/sshd"
TEST_USER = "rbr-test"
STANDINS = sorted({*standin.HANDLERS, "sudo"})


def wait_for(condition, timeout: float, what, interval: float = 0.02):
    """Poll ``condition`` until it is truthy or ``timeout`` passes; then fail saying ``what``
    was awaited (a string, or a callable asked only then, e.g. for a log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _login_user() -> str:
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    # pytest-xdist workers start their sshd at the same time: create the user once.
    with open("/tmp/rbr-test-user.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_test_user()


def _ensure_test_user() -> str:
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/",
                "--shell",
                "/bin/sh",
                TEST_USER,
            ],
            check=True,
        )
    # Without PAM, sshd refuses a locked account ("!" in shadow): "*" is no password, unlocked.
    subprocess.run(["usermod", "--password", "*", "--home", "/", TEST_USER], check=True)
    return TEST_USER


def _python_for(user: str) -> str:
    """An interpreter the login user can run (root's pyenv lives under /root, mode 0700)."""
    for candidate in ("/usr/bin/python3", sys.executable):
        if os.path.exists(candidate) and (os.geteuid() != 0 or not candidate.startswith("/root")):
            return candidate
    return sys.executable


def keygen(path: Path, comment: str, passphrase: str = "") -> str:
    """Make an ed25519 key pair; returns the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(path)],
        check=True,
    )
    return Path(f"{path}.pub").read_text()


@dataclass
class TestHost:
    """One running sshd and the simulated GPU host it fronts."""

    port: int
    root: Path
    user: str
    client_key: Path
    known_hosts: Path
    host_public_key: str
    process: subprocess.Popen = field(repr=False)

    @property
    def state_file(self) -> Path:
        return self.root / "sim" / "state.json"

    @property
    def calls_file(self) -> Path:
        return self.root / "sim" / "calls.log"

    def set_state(self, host: SimHost) -> None:
        host.save(self.state_file)
        shutil.chown(self.state_file, self.user) if os.geteuid() == 0 else None

    def state(self) -> SimHost:
        return SimHost.load(self.state_file)

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line)["argv"] for line in self.calls_file.read_text().splitlines()]

    def log(self) -> str:
        return (self.root / "sshd.log").read_text()

    def logins(self) -> int:
        """Authenticated connections so far (sshd logs one line for each at VERBOSE)."""
        return self.log().count("Accepted publickey for")

    def clear_calls(self) -> None:
        self.calls_file.write_text("")

    def cli_args(self) -> list[str]:
        return [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--user",
            self.user,
            "-i",
            str(self.client_key),
            "--known-hosts",
            str(self.known_hosts),
        ]

    def ssh(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """Run a command through OpenSSH's client (to set up scenarios, not under test)."""
        return subprocess.run(
            [
                "ssh",
                "-p",
                str(self.port),
                "-i",
                str(self.client_key),
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"{self.user}@127.0.0.1",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def change_host_key(self) -> None:
        """Give the server a new host key (read when sshd next starts): a reinstalled host,
        or a man in the middle."""
        host_key = self.root / "keys" / "host_ed25519"
        host_key.unlink()
        Path(f"{host_key}.pub").unlink()
        self.host_public_key = keygen(host_key, "rbr-test-host-new")

    def drop_and_restart(self) -> None:
        """What a reboot does to SSH: every connection drops, then the server answers again."""
        descendants = _descendants(self.process.pid)
        for pid in descendants:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        self.process.kill()
        self.process.wait(timeout=10)
        with (self.root / "sshd.log").open("a") as log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")], stdout=log, stderr=log
            )
        wait_for(lambda: _listening(self.port), 60, "sshd to listen again")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Stand-in servers started over SSH live in their own sessions: end them too.
        if self.state_file.exists():
            for process in self.state().processes:
                end_sim_server(process)
        shutil.rmtree(self.root, ignore_errors=True)


def end_sim_server(process: SimProcess) -> None:
    """SIGKILL a stand-in server a test started, if its PID is still that server: a PID
    the state file still lists may have died and been given to another process since
    (pid_max is small on some machines), such as another test's sshd or stand-in."""
    if RealProcesses({process.pid: process.start_ticks}).alive(process.pid):
        with contextlib.suppress(OSError):
            os.kill(process.pid, 9)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def started_hosts(count: int):
    """``count`` test hosts for a fleet, each stopped afterwards (those already started too,
    when a later one fails to start)."""
    hosts: list[TestHost] = []
    try:
        for _ in range(count):
            hosts.append(start_test_host())
        yield hosts
    finally:
        for host in hosts:
            host.stop()


def start_test_host(extra_config: str = "", lock_dir: str | None = None) -> TestHost:
    """Start one; ``extra_config`` goes first, so it wins over the defaults (first match wins).
    ``lock_dir``: the host's $RUNBOOK_LOCK_DIR (default: the sim folder)."""
    user = _login_user()
    root = Path(tempfile.mkdtemp(prefix="rbr-sshd-"))
    root.chmod(0o755)
    for sub in ("bin", "lib", "sim", "keys"):
        (root / sub).mkdir()
    (root / "keys").chmod(0o700)
    host_key = root / "keys" / "host_ed25519"
    client_key = root / "keys" / "client_ed25519"
    host_public = keygen(host_key, "rbr-test-host")
    client_public = keygen(client_key, "rbr-test-client")
    authorized = root / "authorized_keys"
    authorized.write_text(client_public)
    authorized.chmod(0o644)

    # The stand-ins: the simulator package copied where the login user can read it.
    package = Path(runbook_runner.__file__).parent
    target = root / "lib" / "runbook_runner"
    target.mkdir()
    shutil.copy(package / "__init__.py", target)
    shutil.copytree(
        package / "simhost", target / "simhost", ignore=shutil.ignore_patterns("__pycache__")
    )
    python = _python_for(user)
    for name in STANDINS:
        wrapper = root / "bin" / name
        standin_call = f'PYTHONPATH={root / "lib"} exec {python} -S -B -m runbook_runner.simhost.standin {name} "$@"'
        if name == "cat":  # the simulated container files only; the real cat for any other
            # and a process's environ, loginuid and mountinfo from the model, never this
            # machine's (a test's verdict must not depend on who runs it, or where)
            proc = ("/proc/[0-9]*/environ", "/proc/[0-9]*/loginuid", "/proc/[0-9]*/mountinfo")
            cases = "|".join((*CONTAINER_FILES, *proc))
            wrapper.write_text(
                f"#!/bin/bash\nfor a do case $a in {cases}) {standin_call};; esac; done\n"
                'exec -a cat /bin/cat "$@"\n'
            )
        else:
            wrapper.write_text(f"#!/bin/sh\n{standin_call}\n")
        wrapper.chmod(0o755)
    sim = root / "sim"
    if os.geteuid() == 0:
        shutil.chown(sim, user)
    port = free_port()
    config = root / "sshd_config"
    path = f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    config.write_text(
        f"""{extra_config}
Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {root / "sshd.pid"}
AuthorizedKeysFile {authorized}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AllowUsers {user}
AllowTcpForwarding yes
MaxSessions 200
MaxStartups 100
PrintMotd no
LogLevel VERBOSE
SetEnv PATH={path} RBR_SIM_STATE={sim / "state.json"} RBR_SIM_LOG={sim / "calls.log"} RUNBOOK_LOCK_DIR={lock_dir or sim}
"""
    )
    Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
    # sshd's log goes to a file: a pipe nobody reads would fill up and stall it.
    with (root / "sshd.log").open("w") as log:
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)

    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"sshd exited: {(root / 'sshd.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_for(listening, 60, "sshd to listen")
    known_hosts = root / "known_hosts"
    key_type, key_data = host_public.split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{port} {key_type} {key_data}\n")
    test_host = TestHost(port, root, user, client_key, known_hosts, host_public, process)
    test_host.set_state(eight_gpu_server())
    test_host.calls_file.touch()
    if os.geteuid() == 0:
        shutil.chown(test_host.calls_file, user)
    return test_host


def only_simulated_hosts_start(monkeypatch) -> None:
    """Refuse, for the test, any signal from this process and any program started but the
    simulated hosts' own shells (their stand-ins first on PATH, their socket in the env)."""
    import os as os_module

    from runbook_runner.simhost import hostshell, sandbox

    sandbox.available()  # probed (and the stand-in client built) before the guard
    hostshell.client_command()
    real_popen = subprocess.Popen

    def refuse(*args, **kwargs):
        raise AssertionError(f"the drill touched the real machine: {args}")

    class SimulatedOnly(real_popen):  # type: ignore[misc,valid-type]
        def __init__(self, argv, *args, **kwargs):
            env = kwargs.get("env") or {}
            if not env.get("RBR_SIM_SOCKET") or not env.get("PATH", "").startswith(
                str(Path(env["RBR_SIM_SOCKET"]).parent / "bin") + ":"
            ):
                refuse(argv)
            super().__init__(argv, *args, **kwargs)

    monkeypatch.setattr(os_module, "kill", refuse)
    monkeypatch.setattr(subprocess, "Popen", SimulatedOnly)
