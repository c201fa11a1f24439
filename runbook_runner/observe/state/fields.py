"""What every state record is made of: fields with a label and a unit, open records.

A field is :func:`reported` (``None`` when the host did not report it) with the label and
unit that check messages use (``memory.used 96,413 MiB``). An :class:`OpenRecord` also
takes fields from the output (a table's header, a file's keys). The functions below read
a record type's fields for the checks, the type checker and the reference.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import field
from typing import Any, ClassVar


def reported(label: str, unit: str = "") -> Any:
    """A field the host may fail to report (``None``), with its label and unit."""
    return field(default=None, metadata={"label": label, "unit": unit})


def extra_values() -> Any:
    """The values of an open record beyond its declared fields: not a field of its own."""
    return field(default=(), metadata={"hidden": True}, repr=False)


_OPEN_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class OpenRecord:
    """A record whose fields also come from the output (a table's header, a file's keys).

    ``open_fields`` is the type of every field beyond the declared ones; they are looked up
    in ``extra`` and are ``None`` when the host did not print them.
    """

    open_fields: ClassVar[str] = "str | None"
    extra: tuple[tuple[str, Any], ...]

    def __getattr__(self, name: str) -> Any:
        if not _OPEN_NAME.match(name) or name == "extra":
            raise AttributeError(name)
        for key, value in self.extra:
            if key == name:
                return value
        return None

    def has(self, name: str) -> bool:
        return name in field_names(type(self)) or any(key == name for key, _ in self.extra)


_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(record_type: type) -> tuple[str, ...]:
    """The declared fields of a record (an open record has more: see :func:`open_type`);
    read once per type: every value a check reads asks."""
    names = _NAMES.get(record_type)
    if names is None:
        fields = dataclasses.fields(record_type)
        names = _NAMES[record_type] = tuple(f.name for f in fields if not f.metadata.get("hidden"))
    return names


def open_type(record_type: type) -> str | None:
    """The type of the fields an open record takes from the output, ``None`` if closed."""
    return (
        getattr(record_type, "open_fields", None) if issubclass(record_type, OpenRecord) else None
    )


def has_field(record_type: type, name: str) -> bool:
    """Whether an expression may read ``name`` on this record (any name, on an open one)."""
    return name in field_names(record_type) or (
        open_type(record_type) is not None and bool(_OPEN_NAME.match(name))
    )


def snake(key: str) -> str:
    """A host's key as a field name: ``MemAvailable`` -> ``mem_available``, ``%CPU`` -> ``cpu``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    return text if text and text[0].isalpha() else f"c_{text}" if text else ""


_LABELS: dict[tuple[type, str], tuple[str, str]] = {}


def field_label(record_type: type, name: str) -> tuple[str, str]:
    """The (label, unit) pair of one field, for messages."""
    found = _LABELS.get((record_type, name))
    if found is None:
        found = (name, "")
        for f in dataclasses.fields(record_type):
            if f.name == name:
                found = (f.metadata.get("label", name), f.metadata.get("unit", ""))
        _LABELS[(record_type, name)] = found
    return found


_KINDS: dict[type, Mapping[str, str]] = {}


def field_kinds(record_type: type) -> Mapping[str, str]:
    """Each field's kind for type checks: 'number', 'string' or 'boolean' (from the annotations)."""
    if record_type in _KINDS:
        return _KINDS[record_type]
    hints = typing.get_type_hints(record_type)
    kinds: dict[str, str] = {}
    for name in field_names(record_type):
        args = set(typing.get_args(hints[name])) or {hints[name]}
        args.discard(type(None))
        if args <= {int, float}:
            kinds[name] = "number"
        elif args == {bool}:
            kinds[name] = "boolean"
        elif args == {str}:
            kinds[name] = "string"
        else:
            kinds[name] = "any"
    _KINDS[record_type] = kinds
    return kinds
