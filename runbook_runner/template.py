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


_EXPRESSION = re.compile(r"\{\{(?P<source>.*?)\}\}", re.S)


@dataclass(frozen=True)
class Interpolated:
    """Text with ``{{ expression }}`` parts, for messages (never for commands)."""

    source: str
    parts: tuple[str | tuple[str, Any], ...]  # literal text, or (expression source, tree)

    @classmethod
    def parse(cls, source: str) -> Interpolated:
        from runbook_runner import expr  # here: expr does not need templates

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
