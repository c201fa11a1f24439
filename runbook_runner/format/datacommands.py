"""Which commands a placeholder may be an operand of: those that take a value only as data.

One literal word is not yet data: the command it is handed to may run it (``trap``,
``timeout``, ``xargs``, ``awk``, ``find -exec``, ``sudo``, ...). So the rule is by
construction, not by a list of commands that run their arguments: a placeholder may
stand only as an operand of a command from DATA_COMMANDS (commands that never run an
operand or an option's value), with the extra rules of printf (after the format) and
test (after an operator), or after ``--`` for a command of AFTER_DOUBLE_DASH.

:mod:`runbook_runner.format.shellgrammar` finds the words of each command; this module
is the policy it asks (:func:`operand_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Commands that never run, source or re-parse any of their operands or option values:
#: a value in any of their arguments is data to them.
DATA_COMMANDS = frozenset(
    {
        "cat",
        "df",
        "du",
        "echo",
        "false",
        "fuser",
        "grep",
        "head",
        "kill",
        "ls",
        "mkdir",
        "nvidia-smi",
        "pgrep",
        "pkill",
        "ps",
        "rm",
        "rmdir",
        "stat",
        "systemctl",
        "tail",
        "touch",
        "true",
        "wc",
    }
)
#: Data after the format (``printf -v NAME`` and the format come first, written literally).
FORMAT_COMMANDS = frozenset({"printf"})
#: Data except as the operand of ``-v``/``-R`` (bash evaluates the subscript of
#: ``test -v 'a[$(cmd)]'``, which runs cmd).
TEST_COMMANDS = frozenset({"test", "["})
#: Commands whose options may run a program (``tar --checkpoint-action=exec=``,
#: ``sort --compress-program``) but whose operands after ``--`` are only file names.
AFTER_DOUBLE_DASH = frozenset({"sort", "tar"})
#: What a template must not do if it holds a placeholder: change what a command name runs
#: (a function, an alias, ``hash -p``, ``enable``, code that ``eval``, ``.``, ``trap`` or
#: ``command``/``builtin`` run in this shell) or where names are looked up.
REDEFINERS = frozenset(
    {
        ".",
        "alias",
        "builtin",
        "command",
        "enable",
        "eval",
        "function",
        "hash",
        "shopt",
        "source",
        "trap",
        "declare",
        "typeset",
        "export",
        "readonly",
        "local",
    }
)
_SYSTEM_DIRS = ("/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/")

_UNQUOTE = str.maketrans("", "", "'\"\\")
DATA_FIX = (
    "hand the value only to a command that takes it as data, e.g. kill -TERM {{ item.pid }}, "
    "or run the other command on a literal (see 'Placeholders' in the README)"
)


def allowed_commands() -> list[str]:
    """Every command a placeholder may be an operand of, for messages and the README."""
    return sorted(DATA_COMMANDS | FORMAT_COMMANDS | TEST_COMMANDS | AFTER_DOUBLE_DASH)


@dataclass
class Word:
    """One word of the simple command being read, at the top level."""

    start: int
    kind: str  # "keyword", "assign", "redirect" (a redirection's target), "fd", "word"
    end: int = -1  # set when the word ends
    command: bool = False  # the command's name
    placeholders: int = 0


def command_name(word: str) -> str:
    """The command a word names as the shell finds it (quotes and backslashes removed)."""
    return word.translate(_UNQUOTE)


def _is_fixed(word: str) -> bool:
    """Whether a word is always this one word: no expansion, glob or brace outside '...'."""
    quote: str | None = None
    escaped = False
    for c in word:
        if escaped:
            escaped = False
        elif c == "\\" and quote != "'":
            escaped = True
        elif quote is None and c in "'\"":
            quote = c
        elif c == quote:
            quote = None
        elif (quote != "'" and c in "$`") or (quote is None and c in "*?[]{}~"):
            return False
    return True


def operand_problem(source: str, words: list[Word]) -> str | None:
    """Why the last of ``words`` (an argument holding a placeholder) may not be data."""
    arguments = [w for w in words if w.kind == "word"]
    if not arguments or not arguments[0].command:
        return "placeholder where no command is named; name the command in the runbook"
    head = arguments[0]
    raw = source[head.start : head.end]
    if raw != "[" and not _is_fixed(raw):
        return (
            f"placeholder in an operand of a command named at run time ({raw}): it could be "
            f"one that runs its operands; {DATA_FIX}"
        )
    name = command_name(raw)
    if "/" in name:
        if not name.startswith(_SYSTEM_DIRS):
            return (
                f"placeholder in an operand of {raw!r}, a program outside the system "
                f"folders: it could run its operands; {DATA_FIX}"
            )
        name = name.rsplit("/", 1)[-1]
    own = arguments[1:]
    index = len(own) - 1  # the placeholder's word among the arguments
    texts = [source[w.start : w.end] for w in own[:-1]]
    if name in DATA_COMMANDS:
        return None
    if name in FORMAT_COMMANDS:
        k = 0
        if k < len(texts) and command_name(texts[k]) == "-v":
            k += 2
        if k < len(texts) and command_name(texts[k]) == "--":
            k += 1
        if (
            k >= index
            or any(w.placeholders for w in own[: k + 1])
            or not all(_is_fixed(t) for t in texts[: k + 1])
        ):
            return (
                "placeholder as printf's format (or before it): a format can write to a "
                "variable (bash's printf -v 'a[$(cmd)]' runs cmd); write the format "
                "literally first: printf '%s\\n' {{ x }}"
            )
        return None
    if name in TEST_COMMANDS:
        # Only -v and -R read their operand as a variable's name (bash evaluates an array
        # subscript there); a value that is itself an operator only reads the next word.
        # So the word before the placeholder must be one fixed word, and not -v or -R.
        previous = own[-2] if len(own) > 1 else None
        if previous is not None and (
            previous.placeholders
            or not _is_fixed(texts[-1])
            or command_name(texts[-1]) in ("-v", "-R")
        ):
            return (
                f"placeholder in {name!r} after {texts[-1]!r}: that word could make the value "
                "a variable's name (bash's test -v 'a[$(cmd)]' runs cmd); write the operator "
                "literally before it: test -e {{ x }}, test {{ x }} = y"
            )
        return None
    if name in AFTER_DOUBLE_DASH:
        if "--" in [command_name(t) for t in texts] and all(_is_fixed(t) for t in texts):
            return None
        return (
            f"placeholder in an option of {name!r}, some of whose options run a program: "
            f"put it after '--' ({name} ... -- {{{{ x }}}}), where {name} reads only files"
        )
    return (
        f"placeholder in an operand of {name!r}, which is not a command known to take its "
        f"operands only as data ({', '.join(allowed_commands())}): it could run the value; "
        f"{DATA_FIX}"
    )
