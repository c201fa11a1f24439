"""Command templates: ``{{ name }}`` placeholders filled with shell-quoted values.

Every value that enters a command goes through :func:`quote`, here and
nowhere else, so ``a b; touch /tmp/pwned`` stays one literal argument.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PLACEHOLDER = re.compile(
    r"\{\{\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\s*\}\}"
)
_LOOSE_BRACES = re.compile(r"\{\{|\}\}")


def quote(value: Any) -> str:
    """The one place values become shell words."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    return shlex.quote(str(value))


@dataclass(frozen=True)
class Placeholder:
    name: str
    offset: int


@dataclass(frozen=True)
class Template:
    """A command with placeholders, parsed at load time."""

    source: str

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        return tuple(Placeholder(m["name"], m.start()) for m in PLACEHOLDER.finditer(self.source))

    def malformed(self) -> int | None:
        """Offset of a ``{{`` or ``}}`` that is not part of a placeholder."""
        stripped = PLACEHOLDER.sub(lambda m: " " * len(m.group()), self.source)
        loose = _LOOSE_BRACES.search(stripped)
        return loose.start() if loose else None

    def unsafe_placeholders(self) -> list[tuple[int, str]]:
        """Each placeholder that is not a whole shell word, with why (see :func:`shell_problems`)."""
        return shell_problems(self.source)

    def fill(self, lookup: Callable[[str], Any]) -> str:
        """The text with values inserted as they are: for text parsed here, never for a shell."""

        def value(match: re.Match[str]) -> str:
            found = lookup(match["name"])
            return "" if found is None else str(found)

        return PLACEHOLDER.sub(value, self.source)

    def render(
        self, lookup: Callable[[str], Any], mask: Callable[[str], bool] | None = None
    ) -> str:
        """The command with each placeholder replaced by its quoted value.

        ``mask`` names the placeholders to show as ``***`` (secrets in output).
        """

        def substitute(match: re.Match[str]) -> str:
            if mask is not None and mask(match["name"]):
                return "'***'"
            return quote(lookup(match["name"]))

        return PLACEHOLDER.sub(substitute, self.source)


# -- where a placeholder sits in the shell's grammar -------------------------------------
#
# A value goes in as ``shlex.quote(value)``: either only characters that are safe
# unquoted, or one single-quoted string (``'`` written as ``'"'"'``). That is one
# literal word exactly where the shell reads a *new* quote unquoted: at the top level
# of the command, not inside '...' or "..." (where the quotes would nest and the value
# would run), not inside $(...), `...`, ${...}, a comment or a here-document body
# (which the shell parses again, or not at all), not after ``\`` or ``$`` (``\'`` and
# ``$'`` change what the quote means). Glued to ordinary characters it is still one
# word: ``--opt='a b'`` is ``--opt=a b`` to the command.
#
# One literal word is not yet data: the command it is handed to may run it (``trap``,
# ``timeout``, ``xargs``, ``awk``, ``find -exec``, ``sudo``, ...). So the rule is by
# construction, not by a list of commands that run their arguments: a placeholder may
# stand only as an operand of a command from DATA_COMMANDS (commands that never run an
# operand or an option's value), with the extra rules of printf (after the format) and
# test (after an operator), or after ``--`` for a command of AFTER_DOUBLE_DASH.

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
_REDEFINERS = frozenset(
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
_LOOKUP_VARIABLES = re.compile(
    r"(?:PATH|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|BASH_LOADABLES_PATH|LD_[A-Z_]*)\+?="
)
_SYSTEM_DIRS = ("/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/")

_GLUE_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@%+")
_BEFORE_OK = _GLUE_OK | frozenset(" \t\n;&|<>")
_AFTER_OK = _GLUE_OK | frozenset(" \t\n;&|<>)")
_OPERATORS = frozenset(";&|()\n")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time", "exec"}
)
_UNQUOTE = str.maketrans("", "", "'\"\\")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_WORD_END = re.compile(r"[^\s;&|()<>]*")
_FIX = "write it as a whole word of its own, outside any quotes, e.g. echo GPU {{ item.name }}"
_DATA_FIX = (
    "hand the value only to a command that takes it as data, e.g. kill -TERM {{ item.pid }}, "
    "or run the other command on a literal (see 'Placeholders' in the README)"
)


def allowed_commands() -> list[str]:
    """Every command a placeholder may be an operand of, for messages and the README."""
    return sorted(DATA_COMMANDS | FORMAT_COMMANDS | TEST_COMMANDS | AFTER_DOUBLE_DASH)


@dataclass
class _Word:
    """One word of the simple command being read, at the top level."""

    start: int
    kind: str  # "keyword", "assign", "redirect" (a redirection's target), "fd", "word"
    end: int = -1  # set when the word ends
    command: bool = False  # the command's name
    placeholders: int = 0


def shell_problems(source: str) -> list[tuple[int, str]]:
    """(offset, message) for each placeholder whose value could be anything but data.

    A small tokenizer of POSIX sh that knows the quoting context at each offset and the
    words of each simple command; the policy (which command a placeholder is an operand
    of) is :func:`_operand_problem`.
    """
    spans = {m.start(): m.end() for m in PLACEHOLDER.finditer(source)}
    problems: list[tuple[int, str]] = []
    accepted: list[int] = []  # placeholders with no problem of their own
    redefinitions: list[str] = []  # what makes a command name run something else
    stack: list[str] = []  # enclosing contexts: ' " $( ` ${ (
    heredocs: list[tuple[str, bool]] = []  # pending here-document delimiters (word, strip tabs)
    in_word = False  # inside a word at the top level
    command_position = True
    pending_redirect = False  # the next word is a redirection's target
    words: list[_Word] = []  # of the simple command being read, at the top level
    i, n = 0, len(source)

    def context_name() -> str:
        names = {
            "'": "inside single quotes",
            '"': "inside double quotes",
            "$(": "inside a $(...) command substitution",
            "`": "inside a `...` command substitution",
            "${": "inside a ${...} expansion",
            "(": "inside a $(...) command substitution",
        }
        return names.get(stack[-1], "inside quotes")

    def start_word(at: int, text: str) -> _Word:
        nonlocal command_position, pending_redirect
        if pending_redirect:
            word = _Word(at, "redirect")
            pending_redirect = False
        elif command_position and text in _KEYWORDS:
            word = _Word(at, "keyword")
        elif command_position and _ASSIGNMENT.match(text):
            word = _Word(at, "assign")
            if _LOOKUP_VARIABLES.match(text):
                redefinitions.append(text.split("=", 1)[0] + "=")
        else:
            word = _Word(at, "word", command=command_position)
            command_position = False
        words.append(word)
        return word

    def end_word(at: int) -> None:
        nonlocal in_word
        if in_word and words:
            words[-1].end = at
            if words[-1].command:
                name = _command_name(source[words[-1].start : at])
                if name in _REDEFINERS:
                    redefinitions.append(name)
        in_word = False

    while i < n:
        c = source[i]
        if i in spans:
            end = spans[i]
            before = source[i - 1] if i > 0 else " "
            after = source[end] if end < n else " "
            problem: str | None = None
            if not stack and not in_word:
                start_word(i, source[i:end])
                in_word = True
            word = words[-1] if words and not stack else None
            if stack:
                problem = f"placeholder {context_name()}: its value could run as a command; {_FIX}"
            elif word is not None and word.command and word.start == i:
                problem = "placeholder as the command's name: its value would run; name the command in the runbook"
            elif word is not None and word.command:
                problem = "placeholder in the command's name: its value would run; name the command in the runbook"
            elif before not in _BEFORE_OK or after not in _AFTER_OK:
                glued = before if before not in _BEFORE_OK else after
                problem = f"placeholder glued to {glued!r}: the value would not stay one literal word; {_FIX}"
            elif word is not None and word.kind == "assign":
                problem = (
                    "placeholder in a variable's assignment: a variable's value can be run "
                    f"later, or steer the command it is set for; {_DATA_FIX}"
                )
            elif word is not None and word.kind == "redirect":
                problem = (
                    "placeholder as a redirection's file: the value would choose what the "
                    f"shell opens (bash opens /dev/tcp/HOST/PORT); {_DATA_FIX}"
                )
            elif word is not None:
                problem = _operand_problem(source, words)
            if problem is not None:
                problems.append((i, problem))
            else:
                accepted.append(i)
            if word is not None:
                word.placeholders += 1
            i = end
            continue
        top = stack[-1] if stack else None
        if top == "'":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if top == "`":
            if c == "\\":
                i = _advance(i, 2, spans)
            else:
                if c == "`":
                    stack.pop()
                i += 1
            continue
        if top == '"':
            if c == "\\":
                i = _advance(i, 2, spans)
            elif c == '"':
                stack.pop()
                i += 1
            elif source.startswith("$(", i):
                stack.append("$(")
                i = _advance(i, 2, spans)
            elif source.startswith("${", i) and i + 1 not in spans:
                stack.append("${")
                i = _advance(i, 2, spans)
            elif c == "`":
                stack.append("`")
                i += 1
            else:
                i += 1
            continue
        # unquoted: the top level, or inside $( ${ (
        if not stack and source.startswith("<<", i) and not source.startswith("<<<", i):
            end_word(i)
            j = i + 2
            strip = j < n and source[j] == "-"
            j += strip
            while j < n and source[j] in " \t":
                j += 1
            delimiter = _WORD_END.match(source, j)
            marker = delimiter.group() if delimiter else ""
            heredocs.append((marker.replace("'", "").replace('"', "").replace("\\", ""), strip))
            for offset in spans:
                if i < offset < j + len(marker):
                    problems.append((offset, f"placeholder in a here-document's delimiter; {_FIX}"))
            i = j + len(marker)
            continue
        if not stack and c in "<>":
            # A redirection: a number glued before it is its file descriptor, and the next
            # word is its target (<<< here-string, >&, >>, >|, <>, <& included).
            if in_word and words and source[words[-1].start : i].isdigit():
                fd = words[-1]
                fd.kind = "fd"
                if fd.command:
                    fd.command, command_position = False, True
            end_word(i)
            i += 1
            while i < n and source[i] in "<>&|" and i not in spans:
                i += 1
            pending_redirect = True
            continue
        if not stack and not in_word and c not in " \t" and c not in _OPERATORS:
            if c == "#":  # a comment, to the end of the line
                newline = source.find("\n", i)
                stop = n if newline < 0 else newline
                for start in spans:
                    if i < start < stop:
                        problems.append(
                            (
                                start,
                                f"placeholder in a comment: a newline in its value would start a command; {_FIX}",
                            )
                        )
                i = stop
                continue
            first = _WORD_END.match(source, i)
            text = first.group() if first else ""
            nearest = min((s for s in spans if i <= s), default=n)
            start_word(i, text[: max(0, nearest - i)])
            in_word = True
        if c == "\\":
            i = _advance(i, 2, spans)
            continue
        if c in " \t" and not stack:
            end_word(i)
            i += 1
            continue
        if c == "\n" and not stack:
            end_word(i)
            command_position, pending_redirect = True, False
            words.clear()
            i += 1
            if heredocs:
                i = _skip_heredocs(source, i, heredocs, spans, problems)
                heredocs.clear()
            continue
        if c in "'\"`":
            stack.append(c)
            i += 1
            continue
        if source.startswith("$(", i) or source.startswith("<(", i) or source.startswith(">(", i):
            stack.append("$(")
            i = _advance(i, 2, spans)
            continue
        if source.startswith("${", i) and i + 1 not in spans:
            stack.append("${")
            i = _advance(i, 2, spans)
            continue
        if c == "}" and top == "${":
            stack.pop()
            i += 1
            continue
        if c == "(" and stack:
            stack.append("(")
            i += 1
            continue
        if c == ")" and stack and top in ("$(", "("):
            stack.pop()
            i += 1
            continue
        if c in _OPERATORS and not stack:
            end_word(i)
            if c == "(" and not command_position and re.match(r"\(\s*\)", source[i:]):
                redefinitions.append("a function definition")
            # "(" starts a command only where a command may start; after a command's words
            # it is bash's array syntax (or a syntax error): the same command goes on, so
            # that `eval A=()printf {{ v }}` is still seen as eval's.
            if c in ";&|" or (c == "(" and command_position):
                command_position, pending_redirect = True, False
                words.clear()
            i += 1
            continue
        i += 1
    end_word(n)
    if redefinitions and accepted:
        what = ", ".join(dict.fromkeys(redefinitions))
        for offset in accepted:
            problems.append(
                (
                    offset,
                    f"placeholder in a command that also uses {what}: that can change what a "
                    "command name runs, so no operand is sure to stay data; keep such set-up "
                    "out of a command that takes a value",
                )
            )
    problems.sort()
    return problems


def _command_name(word: str) -> str:
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


def _operand_problem(source: str, words: list[_Word]) -> str | None:
    """Why the last of ``words`` (an argument holding a placeholder) may not be data."""
    arguments = [w for w in words if w.kind == "word"]
    if not arguments or not arguments[0].command:
        return "placeholder where no command is named; name the command in the runbook"
    head = arguments[0]
    raw = source[head.start : head.end]
    if raw != "[" and not _is_fixed(raw):
        return (
            f"placeholder in an operand of a command named at run time ({raw}): it could be "
            f"one that runs its operands; {_DATA_FIX}"
        )
    name = _command_name(raw)
    if "/" in name:
        if not name.startswith(_SYSTEM_DIRS):
            return (
                f"placeholder in an operand of {raw!r}, a program outside the system "
                f"folders: it could run its operands; {_DATA_FIX}"
            )
        name = name.rsplit("/", 1)[-1]
    own = arguments[1:]
    index = len(own) - 1  # the placeholder's word among the arguments
    texts = [source[w.start : w.end] for w in own[:-1]]
    if name in DATA_COMMANDS:
        return None
    if name in FORMAT_COMMANDS:
        k = 0
        if k < len(texts) and _command_name(texts[k]) == "-v":
            k += 2
        if k < len(texts) and _command_name(texts[k]) == "--":
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
            or _command_name(texts[-1]) in ("-v", "-R")
        ):
            return (
                f"placeholder in {name!r} after {texts[-1]!r}: that word could make the value "
                "a variable's name (bash's test -v 'a[$(cmd)]' runs cmd); write the operator "
                "literally before it: test -e {{ x }}, test {{ x }} = y"
            )
        return None
    if name in AFTER_DOUBLE_DASH:
        if "--" in [_command_name(t) for t in texts] and all(_is_fixed(t) for t in texts):
            return None
        return (
            f"placeholder in an option of {name!r}, some of whose options run a program: "
            f"put it after '--' ({name} ... -- {{{{ x }}}}), where {name} reads only files"
        )
    return (
        f"placeholder in an operand of {name!r}, which is not a command known to take its "
        f"operands only as data ({', '.join(allowed_commands())}): it could run the value; "
        f"{_DATA_FIX}"
    )


def _advance(i: int, by: int, spans: dict[int, int]) -> int:
    """``i + by``, but never past the start of a placeholder."""
    for k in range(i + 1, i + by):
        if k in spans:
            return k
    return i + by


def _skip_heredocs(
    source: str,
    start: int,
    heredocs: list[tuple[str, bool]],
    spans: dict[int, int],
    problems: list[tuple[int, str]],
) -> int:
    """Past the bodies of the pending here-documents; placeholders in them are problems."""
    i = start
    for delimiter, strip in heredocs:
        while i < len(source):
            newline = source.find("\n", i)
            stop = len(source) if newline < 0 else newline
            line = source[i:stop]
            for offset in spans:
                if i <= offset < stop:
                    problems.append(
                        (
                            offset,
                            f"placeholder in a here-document: its value is not quoted there; {_FIX}",
                        )
                    )
            i = stop + 1
            if (line.lstrip("\t") if strip else line) == delimiter:
                break
    return min(i, len(source))


_EXPRESSION = re.compile(r"\{\{(?P<source>.*?)\}\}", re.S)


@dataclass(frozen=True)
class Interpolated:
    """Text with ``{{ expression }}`` parts, for messages (never for commands)."""

    source: str
    parts: tuple[str | tuple[str, Any], ...]  # literal text, or (expression source, tree)

    @classmethod
    def parse(cls, source: str) -> Interpolated:
        from runbook_runner.format import expr

        parts: list[str | tuple[str, Any]] = []
        position = 0
        for match in _EXPRESSION.finditer(source):
            parts.append(source[position : match.start()])
            text = match["source"].strip()
            parts.append((text, expr.parse(text)))
            position = match.end()
        parts.append(source[position:])
        return cls(source, tuple(p for p in parts if p != ""))

    @staticmethod
    def expressions(source: str) -> list[tuple[str, int]]:
        """Each expression's text and its offset in ``source`` (for load-time errors)."""
        return [(m["source"], m.start("source")) for m in _EXPRESSION.finditer(source)]
