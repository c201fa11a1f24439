"""Records for any command's output: a line of text, a number, a row of a table."""

from __future__ import annotations

from dataclasses import dataclass

from runbook_runner.observe.state.fields import OpenRecord, extra_values, reported


@dataclass(frozen=True)
class TextLine:
    """One non-empty line of a command's output (kernel messages, holders...)."""

    text: str | None = reported("text")

    def describe(self) -> str:
        return repr(self.text)

    def target(self) -> str:
        return str(self.text)


@dataclass(frozen=True)
class Number:
    """A number printed on a line of its own (``nproc``, ``cat /proc/sys/...``, ``wc -l``)."""

    value: int | float | None = reported("value")
    unit: str | None = reported("unit")  # a word after the number, as printed ("42 MiB" -> "MiB")

    def describe(self) -> str:
        return "the number"


@dataclass(frozen=True)
class TableRow(OpenRecord):
    """One row of a whitespace table with a header line (``lsblk``, ``ps -o ...``, ``ss``).

    Fields are named from the header (``MOUNTPOINTS`` -> ``mountpoints``, ``%CPU`` -> ``cpu``,
    ``MAJ:MIN`` -> ``maj_min``); every value is text (``str | None``; ``None`` where the
    row has no value in that column), so compare with strings: ``type == 'disk'``.
    """

    extra: tuple[tuple[str, str], ...] = extra_values()

    def describe(self) -> str:
        return " ".join(value for _, value in self.extra)[:80] or "an empty row"
