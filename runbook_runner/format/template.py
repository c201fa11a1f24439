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
# (which the shell parses again, or not at all), not as the command's name (the value
# would run), and not after ``\`` or ``$`` (``\'`` and ``$'`` change what the quote
# means). Glued to ordinary characters it is still one word: ``--opt='a b'`` is
# ``--opt=a b`` to the command.

_GLUE_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@%+")
_BEFORE_OK = _GLUE_OK | frozenset(" \t\n;&|<>")
_AFTER_OK = _GLUE_OK | frozenset(" \t\n;&|<>)")
_OPERATORS = frozenset(";&|()\n")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "exec"}
)
# Commands that parse their arguments as shell code again: a quoted value is not safe there.
_REPARSERS = frozenset({"eval", "ssh", "su"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_UNQUOTE = str.maketrans("", "", "'\"\\")
_SHELL_C = re.compile(r"-[a-zA-Z]*c[a-zA-Z]*$")  # sh -c SCRIPT, bash -ec SCRIPT
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WORD_END = re.compile(r"[^\s;&|()<>]*")
_FIX = "write it as a whole word of its own, outside any quotes, e.g. echo GPU {{ item.name }}"


def shell_problems(source: str) -> list[tuple[int, str]]:
    """(offset, message) for each placeholder whose quoted value would not stay one word.

    A small tokenizer of POSIX sh that knows the quoting context at each offset.
    """
    spans = {m.start(): m.end() for m in PLACEHOLDER.finditer(source)}
    problems: list[tuple[int, str]] = []
    stack: list[str] = []  # enclosing contexts: ' " $( ` ${ (
    heredocs: list[tuple[str, bool]] = []  # pending here-document delimiters (word, strip tabs)
    in_word = False  # inside a word at the top level
    word_is_command = False
    command_position = True
    words: list[str] = []  # of the simple command being read, at the top level
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

    while i < n:
        c = source[i]
        if i in spans:
            end = spans[i]
            before = source[i - 1] if i > 0 else " "
            after = source[end] if end < n else " "
            if stack:
                problems.append(
                    (i, f"placeholder {context_name()}: its value could run as a command; {_FIX}")
                )
            elif not in_word and command_position:
                problems.append(
                    (
                        i,
                        "placeholder as the command's name: its value would run; name the command in the runbook",
                    )
                )
            elif in_word and word_is_command:
                problems.append(
                    (
                        i,
                        "placeholder in the command's name: its value would run; name the command in the runbook",
                    )
                )
            elif before not in _BEFORE_OK or after not in _AFTER_OK:
                glued = before if before not in _BEFORE_OK else after
                problems.append(
                    (
                        i,
                        f"placeholder glued to {glued!r}: the value would not stay one literal word; {_FIX}",
                    )
                )
            elif (reparser := _reparser(words if in_word else [*words, ""])) is not None:
                problems.append(
                    (
                        i,
                        f"placeholder in what {reparser!r} runs as shell code: its value would "
                        "be parsed again; pass it as an argument (sh -c 'cmd \"$1\"' _ {{ x }})",
                    )
                )
            if not in_word:
                in_word, word_is_command = True, False
                words.append(source[i:end])
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
            in_word = True
            words.append(text)
            if command_position and (text in _KEYWORDS or _ASSIGNMENT.match(source, i)):
                word_is_command = False
            else:
                word_is_command = command_position and c not in "<>"
                if c not in "<>":
                    command_position = False
        if c == "\\":
            if not stack and not in_word:
                in_word, word_is_command = True, command_position
            i = _advance(i, 2, spans)
            continue
        if c in " \t" and not stack:
            in_word = False
            i += 1
            continue
        if c == "\n" and not stack:
            in_word, command_position = False, True
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
        if source.startswith("<<", i) and not source.startswith("<<<", i) and not stack:
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
            in_word = False
            i = j + len(marker)
            continue
        if c in _OPERATORS and not stack:
            in_word = False
            # "(" starts a command only where a command may start; after a command's words
            # it is bash's array syntax (or a syntax error): the same command goes on, so
            # that `eval A=()printf {{ v }}` is still seen as eval's.
            if c in ";&|" or (c == "(" and command_position):
                command_position = True
                words.clear()
            i += 1
            continue
        if c in "<>" and not stack:
            in_word = False
        i += 1
    return problems


def _reparser(words: list[str]) -> str | None:
    """The command among ``words`` that would parse the last word as shell code, if any.

    ``words`` ends with the word the placeholder is in. ``eval``, ``ssh`` and ``su`` parse
    all their arguments again; a shell parses its first operand after ``-c`` (options may
    come between: ``sh -c -e X``). Wrappers (sudo, timeout, env) are looked through by
    checking every word of the command; a command named at run time (``$X``) is refused.
    """
    before = [word for word in words[:-1] if not _ASSIGNMENT.match(word)]
    if before and any(mark in before[0] for mark in "$`"):
        return before[0]  # a command named at run time could be eval or a shell
    # e"v"al, \eval and ''eval are eval: quotes and backslashes go before the name is read.
    plain = [word.translate(_UNQUOTE) for word in words]
    names = [word.rsplit("/", 1)[-1] for word in plain[:-1]]
    for name in names:
        if name in _REPARSERS:
            return name
    for k, name in enumerate(names):
        if name not in _SHELLS:
            continue
        rest = plain[k + 1 :]
        flags = [i for i, word in enumerate(rest[:-1]) if _SHELL_C.match(word)]
        if not flags:
            continue
        i = flags[0] + 1
        while i < len(rest) - 1 and rest[i][:1] in ("-", "+"):
            i += 2 if rest[i] in ("-o", "+o") else 1
        if i == len(rest) - 1:
            return name
        # The script is an earlier word; but one that holds an unquoted expansion ($x,
        # `cmd`) may expand to nothing and vanish, and the placeholder's word moves up into
        # the script's place: sh -c $unset {{ x }}.
        original = words[k + 1 :]
        if any(_may_vanish(word) for word in original[i:-1]):
            return name
    return None


def _may_vanish(word: str) -> bool:
    """Whether a shell word holds an unquoted expansion (``$x``, ``$(..)``, backticks):
    such a word may expand to nothing and be dropped from the command."""
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
        elif quote is None and c in "$`":
            return True
    return False


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
