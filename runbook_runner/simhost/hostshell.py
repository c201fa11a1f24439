"""The simulated host's shell: a real POSIX shell with the stand-ins first on PATH.

A simulated host is a folder::

    bin/        the stand-ins (nvidia-smi, ps, kill, sleep, ...): small wrappers that ask
                the host's stand-in server (standin.sock) to answer; cat, stat and rm
                answer themselves for every path but the simulated ones (a link to a
                folder in the user's cache named for its content, shared by hosts)
    shm/        what the host's /dev/shm holds: one sparse file per simulated segment
    lock/       $RUNBOOK_LOCK_DIR: where the runner's host lock is taken
    home/ tmp/  $HOME and $TMPDIR
    calls.log   every stand-in call, one JSON line each
    state.json  the model after the last call
    sandbox.fstab, root/   what the host's commands see of this machine (sandbox.py)

Each command runs as ``bash -c COMMAND`` (POSIX sh where there is no bash), unchanged, in
the host's sandbox (sandbox.py): namespaces of its own, this machine's system read-only,
nothing of the operator's, the host's shm/ as /dev/shm, and writable only its scratch.
Where no sandbox can be had, no host is made (:class:`sandbox.NoSandbox`).
``kill`` is the stand-in, not the shell's builtin (``enable -n kill`` from $BASH_ENV),
so that a signal reaches the simulated process table and nothing else.

No I/O at import; the folder is written by :func:`prepare`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runbook_runner.simhost import sandbox
from runbook_runner.simhost.model import CONTAINER_FILES, EPOCH, SHM_DIR, SimHost

PATH_TAIL = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLIENT = Path(__file__).with_name("standin_client.py")
# Answered by the stand-in server for every call.
SERVED = (
    "nvidia-smi",
    "free",
    "dmesg",
    "df",
    "pkill",
    "pgrep",
    "fuser",
    "systemctl",
    "lsmod",
    "rmmod",
    "modprobe",
    "reboot",
    "shutdown",
    "date",
    "curl",
    "ps",
    "journalctl",
    "kill",
    "sleep",
    "ss",
)
# Answered one line of stdin at a time (a control daemon's commands come on its stdin).
STDIN_LINES = ("nvidia-cuda-mps-control",)
# Answered by the stand-in server only for the simulated paths; the real tool otherwise.
PATHS_ONLY = ("cat", "stat", "rm", "readlink")


@dataclass(frozen=True)
class HostShell:
    """Where one simulated host lives, and how its commands are started."""

    folder: Path

    @property
    def socket(self) -> Path:
        return self.folder / "standin.sock"

    @property
    def calls_log(self) -> Path:
        return self.folder / "calls.log"

    @property
    def state_file(self) -> Path:
        return self.folder / "state.json"

    @property
    def lock_dir(self) -> Path:
        return self.folder / "lock"

    @property
    def shm_dir(self) -> Path:
        return self.folder / "shm"

    def env(self) -> dict[str, str]:
        """The environment of every command: as a login on the host would have it."""
        return {
            "PATH": f"{self.folder / 'bin'}:{PATH_TAIL}",
            "HOME": str(self.folder / "home"),
            "TMPDIR": str(self.folder / "tmp"),
            "USER": "root",
            "LOGNAME": "root",
            "SHELL": "/bin/sh",
            "BASH_ENV": str(self.folder / "bashenv"),
            "RBR_SIM_SOCKET": str(self.socket),
            "RUNBOOK_LOCK_DIR": str(self.lock_dir),
        }

    def argv(self, command: str) -> list[str]:
        """What runs ``command`` on the simulated host, in its sandbox (a plain sh, as
        sshd would start it: named ``bash`` in its messages, as a login shell is)."""
        shell = _shell()
        login = shlex.quote(shell)
        named = f"exec -a bash {login}" if shell.endswith("bash") else f"exec {login}"
        return sandbox.argv(self.folder, shell, f'{named} -c "$1"', command)

    def run_local(self, command: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """Run one command as the host would, here, without SSH (for tests and ``sim``)."""
        return subprocess.run(
            self.argv(command),
            env=self.env(),
            input=stdin,
            capture_output=True,
            cwd=self.folder / "home",
            check=False,
            start_new_session=True,
        )


@functools.cache
def _shell() -> str:
    return shutil.which("bash", path=PATH_TAIL) or "/bin/sh"


def client_command(python: str = sys.executable) -> str:
    """How a stand-in asks the server."""
    return f"{shlex.quote(python)} -S -I -B {shlex.quote(str(CLIENT))}"


def _wrapper(name: str, client: str) -> str:
    return f'#!/bin/sh\nexec {client} {name} "$@"\n'


def _paths_wrapper(name: str, client: str, patterns: list[str]) -> str:
    """cat, stat, rm: the stand-in for a simulated path, the real tool for any other."""
    real = shutil.which(name, path=PATH_TAIL) or f"/bin/{name}"
    cases = "|".join(patterns)
    return (
        f'#!/bin/sh\nfor a do case $a in {cases}) exec {client} {name} "$@";; esac; done\n'
        f'exec {shlex.quote(real)} "$@"\n'
    )


def _lines_wrapper(name: str, client: str) -> str:
    """A tool that reads its commands from stdin: one call per line."""
    call = f"{client} {name}"
    return (
        f'#!/bin/sh\n[ $# -gt 0 ] && exec {call} "$@"\nstatus=0\n'
        f'while IFS= read -r line || [ -n "$line" ]; do {call} "$line" || status=$?; done\n'
        "exit $status\n"
    )


def _missing(name: str) -> str:
    """A tool the simulated host does not have: as the login shell answers for one."""
    return f'#!/bin/sh\necho "bash: line 1: {name}: command not found" >&2\nexit 127\n'


def stand_ins(host: SimHost, python: str = sys.executable) -> dict[str, str]:
    """The host's bin/: each stand-in's name and script."""
    client = client_command(python)
    scripts = {
        name: _missing(name) if name in host.missing_commands else _wrapper(name, client)
        for name in SERVED
    }
    for name in STDIN_LINES:
        missing = name in host.missing_commands
        scripts[name] = _missing(name) if missing else _lines_wrapper(name, client)
    shm = [f"{SHM_DIR}/*"]
    cat = ["/proc/meminfo"]
    cat += [f"/proc/[0-9]*/{name}" for name in ("environ", "cgroup", "cmdline", "loginuid")]
    cat += ["/proc/[0-9]*/mountinfo"]
    cat += [shlex.quote(p) for p in sorted({*host.files, *CONTAINER_FILES})]
    exe = ["/proc/[0-9]*/exe"]
    for name, patterns in (("cat", cat), ("stat", shm), ("rm", shm), ("readlink", exe)):
        scripts[name] = _paths_wrapper(name, client, patterns)
    # sudo: the command, as root (the simulated host's login is root already).
    scripts["sudo"] = (
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in -u|-g|-p|-C) shift 2;; --) shift; break;;"
        ' -*) shift;; *) break;; esac; done\n[ $# -gt 0 ] || { echo "usage: sudo -n COMMAND" >&2;'
        ' exit 1; }\nexec "$@"\n'
    )
    # sh: the same shell as the login, with the same builtins turned off
    login = shlex.quote(_shell())
    named = f"exec -a bash {login}" if _shell().endswith("bash") else f"exec {login}"
    scripts["sh"] = f'#!{_shell()}\n{named} "$@"\n'
    return scripts


def prepare(folder: Path, host: SimHost, python: str = sys.executable) -> HostShell:
    """Make the host's folder: stand-ins, /dev/shm, the lock folder, home, tmp and the
    sandbox's table. Hosts whose stand-ins are the same share one bin/ (a fleet of
    thousands writes it once). :class:`sandbox.NoSandbox` where no sandbox can be made."""
    if not sandbox.available():
        raise sandbox.NoSandbox()
    shell = HostShell(folder)
    for sub in ("shm", "lock", "home", "tmp"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    scripts = stand_ins(host, python)
    shared = _shared_bin(scripts)
    if shared is not None:
        (folder / "bin").symlink_to(shared, target_is_directory=True)
    else:
        (folder / "bin").mkdir()
        for name, text in scripts.items():
            _write_executable(folder / "bin" / name, text)
    (folder / "bashenv").write_text("enable -n kill 2>/dev/null\n")
    sandbox.write_table(folder, _programs(python))
    sync_shm(shell, host)
    return shell


def _programs(python: str) -> list[Path]:
    """What the stand-ins run, beyond the system's: the user's cache (the shared bin/), and
    the Python client with its interpreter."""
    shown = [_cache()] if _cache().is_dir() else []
    return [*shown, CLIENT.parent, Path(python).parent, Path(sys.base_prefix)]


def _shared_bin(scripts: dict[str, str]) -> Path | None:
    """A bin/ with these scripts in the user's cache, named for its content; None when the
    cache cannot be written."""
    digest = hashlib.sha256(json.dumps(sorted(scripts.items())).encode()).hexdigest()[:16]
    folder = _cache() / f"sim-bin-{digest}"
    if folder.is_dir():
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".sim-bin-"))
        for name, text in scripts.items():
            _write_executable(scratch / name, text)
        scratch.chmod(0o755)
        try:
            scratch.rename(folder)  # atomic; another process may have made the same
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
    except OSError:
        return None
    return folder if folder.is_dir() else None


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runbook-runner"


def _write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def sync_shm(shell: HostShell, host: SimHost) -> None:
    """Make shm/ hold one sparse file per simulated segment, with its size and age; remove
    the files of segments that are gone (files the host's own commands made stay)."""
    known = shell.folder / "shm.names"
    before = set(json.loads(known.read_text())) if known.exists() else set()
    now = {segment.name for segment in host.shm}
    for name in before - now:
        (shell.shm_dir / name).unlink(missing_ok=True)
    for segment in host.shm:
        path = shell.shm_dir / segment.name
        if "/" in segment.name or segment.name in {"", ".", ".."}:
            continue  # never a path outside the folder
        try:  # shm/ is the sandbox's to write: a link or a FIFO put there is not followed
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, segment.size_bytes)
                stamp = EPOCH + segment.mtime
                os.utime(fd, (stamp, stamp))
        finally:
            os.close(fd)
    known.write_text(json.dumps(sorted(now)))
