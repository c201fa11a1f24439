"""Several commands as one remote script on one channel: building it, reading its output.

Pure: no I/O here. :meth:`SshTransport.run_many` sends :func:`script` and hands what came
back to :func:`parse`.

The script runs every command the way sshd would have run it alone (``sh -c COMMAND``,
under the login shell's name, stdin empty), each under its own ``timeout`` (GNU coreutils
or BusyBox: it puts the command in a process group of its own and ends that whole group
when the time is up). Each command's stdout and stderr go to files in a private temporary
folder; its exit status is written by a wrapper only when the command ended by itself, so
a missing status file means it was ended by its timeout. Commands that are not ``alone``
start together as background jobs; the ``alone`` ones run after them, one at a time.

When all have finished the script prints one line per command::

    <boundary> <index> <exit status, or - when its timeout ended it>

then ``wc -c`` of every output file (``0.o 0.e 1.o ...``), the boundary alone on a line,
and the last ``limit`` bytes of each file, raw, in that order (one ``tail`` for all). The
reader takes exactly as many bytes of each as the sizes say, so nothing a command prints
can be taken for framing: it all comes after the framing, counted. The boundary is random
per run, so not even a command that knew the format could end the framing early.
Builtins, one ``wc`` and one ``tail``: few processes on the host besides the commands.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from runbook_runner.format.template import quote

UNSUPPORTED_STATUS = 97  # the script's exit status when the host lacks timeout or mktemp
KILL_AFTER_S = 2  # after the TERM of a timeout, KILL this much later
PGID_MARK = "rbr-pgid:"
# A script's first line: its process group on stderr (the login shell is a session leader,
# sshd calls setsid, so its PID is the group to end if the command outlives its timeout).
ANNOUNCE_PGID = f"printf '%s%s\\n' {PGID_MARK} $$ >&2"


class BatchUnsupported(Exception):
    """The host cannot run the batch script (no ``timeout``/``mktemp``): run one by one."""


class BatchGarbled(Exception):
    """The script's output does not have the framing it must have."""


@dataclass(frozen=True)
class BatchCommand:
    command: str  # as given: ``sudo -n`` is added here when ``as_root`` says so
    timeout: float
    as_root: bool = False
    alone: bool = False  # must not run while another command of the set runs


@dataclass(frozen=True)
class BatchOutput:
    """What one command did, as the script reported it."""

    exit_status: int | None  # None: ended by its timeout
    stdout: bytes  # the last ``limit`` bytes
    stderr: bytes
    stdout_size: int  # all bytes written
    stderr_size: int

    @property
    def timed_out(self) -> bool:
        return self.exit_status is None


def new_boundary() -> str:
    return "rbr-" + secrets.token_hex(16)


def as_sent(command: BatchCommand, is_root: bool) -> str:
    """The command line as the host runs it: through ``sudo -n`` for root on a non-root login."""
    if command.as_root and not is_root:
        return f"sudo -n sh -c {quote(command.command)}"
    return command.command


def _seconds(value: float) -> str:
    text = f"{max(value, 0.001):.3f}".rstrip("0").rstrip(".")
    return text or "0.001"


def script(commands: list[BatchCommand], boundary: str, limit: int, is_root: bool) -> str:
    """The remote sh script that runs ``commands`` and frames what each did."""
    lines = [
        ANNOUNCE_PGID,
        f"timeout -k 1 5 true >/dev/null 2>&1 || exit {UNSUPPORTED_STATUS}",
        f"d=$(mktemp -d 2>/dev/null) || exit {UNSUPPORTED_STATUS}",
        "trap 'rm -rf \"$d\"' EXIT",
        "trap 'exit 143' TERM HUP INT",
        # The shell each command runs in, named as sshd names it (its errors say "sh: 1: ...").
        's=${SHELL:-/bin/sh}; n=${s##*/}; [ "$(command -v "$n" 2>/dev/null)" -ef "$s" ] 2>/dev/null || n=$s',
        # $0: the shell to run, $1: the command, $2: where its exit status goes; "$2.g": the
        # process group it runs in (timeout's), to end whole once timeout has given up on it.
        'w=\'read -r _ _ _ _ g _ </proc/$$/stat && echo "$g" >"$2.g"; "$0" -c "$1"; echo $? >"$2"\'',
    ]

    def job(index: int, command: BatchCommand) -> str:
        return (
            f"timeout -k {KILL_AFTER_S} {_seconds(command.timeout)} "
            f'sh -c "$w" "$n" {quote(as_sent(command, is_root))} "$d/{index}.rc" '
            f'>"$d/{index}.o" 2>"$d/{index}.e" </dev/null'
        )

    together = [(i, c) for i, c in enumerate(commands) if not c.alone]
    alone = [(i, c) for i, c in enumerate(commands) if c.alone]
    for index, command in together:
        lines.append(job(index, command) + " &")
    if together:
        lines.append("wait")
    for index, command in alone:
        lines.append(job(index, command))
    if limit < 1:
        raise ValueError("the output limit must be at least one byte")
    files = " ".join(f"{i}.o {i}.e" for i in range(len(commands)))
    indexes = " ".join(str(i) for i in range(len(commands)))
    lines += [
        # timeout's TERM ended the command's shell, not a child that ignores TERM: the group
        # of each timed-out command (never this script's own) is KILLed after the grace.
        f'k=; for i in {indexes}; do [ -f "$d/$i.rc" ] || ! read -r g <"$d/$i.rc.g" || '
        '[ "$g" = $$ ] || ! kill -0 -"$g" 2>/dev/null || k="$k -$g"; done',
        f'[ -z "$k" ] || {{ sleep {KILL_AFTER_S}; kill -KILL $k 2>/dev/null; }}',
        # Shell builtins only, then one wc and one tail for all: few processes on the host.
        f"for i in {indexes}; do "
        'r=-; [ -f "$d/$i.rc" ] && read -r r <"$d/$i.rc"; '
        f'printf \'%s %s %s\\n\' {boundary} "$i" "$r"; done',
        f'cd "$d" || exit {UNSUPPORTED_STATUS}',
        f"wc -c {files} </dev/null",
        f"printf '%s\\n' {boundary}",
        f"tail -q -c {limit} {files}",
    ]
    return "\n".join(lines) + "\n"


def deadline(commands: list[BatchCommand]) -> float:
    """How long the whole script may take: the slowest of those together, plus each alone one."""
    together = [c.timeout for c in commands if not c.alone]
    alone = [c.timeout for c in commands if c.alone]
    per_command = KILL_AFTER_S + 1
    return (
        (max(together) + per_command if together else 0.0)
        + sum(t + per_command for t in alone)
        + KILL_AFTER_S  # a timed-out command's group, KILLed after the grace
        + 5.0
    )


def parse(data: bytes, count: int, boundary: str, limit: int) -> list[BatchOutput]:
    """The framed output of :func:`script` -> one :class:`BatchOutput` per command, in order.

    First one line per command (boundary, index, exit status), then ``wc -c`` of every
    output file, then the boundary alone, then the kept tail of each file, in order.
    """
    statuses: list[int | None] = []
    position = 0
    prefix = boundary.encode() + b" "
    for index in range(count):
        end = data.find(b"\n", position)
        if end < 0 or not data.startswith(prefix, position):
            raise BatchGarbled(f"no status line for command {index}")
        fields = data[position + len(prefix) : end].split()
        if len(fields) != 2 or fields[0] != str(index).encode():
            raise BatchGarbled(f"a malformed status line for command {index}: {fields!r}")
        try:
            statuses.append(None if fields[1] == b"-" else int(fields[1]))
        except ValueError:
            raise BatchGarbled(f"a malformed status line for command {index}: {fields!r}") from None
        position = end + 1
    end = data.find(b"\n" + boundary.encode() + b"\n", position - 1)
    if end < 0:
        raise BatchGarbled("no end to the sizes")
    sizes: dict[bytes, int] = {}
    for line in data[position:end].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            sizes[parts[1]] = int(parts[0])
    position = end + len(boundary) + 2
    outputs: list[BatchOutput] = []
    for index, status in enumerate(statuses):
        kept: list[bytes] = []
        for stream in (b"o", b"e"):
            name = str(index).encode() + b"." + stream
            if name not in sizes:
                raise BatchGarbled(f"no size for {name.decode()}")
            size = min(sizes[name], limit)
            kept.append(data[position : position + size])
            if len(kept[-1]) != size:
                raise BatchGarbled(f"the output of command {index} was cut short")
            position += size
        outputs.append(
            BatchOutput(status, kept[0], kept[1], sizes[b"%d.o" % index], sizes[b"%d.e" % index])
        )
    if position != len(data):
        raise BatchGarbled(f"{len(data) - position} bytes after the last command")
    return outputs


# -- the same script, for a host that is not a real shell -----------------------------------


@dataclass(frozen=True)
class Unpacked:
    """What a script of :func:`script` asks for: its commands as sent, in order."""

    boundary: str
    limit: int
    commands: tuple[str, ...]


def unpack(text: str) -> Unpacked | None:
    """The commands of a script :func:`script` wrote, or None for any other text.

    For the simulated host, whose shell runs commands but not this script: it runs each
    command itself and answers with :func:`frame`, as a real shell would have.
    """
    if not text.startswith(ANNOUNCE_PGID):
        return None
    commands: dict[int, str] = {}
    boundary, limit = "", 0
    try:
        for words in _statements(text):
            if words[:2] == ["timeout", "-k"] and words[4:8] == ["sh", "-c", "$w", "$n"]:
                index = int(words[9].removeprefix("$d/").removesuffix(".rc"))
                commands[index] = words[8]
            elif words[:3] == ["tail", "-q", "-c"]:
                limit = int(words[3])
            elif words[:2] == ["printf", "%s\\n"] and len(words) == 3:
                boundary = words[2]
    except (ValueError, IndexError):
        return None
    if not boundary or limit < 1 or sorted(commands) != list(range(len(commands))):
        return None
    return Unpacked(boundary, limit, tuple(commands[i] for i in range(len(commands))))


def _statements(text: str) -> list[list[str]]:
    """The script's lines as words; a quoted command may span lines (it is one word)."""
    statements, pending = [], ""
    for line in text.splitlines(keepends=True):
        pending += line
        try:
            words = shlex.split(pending)
        except ValueError:  # a quote still open: the line goes on
            continue
        statements.append(words)
        pending = ""
    if pending:
        raise ValueError("an unterminated quote")
    return statements


def frame(unpacked: Unpacked, run: Callable[[str], tuple[int, bytes, bytes]]) -> bytes:
    """What the script prints when each command gives ``run(command)``: (status, out, err)."""
    done = [run(command) for command in unpacked.commands]
    head = b"".join(
        f"{unpacked.boundary} {i} {status}\n".encode() for i, (status, _, _) in enumerate(done)
    )
    sizes = b"".join(
        f"{len(out)} {i}.o\n{len(err)} {i}.e\n".encode() for i, (_, out, err) in enumerate(done)
    )
    tails = b"".join(out[-unpacked.limit :] + err[-unpacked.limit :] for _, out, err in done)
    return head + sizes + unpacked.boundary.encode() + b"\n" + tails
