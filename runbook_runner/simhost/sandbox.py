"""The practice host's sandbox: the simulated host's shell gets a machine of its own.

A simulated host runs the commands of runbooks under review (``compare``, ``test``,
``drill``, ``sim``): someone else's YAML, on the operator's machine. Each command runs in
new user, mount, PID and network namespaces (``unshare``), on a root of its own
(``pivot_root`` onto a tmpfs) that holds only:

- the system's programs, libraries and configuration, read-only: /usr, /bin, /sbin,
  /lib*, /etc (its password hashes and SSH, Munge and TLS secrets hidden);
- /dev with null, zero, full, random, urandom and tty; the host's shm/ as /dev/shm;
  /proc of its own PID namespace; /tmp and /var/tmp empty and private;
- the host's folder read-only, but for its scratch (home/, tmp/, lock/, shm/), and the
  stand-ins' programs read-only (the user's cache folder, or the Python client's).

Nothing else is there: not the operator's home, the working tree or /run. A process of
this machine cannot be signalled, no network is reached, and a reboot(2) or module load
reaches nothing outside. The stand-ins' socket is a file of the host's folder, so the
stand-ins still answer and the server outside records their calls.

The mounts are one table per host (``sandbox.fstab``, written by :func:`write_table`),
made by one ``mount --all``: a command costs a few process starts more than an unconfined
one. Where the kernel gives no such namespaces, :func:`available` is False and no host is
made (:class:`NoSandbox`): the commands would run on this machine itself.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.simhost.model import SHM_DIR

# What the host sees of this machine, read-only (those that exist here).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Secrets of /etc, hidden: a file by /dev/null, a folder by an empty one.
HIDDEN = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/munge",
    "/etc/ssl/private",
)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
PRIVATE = ("/tmp", "/var/tmp")  # noqa: S108 (empty tmpfs mounts of the sandbox's own)
SCRATCH = ("home", "tmp", "lock")  # of the host's folder, writable; shm/ is /dev/shm
UNSHARE = (
    "unshare",
    "--user",
    "--map-root-user",
    "--mount",
    "--pid",
    "--net",
    "--fork",
    "--kill-child",
    "--mount-proc",
    "--",
)


class NoSandbox(RunbookRunnerError):
    """This machine gives no user and mount namespaces: the practice host is not made."""

    def __init__(self) -> None:
        super().__init__(
            "the practice host needs its own user, mount, PID and network namespaces "
            "(unshare), which this machine does not allow: nothing was run (a runbook's "
            "commands would run on this machine itself)"
        )


def _field(path: str) -> str:
    """A path as an fstab field (octal escapes, as libmount reads them)."""
    for char in "\\ \t\n":
        path = path.replace(char, f"\\{ord(char):03o}")
    return path


def table(
    folder: Path,
    system: Iterable[str],
    hidden: Iterable[tuple[str, bool]],
    readable: Iterable[Path],
    devices: Iterable[str] = DEVICES,
) -> str:
    """The host's mount table (fstab lines, made in this order under ``folder/root``):
    the ``system`` paths and the ``readable`` folders read-only, each ``hidden`` (path,
    is a folder) masked, the devices, a private /tmp and /var/tmp, the host's folder
    read-only with its scratch writable, and /proc."""
    root = str(folder / "root")

    def line(source: str | Path, target: str | Path, kind: str, options: str) -> str:
        return f"{_field(str(source))} {_field(root + str(target))} {kind} {options} 0 0"

    lines = [line(root, "", "none", "bind,ro")]  # a mount of its own, for pivot_root
    lines += [line(path, path, "none", "bind,ro,X-mount.mkdir") for path in system]
    for path, is_folder in hidden:
        if is_folder:
            lines.append(line("rbr-hidden", path, "tmpfs", "ro,mode=755"))
        else:
            lines.append(line("/dev/null", path, "none", "bind,ro"))
    lines += [line(f"/dev/{name}", f"/dev/{name}", "none", "bind") for name in devices]
    lines.append(line(folder / "shm", SHM_DIR, "none", "bind,X-mount.mkdir"))
    for private in PRIVATE:
        lines.append(line("rbr-tmp", private, "tmpfs", "mode=1777,nosuid,nodev,X-mount.mkdir"))
    lines += [line(path, path, "none", "bind,ro,X-mount.mkdir") for path in readable]
    lines.append(line(folder, folder, "none", "bind,ro,X-mount.mkdir"))
    lines += [line(folder / s, folder / s, "none", "bind") for s in (*SCRATCH, "shm")]
    lines.append(line("proc", "/proc", "proc", "nosuid,nodev,noexec,X-mount.mkdir"))
    return "\n".join(lines) + "\n"


def write_table(folder: Path, readable: Iterable[Path] = ()) -> None:
    """Write the host's ``sandbox.fstab`` and its ``root/``: the folders and files that
    its mounts cover, made here once rather than by each command (its root is read-only).
    ``readable``: folders the stand-ins need beside the system's (their programs)."""
    system = [path for path in SYSTEM if os.path.isdir(path)]
    hidden = [(path, os.path.isdir(path)) for path in HIDDEN if os.path.lexists(path)]
    shown = [path for path in _outermost(readable) if not _under(path, system)]
    devices = [name for name in DEVICES if os.path.exists(f"/dev/{name}")]
    root = folder / "root"
    points = [*system, "/.old", SHM_DIR, *PRIVATE, "/proc", *shown, folder]
    for point in points:
        (root / str(point).lstrip("/")).mkdir(parents=True, exist_ok=True)
    for name in devices:
        (root / "dev" / name).touch()
    (folder / "sandbox.fstab").write_text(table(folder, system, hidden, shown, devices))


def _under(path: Path, folders: Iterable[str | Path]) -> bool:
    return any(path == Path(f) or Path(f) in path.parents for f in folders)


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The paths, absolute and resolved, without those inside another."""
    resolved = sorted({Path(os.path.realpath(p)) for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in resolved:
        if not _under(path, kept):
            kept.append(path)
    return kept


# $1 the root, $2 its table, $3 how the login shell is started, $4 the command.
_SCRIPT = (
    'mount --all --fstab "$2" && cd "$1" && pivot_root . .old && umount -l /.old && cd "$HOME"'
    ' || { echo "rbr-sim: the sandbox could not be made" >&2; exit 126; }; l=$3; shift 3; eval "$l"'
)


def argv(folder: Path, shell: str, login: str, command: str) -> list[str]:
    """What runs ``command`` in the sandbox of the host whose folder is ``folder``:
    ``shell`` makes the sandbox, then ``login`` (shell words, "$1" being the command)
    runs the command."""
    fstab = str(folder / "sandbox.fstab")
    return [*UNSHARE, shell, "-c", _SCRIPT, "rbr-sim", str(folder / "root"), fstab, login, command]


@functools.cache
def available() -> bool:
    """Whether a sandbox can be made here (probed once: a throwaway host runs ``echo``)."""
    try:
        with tempfile.TemporaryDirectory(prefix="runbook-sandbox-") as scratch:
            folder = Path(scratch)
            for sub in (*SCRATCH, "shm"):
                (folder / sub).mkdir()
            write_table(folder)
            probe = subprocess.run(
                argv(folder, "/bin/sh", 'exec /bin/sh -c "$1"', "echo ok"),
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(folder / "home")},
                capture_output=True,
                timeout=10,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0 and probe.stdout == b"ok\n"
