"""A journal's text made safe for a Markdown page: escaped, never markup.

Everything in a journal came from a host or an operator, so all of it is data: it is
escaped for Markdown and HTML, never placed where it could become markup, a link, an
include (``--8<--``), an abbreviation or one of the site's ``{{ fig.* }}`` placeholders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from runbook_runner.safetext import visible

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def _flat(value: object) -> str:
    """One line, with every control and format character (ESC, BEL, U+202E) shown as an
    escape (``\\x1b``), never passed to the page."""
    return visible(" ".join(str(value).split()), lines=False, tabs=False)


def text(value: object, limit: int = 300) -> str:
    """Host text as inert Markdown: one line, HTML-escaped, Markdown characters escaped."""
    flat = _flat(value)
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = flat.replace('"', "&quot;")
    return _MD_SPECIAL.sub(r"\\\1", flat)


def code(value: object, limit: int = 300) -> str:
    """Host text shown as code in a table cell: an HTML <code> element, every character inert."""
    flat = _flat(value)
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    escaped = (
        flat.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("|", "&#124;")
        .replace("`", "&#96;")
        .replace("{", "&#123;")
        .replace("}", "&#125;")
        .replace("*", "&#42;")
        .replace("_", "&#95;")
        .replace("[", "&#91;")
        .replace("]", "&#93;")
        .replace("\\", "&#92;")
    )
    return f"<code>{escaped}</code>"


def yaml_string(value: object) -> str:
    """A YAML double-quoted scalar (JSON's escapes are YAML's), ASCII only, and plain: the
    theme shows front matter and nav titles in places that may not escape HTML, so the
    characters that could start markup are dropped there (the body shows the full text)."""
    plain = " ".join(_UNSAFE.sub(" ", str(value)).split())
    return json.dumps(plain, ensure_ascii=True)


_UNSAFE = re.compile(
    "[<>&`{}|\\\\\\[\\]\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]"
)


def slug(title: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return (words[:80].rstrip("-")) or "postmortem"


_GPU_TARGET = re.compile(r"(?:--id|-i)[ =]([0-9][0-9,]*)\b")
_PID_TARGET = re.compile(r"^\s*(?:sudo -n\s+)?kill\s+(?:-[A-Z0-9]+\s+)*([0-9 ]+)$")


def targets(commands: Iterable[str]) -> str:
    """The GPUs and PIDs a step's commands name, e.g. 'GPU 0, GPU 2' or 'PID 4101, PID 4120'."""
    found: list[str] = []
    for command in commands:
        for match in _GPU_TARGET.finditer(command):
            found += [f"GPU {n}" for n in match.group(1).split(",") if n]
        pid = _PID_TARGET.match(command)
        if pid:
            found += [f"PID {n}" for n in pid.group(1).split()]
    unique = list(dict.fromkeys(found))
    return ", ".join(unique) if unique else "–"
