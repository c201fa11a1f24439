"""The utilities the drill's simulated shell knows besides the simulator's commands.

echo, printf, grep, head, tail, wc, cat, true/false, exit, id, sleep (simulated time),
kill (simulated processes), sudo, sh -c and test.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from runbook_runner.simhost import render
from runbook_runner.simhost.shell import _Exit

if TYPE_CHECKING:
    from runbook_runner.simhost.shell import Shell

Utility = Callable[["Shell", list[str], str], int]


def _echo(shell: Shell, args: list[str], stdin: str) -> int:
    newline = True
    if args[:1] == ["-n"]:
        newline, args = False, args[1:]
    shell.env.out(" ".join(args) + ("\n" if newline else ""))
    return 0


def _printf(shell: Shell, args: list[str], stdin: str) -> int:
    if not args:
        return 1
    fmt, values = args[0].replace("\\n", "\n").replace("\\t", "\t"), args[1:]
    count = max(1, fmt.count("%s"))
    chunks = [values[i : i + count] for i in range(0, max(len(values), 1), count)] or [[]]
    for chunk in chunks:
        padded = chunk + [""] * (count - len(chunk))
        shell.env.out(
            fmt.replace("%%", "\0").replace("%s", "{}").format(*padded).replace("\0", "%")
        )
    return 0


def _grep(shell: Shell, args: list[str], stdin: str) -> int:
    flags = {a for a in args if a.startswith("-")}
    patterns = [a for a in args if not a.startswith("-")]
    if not patterns:
        shell.env.err("grep: no pattern\n")
        return 2
    regex = re.compile(patterns[0], re.I if "-i" in flags else 0)
    invert = "-v" in flags
    matching = [line for line in stdin.splitlines() if bool(regex.search(line)) != invert]
    if "-c" in flags:
        shell.env.out(f"{len(matching)}\n")
    elif "-q" not in flags:
        shell.env.out("".join(line + "\n" for line in matching))
    return 0 if matching else 1


def _count(args: list[str], default: int = 10) -> int:
    for i, arg in enumerate(args):
        if arg == "-n" and i + 1 < len(args):
            return int(args[i + 1])
        if re.fullmatch(r"-n?\d+", arg):
            return int(arg.lstrip("-n"))
    return default


def _head(shell: Shell, args: list[str], stdin: str) -> int:
    shell.env.out("".join(line + "\n" for line in stdin.splitlines()[: _count(args)]))
    return 0


def _tail(shell: Shell, args: list[str], stdin: str) -> int:
    lines = stdin.splitlines()
    count = _count(args)
    shell.env.out("".join(line + "\n" for line in (lines[-count:] if count else [])))
    return 0


def _wc(shell: Shell, args: list[str], stdin: str) -> int:
    shell.env.out(f"{len(stdin.splitlines())}\n")
    return 0


def _cat(shell: Shell, args: list[str], stdin: str) -> int:
    """stdin, /proc/meminfo from the model, or the files a state file gives."""
    for path in args or ["-"]:
        if path == "-":
            shell.env.out(stdin)
        elif path == "/proc/meminfo":
            shell.env.out(render.meminfo(shell.env.host))
        elif path in shell.env.host.files:
            shell.env.out(shell.env.host.files[path])
        else:
            shell.env.err(f"cat: {path}: not simulated\n")
            return 1
    return 0


def _cut(shell: Shell, args: list[str], stdin: str) -> int:
    """cut -d C -f N (one field)."""
    delimiter, number = "\t", 1
    for i, arg in enumerate(args):
        if arg.startswith("-d"):
            delimiter = arg[2:] or (args[i + 1] if i + 1 < len(args) else "\t")
        if arg.startswith("-f"):
            number = int(arg[2:] or args[i + 1])
    for line in stdin.splitlines():
        parts = line.split(delimiter)
        shell.env.out((parts[number - 1] if number <= len(parts) else "") + "\n")
    return 0


def _rm(shell: Shell, args: list[str], stdin: str) -> int:
    from runbook_runner.simhost.commands import rm

    return rm(shell.env, args)


def _true(shell: Shell, args: list[str], stdin: str) -> int:
    return 0


def _false(shell: Shell, args: list[str], stdin: str) -> int:
    return 1


def _exit(shell: Shell, args: list[str], stdin: str) -> int:
    raise _Exit(int(args[0]) if args else int(shell.vars.get("?", "0")))


def _id(shell: Shell, args: list[str], stdin: str) -> int:
    if "-u" in args and "-n" not in "".join(args):
        shell.env.out("0\n")
    elif "-un" in args or ("-u" in args and "-n" in args):
        shell.env.out("root\n")
    else:
        shell.env.out("uid=0(root) gid=0(root) groups=0(root)\n")
    return 0


def _sleep(shell: Shell, args: list[str], stdin: str) -> int:
    clock = getattr(shell.env.procs, "clock", None)
    if clock is not None and args:
        clock.sleep(float(args[0].rstrip("s")))
    return 0


def _kill(shell: Shell, args: list[str], stdin: str) -> int:
    signum: int = signal.SIGTERM
    targets = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-s" and rest:
            name = rest.pop(0)
            signum = _signal(name)
        elif arg == "--":
            targets += rest
            break
        elif re.fullmatch(r"-[A-Z]+\d*|-\d+", arg) and not targets:
            signum = _signal(arg[1:])
        else:
            targets.append(arg)
    status = 0
    for target in targets:
        if not target.lstrip("-").isdigit():
            shell.env.err(f"kill: {target}: arguments must be process IDs\n")
            return 1
        if int(target) < 0 or not shell.env.procs.signal(int(target), signum):
            shell.env.err(f"kill: ({target}) - No such process\n")
            status = 1
    return status


def _signal(name: str) -> int:
    if name.isdigit():
        return int(name)
    return int(getattr(signal, name if name.startswith("SIG") else "SIG" + name))


def _sudo(shell: Shell, args: list[str], stdin: str) -> int:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        if rest.pop(0) in ("-u", "-g") and rest:
            rest.pop(0)
    return shell.call(rest, stdin) if rest else 1


def _sh(shell: Shell, args: list[str], stdin: str) -> int:
    if len(args) >= 2 and args[0] == "-c":
        from runbook_runner.simhost.shell import Shell

        inner = Shell(shell.env, pid=int(shell.vars["$"]) + 1, utilities=shell.utilities)
        inner.calls = shell.calls
        return inner.run(args[1])
    shell.env.err("sh: only 'sh -c SCRIPT' is simulated\n")
    return 2


def _test(shell: Shell, args: list[str], stdin: str) -> int:
    if args and args[-1] == "]":
        args = args[:-1]
    if len(args) == 2 and args[0] == "-e":
        return 0 if any(args[1] == s.path for s in shell.env.host.shm) else 1
    if len(args) == 2 and args[0] in ("-z", "-n"):
        return 0 if (args[1] == "") == (args[0] == "-z") else 1
    if len(args) == 3:
        a, op, b = args
        numeric = {
            "-eq": int.__eq__,
            "-ne": int.__ne__,
            "-lt": int.__lt__,
            "-le": int.__le__,
            "-gt": int.__gt__,
            "-ge": int.__ge__,
        }
        if op in numeric:
            return 0 if numeric[op](int(a), int(b)) else 1
        if op in ("=", "=="):
            return 0 if a == b else 1
        if op == "!=":
            return 0 if a != b else 1
    return 2


UTILITIES: dict[str, Utility] = {
    "echo": _echo,
    "printf": _printf,
    "grep": _grep,
    "head": _head,
    "tail": _tail,
    "wc": _wc,
    "cat": _cat,
    "cut": _cut,
    "rm": _rm,
    "true": _true,
    ":": _true,
    "false": _false,
    "exit": _exit,
    "id": _id,
    "sleep": _sleep,
    "kill": _kill,
    "sudo": _sudo,
    "sh": _sh,
    "test": _test,
    "[": _test,
}
