"""'did you mean ...?' for a name that is not defined: one wording for every message."""

from __future__ import annotations

import difflib


def suggest(name: str, known: list[str]) -> str:
    """The end of an error message about ``name``: the closest known name, or all of them."""
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (defined: {', '.join(sorted(known))})" if known else " (none are defined)"
