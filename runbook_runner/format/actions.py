"""What a step's command does, read once at load from its words: one :class:`Action` a step.

The list form's words are the argv as written; a command string, and the script of
``sh -c SCRIPT``, are split as the shell would (shlex) into simple commands. Each simple
command's name, after the wrappers that only run it (``sudo``, ``env``, ``exec``,
``timeout N``, ``VAR=value``, a shell keyword), and its options give a kind; a script's
action is its widest, and one unknown command makes the whole script unknown (a wrapper
script's reach cannot be bounded). The decision (plan/decide.py) and the load-time reach
checks (format/blastradius.py, format/semantics.py) read the kind; none reads the text.

Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from runbook_runner.status import Word

# What a step may declare it ``affects``, narrowest first (files: it removes files).
REACH = ("none", "process", "files", "service", "gpu", "node")


class ActionKind(Word):
    LOOK = "look"  # reads only (or writes nothing the runner tracks: echo >> file)
    SIGNAL = "signal"  # kill, pkill, killall, fuser -k, an MPS client's terminate
    FILE_REMOVAL = "file-removal"  # rm, unlink
    UNIT_STOP = "unit-stop"  # systemctl stop/restart/kill, service NAME stop
    UNIT_START = "unit-start"  # systemctl start, service NAME start
    PERSISTENCE_OFF = "persistence-off"  # nvidia-smi -pm 0: serves the reset that follows
    PERSISTENCE_ON = "persistence-on"  # nvidia-smi -pm 1
    GPU_RESET = "gpu-reset"  # nvidia-smi --gpu-reset / -r
    DRIVER_RELOAD = "driver-reload"  # rmmod, modprobe, insmod
    REBOOT = "reboot"  # reboot, shutdown, systemctl reboot
    UNKNOWN = "unknown"  # a command this table does not know


# Kinds that act on processes, GPUs, services or the node (format/semantics.py's owner rule).
REACHES_OWNED = frozenset(
    {
        ActionKind.SIGNAL,
        ActionKind.UNIT_STOP,
        ActionKind.UNIT_START,
        ActionKind.PERSISTENCE_OFF,
        ActionKind.PERSISTENCE_ON,
        ActionKind.GPU_RESET,
        ActionKind.DRIVER_RELOAD,
        ActionKind.REBOOT,
    }
)


@dataclass(frozen=True)
class Action:
    """A step's action: its kind, the least ``affects`` that covers it, and why."""

    kind: ActionKind
    needs: str = "none"  # one of REACH
    why: str = ""

    @property
    def owner_blind_without_items(self) -> bool:
        """Whether it acts on processes, services or single GPUs, which must be observed
        items to be checked for their owner (a signal always: ``fuser -k /dev/nvidia*`` is
        every CUDA process); a reboot, a driver reload or an all-GPU reset is the node's."""
        if self.kind in (ActionKind.SIGNAL, ActionKind.UNIT_STOP, ActionKind.UNIT_START):
            return True
        return self.kind in REACHES_OWNED and self.needs == "gpu"


LOOK = Action(ActionKind.LOOK)
UNKNOWN = Action(ActionKind.UNKNOWN)

_NODE_WIDE_DEVICES = re.compile(r"^/dev/nvidia(\*|ctl|-uvm)")
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "ksh", "zsh", "busybox"})
_OPERATORS = ";&|()<>"  # shlex splits words at these; a run of them is one token
_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "time"})
_ENDS = frozenset({"fi", "done", "esac"})  # end a compound command: nothing is run
_COMPOUND_HEADS = frozenset({"for", "case", "select", "function"})  # their words are no command
_WRAPPERS = frozenset({"sudo", "exec", "env", "nohup", "nice", "ionice", "setsid"})
# Tools that read, or write only what the runner does not track (echo >> a marker).
_LOOKS = frozenset(
    """
    echo printf true false : test [ cat head tail grep egrep sed awk tr cut sort uniq wc
    sleep date ps pgrep ls stat find readlink dirname basename lsmod journalctl dmesg free
    df ss curl nvidia-cuda-mps-server lspci lsof id whoami hostname uname exit return
    read cd wait set export local mkdir touch tee command
    """.split()  # noqa: SIM905
)


def action_of(run: object) -> Action:
    """The action of a step's ``run``: a command string, or the list form's words."""
    if isinstance(run, str):
        return _script(run)
    if isinstance(run, list | tuple):
        return _argv([str(word) for word in run])
    return LOOK  # no command (a wait), or one of the wrong shape (the schema says so)


def _script(text: str) -> Action:
    try:
        lexer = shlex.shlex(text.replace("\n", " ; "), posix=True, punctuation_chars=_OPERATORS)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return UNKNOWN
    commands: list[list[str]] = [[]]
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
        elif set(token) <= set(_OPERATORS) and ("<" in token or ">" in token):
            skip_next = True  # a redirection: the next word is its file
        elif set(token) <= set(_OPERATORS):
            commands.append([])  # ; && || | & ( ) and the like: the next command begins
        elif token in ("!", "{", "}") and not commands[-1]:
            pass  # a negation or a group around the command: not its name
        else:
            commands[-1].append(token)
    return _widest([_argv(words) for words in commands if words])


def _widest(actions: Sequence[Action]) -> Action:
    if any(a.kind is ActionKind.UNKNOWN for a in actions):
        return UNKNOWN
    acting = [a for a in actions if a.kind is not ActionKind.LOOK]
    if not acting:
        return LOOK
    return max(acting, key=lambda a: REACH.index(a.needs))  # the first of the widest


def _name(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _argv(words: list[str]) -> Action:
    """One simple command's action."""
    while words:
        name = _name(words[0])
        if "=" in words[0] and not words[0].startswith("="):
            words = words[1:]  # VAR=value
        elif name in _KEYWORDS or name in _WRAPPERS:
            words = words[1:] if name != "env" else [w for w in words[1:] if "=" not in w]
            while name in ("sudo", "nice", "ionice") and words and words[0].startswith("-"):
                words = words[1:]
        elif name == "timeout":
            words = [w for w in words[1:] if not w.startswith("-")][1:]  # its duration
        else:
            break
    if not words:
        return LOOK
    name, args = _name(words[0]), words[1:]
    if name in _ENDS or name in _COMPOUND_HEADS:
        return LOOK
    if name in _SHELLS and "-c" in args[:2]:
        script = args[args.index("-c") + 1 : args.index("-c") + 2]
        return _script(script[0]) if script else UNKNOWN
    rule = _RULES.get(name)
    if rule is not None:
        return rule(args)
    return LOOK if name in _LOOKS else UNKNOWN


def _kill(args: list[str]) -> Action:
    if args[:1] == ["-0"]:
        return LOOK  # asks whether a process lives
    return Action(ActionKind.SIGNAL, "process")


def _fuser(args: list[str]) -> Action:
    if not any(
        a == "-k" or (a.startswith("-") and not a.startswith("--") and "k" in a) for a in args
    ):
        return LOOK
    if any(_NODE_WIDE_DEVICES.match(a) for a in args):
        why = "/dev/nvidiactl and /dev/nvidia-uvm are held by every CUDA process of the node"
        return Action(ActionKind.SIGNAL, "node", why)
    return Action(ActionKind.SIGNAL, "process")


def _systemctl(args: list[str]) -> Action:
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("stop", "restart", "kill", "try-restart", "reload-or-restart"):
        return Action(ActionKind.UNIT_STOP, "service", "it stops a service")
    if verb == "start":
        return Action(ActionKind.UNIT_START, "service", "it starts a service")
    if verb in ("reboot", "poweroff", "halt", "kexec"):
        return Action(ActionKind.REBOOT, "node", "a reboot reaches every GPU")
    if verb in ("is-active", "is-failed", "is-enabled", "status", "show", "cat", "list-units"):
        return LOOK
    return UNKNOWN


def _service(args: list[str]) -> Action:
    return _systemctl(args[1:2])


def _nvidia_smi(args: list[str]) -> Action:
    one_gpu = any(a in ("-i", "--id") or a.startswith("--id=") for a in args)
    if any(a in ("-r", "--gpu-reset") for a in args):
        if one_gpu:
            return Action(ActionKind.GPU_RESET, "gpu", "it resets a GPU")
        return Action(ActionKind.GPU_RESET, "node", "a reset without -i resets every GPU")
    for index, arg in enumerate(args):
        if arg in ("-pm", "--persistence-mode") or arg.startswith("--persistence-mode="):
            value = arg.partition("=")[2] or (args[index + 1] if index + 1 < len(args) else "")
            kind = (
                ActionKind.PERSISTENCE_OFF
                if value in ("0", "DISABLED")
                else ActionKind.PERSISTENCE_ON
            )
            if one_gpu:
                return Action(kind, "gpu", "it changes a GPU's persistence mode")
            return Action(kind, "node", "without -i it changes every GPU's persistence mode")
    return LOOK


def _driver(args: list[str]) -> Action:
    return Action(ActionKind.DRIVER_RELOAD, "node", "a driver reload or a reboot reaches every GPU")


def _reboot(args: list[str]) -> Action:
    return Action(ActionKind.REBOOT, "node", "a driver reload or a reboot reaches every GPU")


def _remove(args: list[str]) -> Action:
    return Action(ActionKind.FILE_REMOVAL, "files", "it removes files")


def _mps_control(args: list[str]) -> Action:
    return Action(ActionKind.SIGNAL, "process")  # terminate_client, quit: ends processes


_RULES = {
    "kill": _kill,
    "pkill": _kill,
    "killall": _kill,
    "fuser": _fuser,
    "systemctl": _systemctl,
    "service": _service,
    "nvidia-smi": _nvidia_smi,
    "rmmod": _driver,
    "modprobe": _driver,
    "insmod": _driver,
    "reboot": _reboot,
    "shutdown": _reboot,
    "poweroff": _reboot,
    "halt": _reboot,
    "rm": _remove,
    "unlink": _remove,
    "nvidia-cuda-mps-control": _mps_control,
}
