"""Parser for a whitespace table with a header line (``lsblk``, ``ps -o ...``, ``ss -tln``).

The header names the fields (lower-cased snake_case: ``MOUNTPOINT`` -> ``mountpoint``,
``%CPU`` -> ``cpu``). Cells are split on whitespace; the last column takes the rest of
the line (a command with spaces), and a row with fewer cells than columns leaves the
last ones ``None`` (an empty ``MOUNTPOINT``). Every value is text. A header that
repeats a name or holds no name is refused, as is a row with no header.
"""

from __future__ import annotations

from runbook_runner.errors import ParseError
from runbook_runner.observe.state import TableRow, snake


def parse_table(text: str) -> tuple[TableRow, ...]:
    lines = [ln.rstrip("\r") for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ParseError("the command printed nothing (not even a header line)")
    names = [snake(word) for word in lines[0].split()]
    if any(not name for name in names):
        raise ParseError(f"the header has a column with no name: {lines[0][:80]!r}")
    if any(name.startswith("c_") for name in names):
        raise ParseError(
            f"the first line is not a header (a number where a name goes): {lines[0][:80]!r}"
        )
    if len(set(names)) != len(names):
        raise ParseError(f"the header repeats a column name: {lines[0][:80]!r}")
    rows = []
    for line in lines[1:]:
        cells = line.split(None, len(names) - 1)
        rows.append(TableRow(extra=tuple(zip(names, cells, strict=False))))
    return tuple(rows)
