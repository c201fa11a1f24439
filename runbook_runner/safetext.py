"""The host's text is data: made visible for a terminal, escaped for Markdown and HTML.

Whatever a host prints (command output, error text, GPU and process names) may hold
escape sequences that set a window title, write the clipboard (OSC 52), clear the
screen, or a ``\\r`` that overwrites a line. :func:`visible` shows each control
character as an escape (``\\x1b``, ``\\r``) instead; every path that puts text on the
terminal goes through it (cli/console.py's ``Output``, cli/__init__.py's errors). :func:`markdown_cell`
does the same for a cell of a Markdown table, and escapes what Markdown or HTML would
read as markup. :func:`json_escaped` does it for a line of JSON (the run journal).
"""

from __future__ import annotations

import re
import secrets

# C0 controls, DEL, C1 controls, and the Unicode format characters that reorder or hide
# text (bidi overrides and isolates, line and paragraph separators, zero-width joiners).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_CONTROL_KEEP_NL_TAB = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_CONTROL_KEEP_NL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_CONTROL_KEEP_TAB = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\x1b": "\\x1b", "\x00": "\\x00"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, lines: bool = True, tabs: bool = True) -> str:
    """``text`` with every control character shown as an escape.

    ``lines`` keeps ``\\n`` as a line break (line-structured output); ``tabs`` keeps
    ``\\t``. Everything else below 0x20, DEL, C1 and the bidi/format characters become
    ``\\xNN`` / ``\\uNNNN``, so nothing the host printed moves the cursor or reaches the
    terminal as a command.
    """
    if lines and tabs:
        pattern = _CONTROL_KEEP_NL_TAB
    elif lines:
        pattern = _CONTROL_KEEP_NL
    elif tabs:
        pattern = _CONTROL_KEEP_TAB
    else:
        pattern = _CONTROL
    return pattern.sub(_shown, text)


def json_escaped(text: str) -> str:
    """JSON text (``json.dumps`` with ``ensure_ascii=False``) with DEL, the C1 controls and
    the format characters :func:`visible` escapes written as ``\\uXXXX``: the same JSON once
    parsed, and a file safe to ``cat`` (no U+202E reordering it, no U+009B, a C1 CSI,
    moving the cursor)."""
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


# What json.dumps leaves raw of _CONTROL: DEL, C1, the format characters. (C0 it escapes; a
# lone surrogate, a byte that was not UTF-8, is left to the writer's "replace".)
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


# Our own colours (render.Style) travel inside a line as tokens no host can write: private-use
# characters around a number drawn when this process starts. Only :func:`visible_styled`
# turns them into SGR codes; every escape sequence already in the text (a host's
# ``\x1b[32m`` included) is shown escaped, so host text never styles the terminal.
_NONCE = secrets.token_hex(8)
_OPEN, _CLOSE = "\ue000", "\ue001"
_OWN_TOKEN = re.compile(re.escape(_OPEN + _NONCE) + r"([0-9;]+)" + re.escape(_CLOSE))
_SGR_CODES = frozenset({"0", "1", "2", "3", "31", "32", "33", "36"})


def own_sgr(codes: str) -> str:
    """The tool's own colour ``codes`` (``1;31``), as a token for :func:`visible_styled`."""
    if not set(codes.split(";")) <= _SGR_CODES:
        raise ValueError(f"not one of our colours: {codes!r}")
    return f"{_OPEN}{_NONCE}{codes}{_CLOSE}"


def visible_styled(text: str) -> str:
    """Like :func:`visible`, but turns the colour tokens ``render.Style`` adds into SGR codes.

    Host text is escaped by ``Style`` before it is coloured; this is the last guard on a
    whole line, which may hold both: any escape sequence in it is shown, not obeyed.
    """
    parts: list[str] = []
    position = 0
    for match in _OWN_TOKEN.finditer(text):
        parts.append(visible(text[position : match.start()]))
        parts.append(f"\x1b[{match.group(1)}m")
        position = match.end()
    parts.append(visible(text[position:]))
    return "".join(parts)


def plain(text: str) -> str:
    """``text`` without the tool's colour tokens (for a stream that is not a terminal)."""
    return _OWN_TOKEN.sub("", text)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~!#])")


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table: no markup, no HTML, no control characters.

    ``<`` ``>`` ``&`` become entities (no tags, so no ``<script>``); the characters that
    start Markdown constructs (code, emphasis, links, images, cells) are backslash-escaped;
    a newline becomes a visible ``\\n`` so the row stays one row.
    """
    shown = visible(text, lines=False, tabs=False)
    escaped = shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escaped)
