"""The flags of a launch command line (SGLang, vLLM), typed: shared by their parsers. Pure."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping

from runbook_runner.errors import ParseError


def flag_values(
    text: str, valued: Mapping[str, str], types: Mapping[str, Callable[[str], object]]
) -> tuple[list[str], dict[str, object]]:
    """The command's words, and the value of each flag in ``valued`` (``--flag V`` or
    ``--flag=V``), named by its field and converted by ``types``."""
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise ParseError(f"the launch command does not split into words: {error}") from None
    values: dict[str, object] = {}
    for i, word in enumerate(words):
        flag, equals, inline = word.partition("=")
        if flag not in valued:
            continue
        if equals:
            raw = inline
        elif i + 1 < len(words):
            raw = words[i + 1]
        else:
            raise ParseError(f"{flag} is missing its value")
        field = valued[flag]
        convert = types[field]
        try:
            values[field] = convert(raw)
        except ValueError:
            name = getattr(convert, "__name__", "a value")
            raise ParseError(f"{flag} {raw!r}: expected {name}") from None
    return words, values
