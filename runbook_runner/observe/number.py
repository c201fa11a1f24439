"""Parser for a number printed alone (``nproc``, ``cat /proc/sys/fs/file-max``, ``wc -l``).

One non-empty line holding a number, optionally followed by one unit word
(``42``, ``-3.5``, ``96413 MiB``). Anything else -- several lines, several numbers,
text -- is refused: a count must not be guessed from a line that says something else.
"""

from __future__ import annotations

import math
import re

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import Number

_NUMBER = re.compile(r"^(?P<num>[-+]?\d{1,30}(?:\.\d{1,30})?)(?:\s*(?P<unit>[A-Za-z%]{1,10}))?$")


def parse_number(text: str) -> Number:
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ParseError("the command printed nothing: expected a number")
    if len(lines) > 1:
        raise ParseError(f"expected one line with a number, got {len(lines)} lines")
    match = _NUMBER.match(lines[0])
    if match is None:
        raise ParseError(f"expected a number, got {lines[0][:60]!r}")
    text_value = match["num"]
    value: int | float = int(text_value) if "." not in text_value else float(text_value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ParseError(f"{text_value[:40]!r} is out of range")
    return Number(value=value, unit=match["unit"])
