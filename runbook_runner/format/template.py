"""Command templates: ``{{ name }}`` placeholders filled with shell-quoted values.

Every value that enters a command goes through :func:`quote`, here and
nowhere else, so ``a b; touch /tmp/pwned`` stays one literal argument. Whether a
placeholder's value stays data is decided by :mod:`shellgrammar` (where it sits in the
shell's grammar) and :mod:`datacommands` (which commands take a value only as data).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runbook_runner.format.datacommands import allowed_commands
from runbook_runner.format.shellgrammar import PLACEHOLDER, shell_problems

__all__ = [
    "PLACEHOLDER",
    "Interpolated",
    "Placeholder",
    "Template",
    "allowed_commands",
    "quote",
    "shell_problems",
]

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
            word = quote(lookup(match["name"]))
            if word.isdigit() and self.source[match.end() : match.end() + 1] in ("<", ">"):
                # Unquoted digits glued to a redirection are a file descriptor (0>&1):
                # quoted, they stay the word they are.
                word = f"'{word}'"
            return word

        return PLACEHOLDER.sub(substitute, self.source)


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
