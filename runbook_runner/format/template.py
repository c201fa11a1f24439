"""Commands: a literal string, or a list of words with ``{{ name }}`` placeholders.

Two forms, as Ansible has ``shell`` and ``command``:

- a **string** (``run: fuser -v /dev/nvidia* 2>&1``) is sent as written: pipelines, loops
  and redirections are fine, and it holds no placeholder (the loader refuses one, with the
  list form to write instead);
- a **list of words** (``run: [kill, -TERM, "{{ item.pid }}"]``): each element is one word
  on the host, whatever bytes a value holds. Each word is quoted once, by :func:`quote`,
  here and nowhere else, when the line is rendered to be sent.

In the list form a value can never be a command (no placeholder in the first word, nor in
a word that a command runs as code: ``sh -c`` SCRIPT, ``eval``, ``sudo``, ``xargs``...),
never shell syntax (it is quoted), and never an option of the command: a value that begins
with ``-`` where the command reads options (before a ``--`` word) is refused when the
command is rendered to be sent (:class:`ValueRefused`), and a parameter's value already
when it is given (:meth:`Template.option_placeholders`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runbook_runner.errors import RunbookRunnerError

__all__ = [
    "PLACEHOLDER",
    "Interpolated",
    "Placeholder",
    "Template",
    "ValueRefused",
    "list_form_of",
    "quote",
    "word_problems",
]

PLACEHOLDER = re.compile(
    r"\{\{\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\s*\}\}"
)
_LOOSE_BRACES = re.compile(r"\{\{|\}\}")

# Commands that run a word of theirs as code, or the rest of their words as a command: a
# placeholder in their words could be a command. (A shell's ``-c`` is allowed when the
# value comes after the script and its name: then it is the script's "$1", data.)
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "ksh", "zsh", "busybox"})
_RUN_CODE = frozenset(
    {
        *("eval", "exec", "command", "builtin", "source", ".", "env", "sudo", "doas", "su"),
        *("runuser", "xargs", "timeout", "nohup", "nice", "ionice", "chrt", "taskset"),
        *("setsid", "stdbuf", "time", "watch", "ssh", "chroot", "nsenter", "unshare"),
        *("systemd-run", "flock", "strace", "ltrace", "gdb", "find", "parallel", "script"),
        *("awk", "gawk", "mawk", "sed", "perl", "python", "python3", "ruby", "node", "php"),
        *("lua", "tclsh", "expect", "at", "batch", "crontab", "trap", "alias", "make"),
    }
)


class ValueRefused(RunbookRunnerError):
    """A value that would be an option of the command (it begins with ``-`` where the
    command reads options): the command is not sent."""


def quote(value: Any) -> str:
    """The one place values become shell words."""
    return shlex.quote(_text(value))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Placeholder:
    name: str
    offset: int  # in the string, or in its word (``word`` says which)
    word: int | None = None


@dataclass(frozen=True)
class Template:
    """A command, parsed at load time: ``source`` as written (a string), or ``words``
    (the list form; ``source`` is then the line it shows, placeholders as written)."""

    source: str
    words: tuple[str, ...] | None = None

    @classmethod
    def of(cls, spec: str | Sequence[Any]) -> Template:
        """A template from the runbook's value: a string or a list of words."""
        if isinstance(spec, str):
            return cls(spec)
        words = tuple(_text(w) for w in spec)
        return cls(" ".join(_shown(w) for w in words), words)

    @property
    def is_list(self) -> bool:
        return self.words is not None

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        if self.words is None:
            return tuple(
                Placeholder(m["name"], m.start()) for m in PLACEHOLDER.finditer(self.source)
            )
        return tuple(
            Placeholder(m["name"], m.start(), i)
            for i, word in enumerate(self.words)
            for m in PLACEHOLDER.finditer(word)
        )

    def malformed(self) -> tuple[int | None, int] | None:
        """(word, offset) of a ``{{`` or ``}}`` that is not part of a placeholder."""
        for index, text in self._parts():
            stripped = PLACEHOLDER.sub(lambda m: " " * len(m.group()), text)
            loose = _LOOSE_BRACES.search(stripped)
            if loose:
                return index, loose.start()
        return None

    def _parts(self) -> list[tuple[int | None, str]]:
        if self.words is None:
            return [(None, self.source)]
        return list(enumerate(self.words))

    def option_placeholders(self) -> tuple[str, ...]:
        """The names whose value begins a word where the command reads options: a value
        that begins with '-' there is refused."""
        if self.words is None:
            return ()
        operands = _operands_from(self.words)
        names = []
        for index, word in enumerate(self.words[:operands]):
            match = PLACEHOLDER.match(word)
            if index > 0 and match:
                names.append(match["name"])
        return tuple(names)

    def fill(self, lookup: Callable[[str], Any]) -> str:
        """The text with values inserted as they are: for text parsed here, never for a shell."""

        def value(match: re.Match[str]) -> str:
            found = lookup(match["name"])
            return "" if found is None else str(found)

        return PLACEHOLDER.sub(value, self.source)

    def render(
        self, lookup: Callable[[str], Any], mask: Callable[[str], bool] | None = None
    ) -> str:
        """The command line to send: each word quoted once (:func:`quote`).

        ``mask`` names the placeholders to show as ``***`` (secrets in output): the line is
        then for showing, never sent. A line to send (no ``mask``) whose value would be an
        option of the command raises :class:`ValueRefused`.
        """
        if self.words is None:
            # The loader lets no placeholder into a command string; one built elsewhere
            # still gets each value quoted.
            return PLACEHOLDER.sub(lambda m: quote(lookup(m["name"])), self.source)
        operands = _operands_from(self.words)
        line = []
        for index, word in enumerate(self.words):
            if mask is not None and any(mask(m["name"]) for m in PLACEHOLDER.finditer(word)):
                line.append(quote("***"))
                continue
            text = PLACEHOLDER.sub(lambda m: _text(lookup(m["name"])), word)
            if (
                mask is None
                and 0 < index < operands
                and PLACEHOLDER.match(word)
                and text.startswith("-")
            ):
                raise ValueRefused(
                    f"not sent: {self.source!r}: the value {text[:60]!r} begins with '-' "
                    f"where {self.words[0]} reads options (word {index + 1}); a runbook "
                    "puts '--' before a value that may"
                )
            line.append(quote(text))
        return " ".join(line)


def _shown(word: str) -> str:
    """A word as the list form shows it in one line: literal parts quoted, placeholders kept."""
    parts, position = [], 0
    for match in PLACEHOLDER.finditer(word):
        if match.start() > position:
            parts.append(shlex.quote(word[position : match.start()]))
        parts.append(match.group())
        position = match.end()
    if position < len(word) or not parts:
        parts.append(shlex.quote(word[position:]))
    return "".join(parts)


def _command_name(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _operands_from(words: tuple[str, ...]) -> int:
    """The index of the first word that can only be an operand: after ``--``, or after
    a shell's ``-c SCRIPT NAME``."""
    if len(words) > 3 and _command_name(words[0]) in _SHELLS and words[1] == "-c":
        return 3
    return words.index("--") + 1 if "--" in words else len(words)


def word_problems(words: Sequence[str]) -> list[tuple[int, int, str]]:
    """(word, offset, message) for each placeholder that could be a command (load time)."""
    problems: list[tuple[int, int, str]] = []
    name = _command_name(words[0]) if words else ""
    shell_c = name in _SHELLS and len(words) > 1 and words[1] == "-c"
    for index, word in enumerate(words):
        match = PLACEHOLDER.search(word)
        if match is None:
            continue
        if index == 0:
            problems.append((index, match.start(), "a value cannot be the command to run"))
        elif shell_c and index < 4:
            problems.append(
                (
                    index,
                    match.start(),
                    f"{words[0]} -c runs its script as code: keep the script literal and "
                    "pass the value after it and its name, where the script reads it as "
                    f'"$1": [{name}, -c, \'... "$1"\', {name}, "{{{{ value }}}}"]',
                )
            )
        elif name in _RUN_CODE or (name in _SHELLS and not shell_c):
            problems.append(
                (
                    index,
                    match.start(),
                    f"{words[0]} can run its words as code: a value in them could be a command",
                )
            )
    return problems


def list_form_of(source: str) -> str:
    """The list form to write for a command string with placeholders (for the error)."""
    found = [m.group() for m in PLACEHOLDER.finditer(source)]
    marked = PLACEHOLDER.sub(lambda m: f"PLACEHOLDER{found.index(m.group())}X", source)
    try:
        lexer = shlex.shlex(marked, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = [re.sub(r"PLACEHOLDER(\d+)X", lambda m: found[int(m[1])], t) for t in lexer]
    except ValueError:
        tokens = []
    if tokens and not any(t and set(t) <= set("();<>|&") for t in tokens):
        return "[" + ", ".join(_yaml_word(t) for t in tokens) + "]"
    # A pipeline or a list: the shell runs the literal script, the values are its "$1"...
    names = list(dict.fromkeys(m.group() for m in PLACEHOLDER.finditer(source)))
    script = source
    for number, placeholder in enumerate(names, start=1):
        script = script.replace(placeholder, f'"${number}"')
    values = ", ".join(f'"{name}"' for name in names)
    return f"[sh, -c, {_yaml_word(script)}, sh, {values}]"


def _yaml_word(token: str) -> str:
    if PLACEHOLDER.search(token):
        return f'"{token}"'
    if re.fullmatch(r"[A-Za-z0-9_./=:%+-]+", token):
        return token
    if "'" not in token and "\n" not in token:
        return f"'{token}'"
    return json.dumps(token)  # a YAML double-quoted string, on one line


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
